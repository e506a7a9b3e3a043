"""StreamIndex against a naive oracle (a dict of live sequences), under random adds and removals."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.store.api import StoreLimits
from appliance.store.index import StreamIndex
from appliance.store.subjects import subject_matches

SUBJECTS = ["a.1", "a.2", "b.1"]
steps = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(1, 3), st.sampled_from(SUBJECTS)),
        st.tuples(st.just("remove"), st.integers(1, 60)),
        st.tuples(st.just("skip"), st.integers(1, 70)),
    ),
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(steps)
def test_index_queries_match_a_naive_oracle(ops: list[tuple[object, ...]]) -> None:
    index = StreamIndex(StoreLimits())
    live: dict[int, str] = {}
    last = 0
    for step in ops:
        if step[0] == "add":
            seq = index.last_seq + int(step[1])  # type: ignore[call-overload]
            index.add(seq, str(step[2]), 10, seq)
            live[seq] = str(step[2])
            last = seq
        elif step[0] == "remove":
            assert index.remove(int(step[1])) == (live.pop(int(step[1]), None) is not None)  # type: ignore[call-overload]
        else:
            target = int(step[1])  # type: ignore[call-overload]
            assert index.skip_to(target) == sorted(s for s in live if s < target)
            live = {s: v for s, v in live.items() if s >= target}
            last = max(last, target - 1)
        assert index.msgs == len(live)
        assert index.last_seq == last
        assert index.first_seq == (min(live) if live else last + 1)
        assert list(index.live_seqs(1)) == sorted(live)
        assert index.dead_in(1, last + 5) == set(range(1, last + 1)) - set(live)
        assert index.deleted() == ([s for s in range(min(live), last + 1) if s not in live] if live else [])
        for pattern in ["a.*", "a.1", "b.1", ">", "c"]:
            matching = sorted(s for s, v in live.items() if subject_matches(pattern, v))
            assert list(index.live_seqs(1, pattern)) == matching
            assert index.next_live(5, pattern) == next((s for s in matching if s >= 5), None)
            assert index.last_live(pattern) == (matching[-1] if matching else None)
        assert index.subject_counts() == {v: sum(1 for x in live.values() if x == v) for v in set(live.values())}
