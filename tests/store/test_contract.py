"""The StreamStore contract, run against every implementation (memory, file, file on FaultFS).

Each test reads as a rule of nats-server's stream store; file stores are also reopened to show
that the rule survives a restart.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.store.api import StoreLimitError, StoreLimits, StreamStore
from appliance.store.filestore import FileStoreConfig, FileStreamStore
from appliance.store.memory import MemoryStreamStore

from .conftest import SMALL_SEGMENT_BYTES, Harness

NS = 1_000_000_000


def fill(store: StreamStore, subjects: list[str], *, payload: bytes = b"data", ts0: int = NS) -> list[int]:
    return [store.store_msg(s, b"", payload + str(i).encode(), ts0 + i) for i, s in enumerate(subjects)]


def test_store_assigns_sequences_from_one_and_load_returns_the_message(harness: Harness) -> None:
    store = harness.make(StoreLimits())
    assert store.store_msg("orders.new", b"NATS/1.0\r\nA: b\r\n\r\n", b"hello", 5 * NS) == 1
    assert store.store_msg("orders.new", b"", b"", 6 * NS) == 2
    for s in (store, harness.reopen(store)):
        msg = s.load(1)
        assert msg is not None
        assert (msg.seq, msg.subject, msg.headers, msg.payload, msg.timestamp_ns) == (
            1, "orders.new", b"NATS/1.0\r\nA: b\r\n\r\n", b"hello", 5 * NS,
        )
        assert s.load(2) is not None and s.load(2).payload == b""  # type: ignore[union-attr]
        assert s.load(3) is None
        assert s.load(0) is None


def test_state_counts_messages_bytes_bounds_and_subjects(harness: Harness) -> None:
    store = harness.make(StoreLimits())
    assert store.state().first_seq == 1 and store.state().last_seq == 0 and store.state().msgs == 0
    fill(store, ["a", "b", "a"])
    state = store.state()
    expected_bytes = sum(store.msg_size(s, b"", b"data" + str(i).encode()) for i, s in enumerate("aba"))
    assert (state.msgs, state.bytes, state.first_seq, state.last_seq) == (3, expected_bytes, 1, 3)
    assert (state.first_ts_ns, state.last_ts_ns, state.num_subjects, state.num_deleted) == (NS, NS + 2, 2, 0)
    assert harness.reopen(store).state() == state


def test_msg_size_is_nats_servers_accounting(harness: Harness) -> None:
    store = harness.make(StoreLimits())
    if isinstance(store, FileStreamStore):
        assert store.msg_size("foo", b"", b"hello") == 22 + 3 + 5 + 8
        assert store.msg_size("foo", b"hdr", b"hello") == 22 + 3 + 4 + 3 + 5 + 8
    else:
        assert store.msg_size("foo", b"hdr", b"hello") == 3 + 3 + 5 + 16


def test_load_next_honours_literal_and_wildcard_filters(harness: Harness) -> None:
    store = harness.make(StoreLimits())
    fill(store, ["orders.eu.new", "orders.us.new", "billing.eu", "orders.eu.done", "orders.us.new"])
    for s in (store, harness.reopen(store)):

        def next_seq(filter_subject: str, start: int) -> int | None:
            msg = s.load_next(filter_subject, start)
            return None if msg is None else msg.seq

        assert next_seq("orders.us.new", 1) == 2
        assert next_seq("orders.us.new", 3) == 5
        assert next_seq("orders.us.new", 6) is None
        assert next_seq("orders.*.new", 3) == 5
        assert next_seq("orders.>", 3) == 4
        assert next_seq("*.eu", 1) == 3
        assert next_seq(">", 4) == 4
        assert next_seq("nothing.here", 1) is None
        assert next_seq("orders", 1) is None


def test_load_last_by_subject_moves_back_when_the_last_is_deleted(harness: Harness) -> None:
    store = harness.make(StoreLimits())
    fill(store, ["kv.a", "kv.b", "kv.a", "kv.b", "kv.a"])
    assert store.load_last("kv.a").seq == 5  # type: ignore[union-attr]
    assert store.load_last("kv.*").seq == 5  # type: ignore[union-attr]
    assert store.delete(5)
    for s in (store, harness.reopen(store)):
        assert s.load_last("kv.a").seq == 3  # type: ignore[union-attr]
        assert s.load_last("kv.*").seq == 4  # type: ignore[union-attr]
        assert s.load_last(">").seq == 4  # type: ignore[union-attr]
        assert s.load_last("kv.c") is None


def test_delete_leaves_a_gap_and_moves_first_seq_when_it_removes_the_first(harness: Harness) -> None:
    store = harness.make(StoreLimits())
    fill(store, ["a", "a", "a", "a"])
    assert store.delete(2)
    assert not store.delete(2)
    assert not store.delete(99)
    state = store.state(with_deleted=True)
    assert (state.msgs, state.first_seq, state.last_seq, state.num_deleted, state.deleted) == (3, 1, 4, 1, (2,))
    assert store.delete(1)
    assert store.state().first_seq == 3 and store.state().num_deleted == 0
    assert store.delete(4)
    reopened = harness.reopen(store)
    state = reopened.state()
    assert (state.msgs, state.first_seq, state.last_seq) == (1, 3, 4)
    assert reopened.store_msg("a", b"", b"next", 9 * NS) == 5


def test_erase_removes_the_bytes_as_well(harness: Harness) -> None:
    store = harness.make(StoreLimits())
    fill(store, ["a", "b", "c"], payload=b"secret-payload-")
    assert store.delete(2, erase=True)
    reopened = harness.reopen(store)
    assert reopened.load(2) is None
    assert [m.seq for m in reopened.scan()] == [1, 3]
    if isinstance(reopened, FileStreamStore):
        for seg in reopened.segments():
            raw = reopened.ops.read_all(seg.path)
            assert b"secret-payload-1" not in raw


def test_purge_all_keeps_the_sequence_going(harness: Harness) -> None:
    store = harness.make(StoreLimits())
    fill(store, ["a", "b", "c"])
    assert store.purge() == 3
    for s in (store, store := harness.reopen(store)):
        state = s.state()
        assert (state.msgs, state.bytes, state.first_seq, state.last_seq, state.num_subjects) == (0, 0, 4, 3, 0)
    assert store.store_msg("d", b"", b"", NS) == 4
    assert store.state().first_seq == 4


def test_purge_by_subject_with_keep_and_up_to_seq(harness: Harness) -> None:
    store = harness.make(StoreLimits())
    fill(store, ["a", "b", "a", "b", "a", "b", "a"])
    assert store.purge("a", keep=2) == 2  # removes 1 and 3
    assert [m.seq for m in store.scan()] == [2, 4, 5, 6, 7]
    assert store.purge("b", up_to_seq=6) == 2  # removes 2 and 4
    assert [m.seq for m in store.scan()] == [5, 6, 7]
    assert store.purge(keep=1) == 2
    reopened = harness.reopen(store)
    assert [m.seq for m in reopened.scan()] == [7]
    assert reopened.subject_counts() == {"a": 1}


def test_compact_removes_below_and_may_move_past_the_end(harness: Harness) -> None:
    store = harness.make(StoreLimits())
    fill(store, ["a"] * 5)
    assert store.compact(3) == 2
    assert store.state().first_seq == 3
    assert store.compact(10) == 3
    reopened = harness.reopen(store)
    state = reopened.state()
    assert (state.msgs, state.first_seq, state.last_seq) == (0, 10, 9)
    assert reopened.store_msg("a", b"", b"", NS) == 10


def test_reset_starts_over_at_sequence_zero_and_stays_empty_after_a_reopen(harness: Harness) -> None:
    store = harness.make(StoreLimits())
    fill(store, ["a", "b"] * 40, payload=b"x" * 64)  # several segments in the small-segment file stores
    store.delete(5)
    store.reset()
    for s in (store, store := harness.reopen(store)):
        state = s.state(with_deleted=True)
        assert (state.msgs, state.bytes, state.last_seq, state.num_subjects, state.deleted) == (0, 0, 0, 0, ())
        assert list(s.scan()) == []
    assert store.store_msg("c", b"", b"new", NS) == 1
    reopened = harness.reopen(store)
    assert [(m.seq, m.subject, m.payload) for m in reopened.scan()] == [(1, "c", b"new")]


def test_subject_counts_follow_stores_and_removals(harness: Harness) -> None:
    store = harness.make(StoreLimits())
    fill(store, ["x.1", "x.2", "y.1", "x.1"])
    store.delete(2)
    for s in (store, harness.reopen(store)):
        assert s.subject_counts() == {"x.1": 2, "y.1": 1}
        assert s.subject_counts("x.*") == {"x.1": 2}
        assert s.state().num_subjects == 2


def test_scan_yields_live_messages_in_order_from_a_sequence(harness: Harness) -> None:
    store = harness.make(StoreLimits())
    seqs = fill(store, [f"s.{i % 4}" for i in range(120)], payload=b"p" * 40)
    store.delete(50)
    for s in (store, harness.reopen(store)):
        assert [m.seq for m in s.scan(45)] == [q for q in seqs if q >= 45 and q != 50]
        assert [m.seq for m in s.scan(1, "s.1")] == [q for q in seqs if q % 4 == 2 and q != 50]
        assert all(m == s.load(m.seq) for m in s.scan(100))


# --- limits and retention -------------------------------------------------------------------------


def test_max_msgs_discard_old_drops_the_oldest(harness: Harness) -> None:
    store = harness.make(StoreLimits(max_msgs=3))
    fill(store, ["a"] * 5)
    for s in (store, harness.reopen(store)):
        state = s.state()
        assert (state.msgs, state.first_seq, state.last_seq) == (3, 3, 5)


def test_max_msgs_discard_new_refuses_with_nats_servers_error(harness: Harness) -> None:
    store = harness.make(StoreLimits(max_msgs=2, discard="new"))
    fill(store, ["a", "b"])
    with pytest.raises(StoreLimitError, match="maximum messages exceeded"):
        store.store_msg("c", b"", b"", NS)
    assert store.state().msgs == 2 and store.state().last_seq == 2


def test_max_bytes_discard_old_and_new(harness: Harness) -> None:
    probe = harness.make(StoreLimits())
    size = probe.msg_size("a", b"", b"x" * 10)
    store = harness.make(StoreLimits(max_bytes=3 * size))
    for i in range(5):
        store.store_msg("a", b"", b"x" * 10, NS + i)
    assert store.state().msgs == 3 and store.state().bytes == 3 * size
    strict = harness.make(StoreLimits(max_bytes=3 * size, discard="new"))
    for i in range(3):
        strict.store_msg("a", b"", b"x" * 10, NS + i)
    with pytest.raises(StoreLimitError, match="maximum bytes exceeded"):
        strict.store_msg("a", b"", b"x" * 10, NS)


def test_max_msgs_per_subject_keeps_history_like_kv(harness: Harness) -> None:
    store = harness.make(StoreLimits(max_msgs_per_subject=2, discard="new"))
    fill(store, ["$KV.b.k1", "$KV.b.k1", "$KV.b.k2", "$KV.b.k1"])
    for s in (store, harness.reopen(store)):
        assert s.subject_counts() == {"$KV.b.k1": 2, "$KV.b.k2": 1}
        assert [m.seq for m in s.scan()] == [2, 3, 4]


def test_discard_new_per_subject_refuses_the_new_message(harness: Harness) -> None:
    store = harness.make(StoreLimits(max_msgs_per_subject=1, discard="new", discard_new_per_subject=True))
    store.store_msg("k", b"", b"1", NS)
    with pytest.raises(StoreLimitError, match="maximum messages per subject exceeded"):
        store.store_msg("k", b"", b"2", NS)
    assert store.store_msg("other", b"", b"1", NS) == 2


def test_discard_new_still_replaces_at_the_subject_limit(harness: Harness) -> None:
    store = harness.make(StoreLimits(max_msgs=2, max_msgs_per_subject=1, discard="new"))
    fill(store, ["k1", "k2"])
    assert store.store_msg("k1", b"", b"v2", NS) == 3  # at max_msgs, but it replaces k1's value
    assert store.subject_counts() == {"k1": 1, "k2": 1}


def test_max_msg_size_counts_headers_and_payload(harness: Harness) -> None:
    store = harness.make(StoreLimits(max_msg_size=10))
    store.store_msg("a", b"12345", b"67890", NS)
    with pytest.raises(StoreLimitError, match="message size exceeds maximum allowed"):
        store.store_msg("a", b"12345", b"678901", NS)


def test_max_age_expires_from_the_head_and_tells_when_next(harness: Harness) -> None:
    store = harness.make(StoreLimits(max_age_ns=10 * NS))
    for i in range(5):
        store.store_msg("a", b"", b"", (100 + i) * NS)
    assert store.next_expiry_ns() == 110 * NS
    assert store.expire(111 * NS) == 2
    assert store.state().first_seq == 3
    assert store.next_expiry_ns() == 112 * NS
    reopened = harness.reopen(store)
    assert reopened.state().first_seq == 3
    assert reopened.expire(200 * NS) == 3
    assert reopened.next_expiry_ns() is None


def test_lowering_limits_enforces_them_at_once(harness: Harness) -> None:
    store = harness.make(StoreLimits())
    fill(store, ["a", "b", "a", "b", "a"])
    store.set_limits(StoreLimits(max_msgs_per_subject=1))
    assert [m.seq for m in store.scan()] == [4, 5]
    store.set_limits(StoreLimits(max_msgs=1))
    assert [m.seq for m in harness.reopen(store).scan()] == [5]


def test_store_batch_returns_consecutive_sequences(harness: Harness) -> None:
    store = harness.make(StoreLimits())
    seqs = store.store_batch([("a", b"", b"%d" % i, NS + i) for i in range(50)])
    assert seqs == list(range(1, 51))
    assert store.sync() >= 50


# --- snapshots ------------------------------------------------------------------------------------


def test_snapshot_restores_into_either_store(harness: Harness, tmp_path: Path) -> None:
    store = harness.make(StoreLimits())
    fill(store, ["a", "b", "c", "d", "e"])
    store.delete(2)
    store.delete(5)
    chunks = list(store.snapshot())
    memory = MemoryStreamStore.restore(chunks)
    assert [m for m in memory.scan()] == [m for m in store.scan()]
    assert (memory.state().first_seq, memory.state().last_seq) == (1, 5)
    config = FileStoreConfig(str(tmp_path / "restored"), segment_bytes=SMALL_SEGMENT_BYTES)
    restored = FileStreamStore.restore(config, chunks)
    assert [m for m in restored.scan()] == [m for m in store.scan()]
    assert restored.state().last_seq == 5 and restored.state().num_deleted == 2
    assert restored.store_msg("f", b"", b"", NS) == 6
