"""The consumer state after max deliveries, as nats-server 2.15.1's consumer store reports it
(pure; consumer_state module doc). Scenario numbers follow the differential test."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.jetstream.consumer_state import (
    ConsumerState,
    op_acked,
    op_acked_all,
    op_delivered,
    op_gave_up,
)


def _five_delivered(policy: str) -> ConsumerState:
    state = ConsumerState(policy)
    state.apply(op_delivered([(s, s, 1, 10 + s) for s in range(1, 6)]))
    return state


def test_a_given_up_message_leaves_pending_keeps_its_count_and_holds_the_floor() -> None:
    state = _five_delivered("explicit")
    state.apply(op_acked([1, 3], 20))
    state.apply(op_delivered([(2, 6, 2, 30), (4, 7, 2, 30), (5, 8, 2, 30)]))
    state.apply(op_acked([4], 31))
    assert state.apply(op_gave_up([(2, 2), (5, 2)], 40)) == []  # not acks: streams keep them
    assert state.pending == {}
    assert state.redelivered == {2: 2, 5: 2}  # num_redelivered 2
    assert (state.floor_cseq, state.floor_sseq) == (1, 1)  # not moved to the delivered 8/5
    assert state.given_up() == [2, 5]
    assert not state.has_acked(2) and not state.has_acked(5) and state.has_acked(4)


def test_a_late_ack_of_a_given_up_message_only_drops_its_count() -> None:
    state = _five_delivered("explicit")
    state.apply(op_delivered([(2, 6, 2, 30)]))
    state.apply(op_gave_up([(2, 2)], 40))
    assert state.apply(op_acked([2], 50)) == [2]  # returned: a workqueue/interest stream drops it
    assert state.redelivered == {} and state.has_acked(2)
    assert (state.floor_cseq, state.floor_sseq) == (0, 0)
    assert sorted(state.pending) == [1, 3, 4, 5]


def test_the_floor_passes_given_up_messages_when_acks_move_it() -> None:
    state = _five_delivered("explicit")
    state.apply(op_delivered([(2, 6, 2, 30)]))
    state.apply(op_gave_up([(2, 2)], 40))
    state.apply(op_acked([1], 41))  # the next pending above 1 is 3: the floor stops just below it
    assert (state.floor_cseq, state.floor_sseq) == (2, 2)
    state.apply(op_acked([3, 4, 5], 42))  # pending empty: the floor is the delivered position
    assert (state.floor_cseq, state.floor_sseq) == (6, 5)
    assert state.redelivered == {2: 2}  # kept, as nats-server


def test_giving_up_on_a_message_not_pending_changes_nothing() -> None:
    state = _five_delivered("explicit")
    state.apply(op_acked([2], 20))
    before = state.snapshot()
    state.apply(op_gave_up([(2, 2), (9, 2)], 30))
    assert state.snapshot() == before


def test_ack_all_at_or_below_the_leader_floor_of_a_give_up_is_ignored() -> None:
    state = _five_delivered("all")
    state.apply(op_acked_all(1, 1, 20))
    state.apply(op_delivered([(s, s + 4, 2, 30) for s in range(2, 6)]))  # 2..5 as cseq 6..9
    assert state.apply(op_acked_all(4, 8, 31)) == [2, 3, 4]
    assert (state.floor_cseq, state.floor_sseq, state.redelivered) == (8, 4, {5: 2})
    state.apply(op_gave_up([(5, 2)], 40))
    assert (state.floor_cseq, state.floor_sseq) == (8, 4)  # reported floor held
    assert (state.live_cseq, state.live_sseq) == (9, 5)  # the leader's own floor moved
    assert state.apply(op_acked_all(5, 9, 50)) == []  # at the leader floor: a no-op
    assert state.redelivered == {5: 2} and not state.has_acked(5)


def test_ack_all_moves_the_reported_floor_only_when_it_acks_a_pending_message() -> None:
    state = _five_delivered("all")
    state.apply(op_delivered([(6, 6, 1, 30)]))
    state.apply(op_delivered([(3, 7, 2, 31)]))
    state.apply(op_gave_up([(3, 2)], 32))
    assert state.apply(op_acked_all(3, 3, 40)) == [1, 2, 3]  # 3 itself was given up
    assert (state.floor_cseq, state.floor_sseq) == (0, 0)
    assert state.apply(op_acked_all(6, 6, 41)) == [4, 5, 6]
    assert (state.floor_cseq, state.floor_sseq, state.pending) == (6, 6, {})
    assert state.apply(op_acked_all(9, 9, 42)) == []  # above anything delivered


def test_given_up_messages_survive_a_snapshot_and_the_leader_floor_restarts_at_the_floor() -> None:
    state = _five_delivered("all")
    state.apply(op_delivered([(5, 6, 2, 30)]))
    state.apply(op_acked_all(4, 4, 31))
    state.apply(op_gave_up([(5, 2)], 40))
    copy = ConsumerState("all")
    copy.restore(state.snapshot())
    assert (copy.pending, copy.redelivered, copy.given_up()) == ({}, {5: 2}, [5])
    assert (copy.floor_cseq, copy.floor_sseq) == (copy.live_cseq, copy.live_sseq) == (4, 4)


def test_a_redelivery_keeps_the_first_delivery_consumer_sequence() -> None:
    state = _five_delivered("explicit")
    state.apply(op_delivered([(2, 6, 2, 30)]))
    assert state.pending[2] == (2, 30)  # nats-server keeps p.Sequence, updates the time
    state.apply(op_acked([1, 2], 31))  # so the floor follows the first delivery: 2/2
    assert (state.floor_cseq, state.floor_sseq) == (2, 2)


def test_ack_all_give_up_below_the_floor_is_pending_again_after_a_restart() -> None:
    """The store ignores a give-up of a message first delivered at or below its floor's consumer
    sequence: after a restart it is pending again (and given up again on its next attempt)."""
    state = _five_delivered("all")
    state.apply(op_delivered([(s, s + 4, 2, 30) for s in range(2, 6)]))  # 2..5 as cseq 6..9
    state.apply(op_acked_all(4, 8, 31))  # floor 8/4, above 5's first delivery (cseq 5)
    state.apply(op_gave_up([(5, 2)], 40))
    assert (state.pending, state.held) == ({}, {5: (5, 30)})
    copy = ConsumerState("all")
    copy.restore(state.snapshot())
    for restarted in (state, copy):  # after a log replay or from a snapshot
        restarted.restarted()
        assert restarted.pending == {5: (5, 30)} and restarted.held == {}
        assert restarted.redelivered == {5: 2}  # its next attempt is past max_deliver 2
        assert (restarted.live_cseq, restarted.live_sseq) == (8, 4)


def test_explicit_give_ups_are_never_held() -> None:
    state = _five_delivered("explicit")
    state.apply(op_acked([1], 20))
    state.apply(op_delivered([(2, 6, 2, 30)]))
    state.apply(op_gave_up([(2, 2)], 40))
    state.restarted()
    assert state.held == {} and 2 not in state.pending


def test_the_give_up_operation_is_binary() -> None:
    data = op_gave_up([(2, 2), (5, 3)], 7)
    assert data[:1] == b"x" and len(data) == 1 + 8 * 5


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("dagx"), st.integers(1, 12)), max_size=40))
def test_log_replay_and_snapshot_agree_on_given_up_messages(script: list[tuple[str, int]]) -> None:
    """Any mix of deliveries, acks and give-ups: a snapshot restores the same pending set,
    redelivery counts and floors (what a restart reports), and a message is never both given
    up on and pending."""
    state = ConsumerState("explicit")
    cseq = 0
    for kind, sseq in script:
        if kind in "dg":  # a first delivery, or a redelivery of a pending message
            if kind == "g" and sseq not in state.pending:
                continue
            if kind == "d" and sseq <= state.delivered_sseq:
                continue
            cseq += 1
            dc = state.redelivered.get(sseq, 1) + 1 if kind == "g" else 1
            state.apply(op_delivered([(sseq, cseq, dc, cseq)]))
        elif kind == "a":
            state.apply(op_acked([sseq], cseq))
        elif sseq in state.pending:
            state.apply(op_gave_up([(sseq, max(state.redelivered.get(sseq, 1), 2))], cseq))
        assert not set(state.given_up()) & set(state.pending)
        assert state.floor_sseq <= state.delivered_sseq
    copy = ConsumerState("explicit")
    copy.restore(state.snapshot())
    assert (copy.pending, copy.redelivered) == (state.pending, state.redelivered)
    assert (copy.floor_cseq, copy.floor_sseq) == (state.floor_cseq, state.floor_sseq)
    assert copy.given_up() == state.given_up()
