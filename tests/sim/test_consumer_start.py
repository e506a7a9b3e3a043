"""Where a replicated consumer's delivery starts is decided once, by its first leader, and
replicated: a replica that opened the consumer later (its own stream store further on, so its
own deliver-policy start differs) and then leads delivers from the recorded start, not its own."""

import pytest

from appliance.testing.sim.streams import StreamReplicas

PULL = b'{"batch": 10, "expires": 60000000000}'


@pytest.mark.sim
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_later_consumer_leader_delivers_from_the_start_its_first_leader_recorded(seed: int) -> None:
    consumer = {"durable_name": "D", "ack_policy": "explicit", "deliver_policy": "new"}
    replicas = StreamReplicas(seed=seed, consumer=consumer, file_stores=True)
    leader = replicas.elect()
    replicas.run_until(lambda: replicas.consumer_leader() is not None)
    first = replicas.consumer_leader()
    assert first is not None and first.consumer is not None
    replicas.run_until(lambda: all(r.consumer is not None and r.consumer.state.started
                                   for r in replicas.replicas.values()))
    for number in range(5):  # published after the consumer was created: "new" delivers them
        leader.publish("s.a", b"m%d" % number, reply="r.%d" % number)
    replicas.run_until(lambda: all(r.stream.store.state().msgs == 5 for r in replicas.replicas.values()))
    name = next(r.name for r in replicas.replicas.values() if r is not first)
    replicas.crash(name, "flush")
    replicas.replicas_started.discard(name)  # opened afresh: its own "new" start is after m4
    reopened = replicas.start(name)
    assert reopened.consumer is not None and reopened.consumer._start == (6, 6)
    replicas.run_until(lambda: reopened.consumer is not None and reopened.consumer.state.started)
    assert reopened.consumer.state.start_next == 1

    first.consumer.group.transfer_leader(name)
    replicas.run_until(lambda: reopened.consumer is not None and reopened.consumer.group.ready_to_lead())
    reopened.consumer.on_pull("_INBOX.p1", PULL)
    replicas.run_until(lambda: len(reopened.host.delivered) >= 5, ticks_max=200)
    assert [payload for _, _, payload in reopened.host.delivered] == [b"m%d" % n for n in range(5)]
