"""The consumer state's hot-path encodings and the batched ack floor, against the reference rules.

The reference below is nats-server's processAckMsg applied one ack at a time (the floor follows an
ack of the message right above it, then jumps to just below the lowest pending message above);
ConsumerState applies a whole batch of acks in one operation and must land on the same state.
"""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.jetstream.consumer_state import (
    ConsumerState,
    op_acked,
    op_acked_all,
    op_delivered,
    op_delivered_flat,
)


def reference_ack(state: ConsumerState, sseq: int, ts_ns: int) -> None:
    """One explicit ack, exactly as nats-server moves the floors."""
    entry = state.pending.pop(sseq, None)
    if entry is None:
        return
    state.redelivered.pop(sseq, None)
    state.floor_ns = ts_ns
    cseq = entry[0]
    if not state.pending:
        state.floor_cseq, state.floor_sseq = state.delivered_cseq, state.delivered_sseq
    elif cseq == state.floor_cseq + 1:
        state.floor_cseq, state.floor_sseq = cseq, sseq
        above = [s for s in state.pending if s > sseq]
        if above:
            following = min(above)
            state.floor_cseq, state.floor_sseq = state.pending[following][0] - 1, following - 1


def as_tuple(state: ConsumerState) -> tuple[object, ...]:
    return (
        state.delivered_cseq,
        state.delivered_sseq,
        state.floor_cseq,
        state.floor_sseq,
        dict(state.pending),
        dict(state.redelivered),
    )


# A script: deliver new messages, redeliver pending ones, ack a batch of sequences.
step = st.one_of(
    st.tuples(st.just("new"), st.integers(min_value=1, max_value=5), st.integers(min_value=0, max_value=2)),
    st.tuples(st.just("again"), st.integers(min_value=0, max_value=30), st.just(0)),
    st.tuples(st.just("ack"), st.lists(st.integers(min_value=1, max_value=40), max_size=8), st.just(0)),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(step, max_size=30))
def test_a_batch_of_acks_moves_the_floor_as_one_ack_at_a_time(script: list[tuple[object, ...]]) -> None:
    batched = ConsumerState("explicit")
    reference = ConsumerState("explicit")
    next_sseq, next_cseq, ts = 1, 1, 0
    for kind, arg, gap in script:
        ts += 1
        if kind == "new":
            assert isinstance(arg, int) and isinstance(gap, int)
            items = []
            for _ in range(arg):
                next_sseq += gap  # filtered consumers skip stream sequences
                items.append((next_sseq, next_cseq, 1, ts))
                next_sseq, next_cseq = next_sseq + 1, next_cseq + 1
            op = op_delivered(items)
        elif kind == "again":
            assert isinstance(arg, int)
            pending = sorted(batched.pending)
            if not pending:
                continue
            sseq = pending[arg % len(pending)]
            op = op_delivered([(sseq, next_cseq, batched.redelivered.get(sseq, 1) + 1, ts)])
            next_cseq += 1
        else:
            assert isinstance(arg, list)
            done = batched.apply(op_acked(arg, ts))
            expected = [s for s in dict.fromkeys(arg) if s in reference.pending]
            for sseq in arg:
                reference_ack(reference, sseq, ts)
            assert done == expected
            assert as_tuple(batched) == as_tuple(reference)
            continue
        batched.apply(op)
        reference.apply(op)
        assert as_tuple(batched) == as_tuple(reference)


def test_the_hot_operations_are_binary_and_compact() -> None:
    delivered = op_delivered([(1, 1, 1, 10), (2, 2, 1, 11)])
    assert delivered[:1] == b"d" and len(delivered) == 1 + 2 * 4 * 8
    assert op_acked([1, 2, 3], 5)[:1] == b"a" and len(op_acked([1, 2, 3], 5)) == 1 + 4 * 8
    assert op_acked_all(7, 3, 9)[:1] == b"A"


def test_flat_deliveries_equal_the_tuple_form() -> None:
    from array import array

    flat = array("q", [4, 1, 1, 100, 6, 2, 1, 101])
    one, two = ConsumerState("explicit"), ConsumerState("explicit")
    one.apply(op_delivered_flat(flat))
    two.apply(op_delivered([(4, 1, 1, 100), (6, 2, 1, 101)]))
    assert one == two and one.delivered_ns == 101 and list(one.pending) == [4, 6]


def test_logs_written_with_the_json_operations_still_replay() -> None:
    """A store from before the binary operations: its consumer logs hold JSON entries."""
    old = ConsumerState("explicit")
    old.apply(json.dumps({"d": [[1, 1, 1, 10], [2, 2, 1, 11], [3, 3, 1, 12]]}).encode())
    assert old.apply(json.dumps({"a": [1], "t": 20}).encode()) == [1]
    every = ConsumerState("all")
    every.apply(json.dumps({"d": [[5, 1, 1, 1], [6, 2, 1, 1]]}).encode())
    assert every.apply(json.dumps({"all": 5, "c": 1, "t": 9}).encode()) == [5]
    new = ConsumerState("explicit")
    new.apply(op_delivered([(1, 1, 1, 10), (2, 2, 1, 11), (3, 3, 1, 12)]))
    new.apply(op_acked([1], 20))
    assert new == old


def test_ack_none_deliveries_move_the_floor_with_them() -> None:
    none = ConsumerState("none")
    none.apply(op_delivered([(10, 1, 1, 5), (11, 2, 1, 6)]))
    assert (none.floor_cseq, none.floor_sseq, none.floor_ns, none.pending) == (2, 11, 6, {})
