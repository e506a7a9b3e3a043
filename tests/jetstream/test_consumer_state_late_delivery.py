"""A delivery record that reaches the log after the ack of the same message (pure;
consumer_state module doc). The consumer leader redelivers a message whose ack_wait ran out
while the client's ack of it is still being replicated; the log then holds ACK before the
redelivery's DELIVERED. As nats-server's consumer store (UpdateDelivered only refreshes a
message still pending once it was delivered before), the acked message stays acked: re-opening
it would redeliver a message whose AckSync was answered, on every replica and after a failover.
(Found by `appliance sim --streams`, seeds 1, 2, 4 and 5.)"""

from __future__ import annotations

import json

from appliance.jetstream.consumer_state import ConsumerState, op_acked, op_delivered


def _delivered_then_acked() -> ConsumerState:
    state = ConsumerState("explicit")
    state.apply(op_delivered([(s, s, 1, 10 + s) for s in range(1, 5)]))
    state.apply(op_acked([2], 20))
    return state


def test_a_redelivery_recorded_after_the_ack_does_not_reopen_the_message() -> None:
    state = _delivered_then_acked()
    state.apply(op_delivered([(2, 5, 2, 30), (3, 6, 2, 30)]))  # 2: acked already; 3: still pending
    assert sorted(state.pending) == [1, 3, 4]
    assert state.has_acked(2)
    assert state.redelivered == {3: 2}
    assert (state.delivered_cseq, state.delivered_sseq) == (6, 4)


def test_the_json_form_of_the_record_does_the_same() -> None:
    state = _delivered_then_acked()
    state.apply(json.dumps({"d": [[2, 5, 2, 30]]}).encode())
    assert sorted(state.pending) == [1, 3, 4]
    assert state.has_acked(2) and state.redelivered == {}


def test_a_first_delivery_above_the_delivered_position_is_pending_as_before() -> None:
    state = _delivered_then_acked()
    state.apply(op_delivered([(7, 5, 1, 30)]))
    assert sorted(state.pending) == [1, 3, 4, 7]
    assert state.delivered_sseq == 7
