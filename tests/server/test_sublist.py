"""The sublist against a naive oracle: every subscription whose pattern matches the subject."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.protocol.subjects import is_valid_subject, subject_matches
from appliance.server.sublist import Sublist, Subscription

tokens = st.sampled_from([b"a", b"b", b"c", b"*", b">"])
patterns = st.lists(tokens, min_size=1, max_size=4).map(b".".join).filter(is_valid_subject)
literals = st.lists(st.sampled_from([b"a", b"b", b"c"]), min_size=1, max_size=4).map(b".".join)


def oracle(subs: list[Subscription], subject: bytes) -> tuple[set[int], dict[bytes, set[int]]]:
    plain = {id(s) for s in subs if s.queue is None and subject_matches(s.subject, subject)}
    queues: dict[bytes, set[int]] = {}
    for s in subs:
        if s.queue is not None and subject_matches(s.subject, subject):
            queues.setdefault(s.queue, set()).add(id(s))
    return plain, queues


def as_sets(result: tuple[tuple[Subscription, ...], tuple[tuple[Subscription, ...], ...]]
            ) -> tuple[set[int], dict[bytes, set[int]]]:
    plain, groups = result
    return {id(s) for s in plain}, {g[0].queue: {id(s) for s in g} for g in groups if g and g[0].queue}


@settings(max_examples=300, deadline=None)
@given(ops=st.lists(st.tuples(st.booleans(), patterns, st.sampled_from([None, b"q1", b"q2"])), max_size=30),
       probes=st.lists(literals, min_size=1, max_size=10))
def test_match_equals_oracle_through_inserts_removes_and_cache(
        ops: list[tuple[bool, bytes, bytes | None]], probes: list[bytes]) -> None:
    sublist = Sublist(cache_entries_max=4)
    live: list[Subscription] = []
    for i, (add, pattern, queue) in enumerate(ops):
        if add or not live:
            sub = Subscription(None, pattern, queue, str(i).encode())
            sublist.insert(sub)
            live.append(sub)
        else:
            sub = live.pop(i % len(live))
            assert sublist.remove(sub)
        for subject in probes:  # every probe goes through the cache too
            assert as_sets(sublist.match(subject)) == oracle(live, subject)
    assert sublist.count == len(live)
    assert sorted(id(s) for s in sublist.all_subscriptions()) == sorted(id(s) for s in live)


def test_removing_an_unknown_subscription_is_false() -> None:
    sublist = Sublist()
    assert not sublist.remove(Subscription(None, b"a.b", None, b"1"))
    sub = Subscription(None, b"a.b", None, b"1")
    sublist.insert(sub)
    assert sublist.remove(sub)
    assert not sublist.remove(sub)
    assert sublist.count == 0


def test_cache_is_bounded() -> None:
    sublist = Sublist(cache_entries_max=8)
    sublist.insert(Subscription(None, b">", None, b"1"))
    for i in range(100):
        sublist.match(b"s.%d" % i)
    assert len(sublist.cache) <= 8


def test_a_full_cache_drops_its_oldest_entries_and_keeps_the_newest() -> None:
    sublist = Sublist(cache_entries_max=16)
    sublist.insert(Subscription(None, b">", None, b"1"))
    cache = sublist.cache  # the router keeps this very dict: eviction must happen in place
    for i in range(1000):
        sublist.match(b"s.%d" % i)
    assert sublist.cache is cache
    assert 0 < len(cache) <= 16
    assert b"s.999" in cache and b"s.0" not in cache


def test_subjects_under_an_uncached_prefix_match_but_stay_out_of_the_cache() -> None:
    sublist = Sublist()
    ack = Subscription(None, b"$JS.ACK.>", None, b"1")
    sublist.insert(ack)
    sublist.uncached_prefixes = (b"$JS.ACK.",)
    assert sublist.match(b"$JS.ACK.S.C.1.1.1.1.0") == ((ack,), ())
    assert sublist.match(b"other") == ((), ())
    assert list(sublist.cache) == [b"other"]


@settings(max_examples=300, deadline=None)
@given(ops=st.lists(st.tuples(st.booleans(), patterns, st.sampled_from([None, b"q1"])), max_size=30),
       probes=st.lists(st.lists(st.sampled_from([b"a", b"b", b"c", b"d"]), min_size=1, max_size=6)
                       .map(lambda t: b"a." + b".".join(t)), min_size=1, max_size=10))
def test_uncached_prefix_results_equal_the_oracle_through_changes(
        ops: list[tuple[bool, bytes, bytes | None]], probes: list[bytes]) -> None:
    """Subjects under an uncached prefix are answered from a per-prefix memo when the trie allows
    it; the memo must follow every insert and remove."""
    sublist = Sublist(cache_entries_max=4)
    sublist.uncached_prefixes = (b"a.",)
    live: list[Subscription] = []
    for i, (add, pattern, queue) in enumerate(ops):
        if add or not live:
            sub = Subscription(None, pattern, queue, str(i).encode())
            sublist.insert(sub)
            live.append(sub)
        else:
            sub = live.pop(i % len(live))
            assert sublist.remove(sub)
        for subject in probes + probes:  # the second pass is answered from the memo
            assert as_sets(sublist.match(subject)) == oracle(live, subject)
    assert all(not subject.startswith(b"a.") for subject in sublist.cache)


def test_acks_of_one_stream_share_one_memoised_result_until_the_sublist_changes() -> None:
    sublist = Sublist()
    sublist.uncached_prefixes = (b"$JS.ACK.",)
    acks = Subscription(None, b"$JS.ACK.>", None, b"1")
    everything = Subscription(None, b">", None, b"2")
    sublist.insert(acks)
    sublist.insert(everything)
    first = sublist.match(b"$JS.ACK.S.C.1.1.1.10.5")
    assert sublist.match(b"$JS.ACK.S.C.1.2.2.11.4") is first  # the same memoised result
    assert {id(s) for s in first[0]} == {id(acks), id(everything)}
    deep = Subscription(None, b"$JS.ACK.S.C.1.2.*.*.*", None, b"3")
    sublist.insert(deep)  # a deeper pattern: the memo is dropped, and this subject now walks on
    matched = {id(s) for s in sublist.match(b"$JS.ACK.S.C.1.2.2.11.4")[0]}
    assert matched == {id(acks), id(everything), id(deep)}
    assert {id(s) for s in sublist.match(b"$JS.ACK.S.C.1.3.3.12.3")[0]} == {id(acks), id(everything)}
