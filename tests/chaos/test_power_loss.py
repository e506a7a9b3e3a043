"""Power loss of every server at once: the real Stream and RAFT code of three replicas in the
simulator, each store on its own FaultFS and each RAFT log on a SimDisk, all three crashed at the
same tick (every write not fsynced dropped, in-flight messages lost), started again, then clients
send again what was not acknowledged (same Nats-Msg-Id). Every acknowledged message must be
there exactly once, at the sequence it was acknowledged with, on identical replicas.

The process suite has the same fault on `appliance run` processes (tests/chaos/test_chaos_cluster.py,
kind power-loss: the servers journal what is durable, appliance/store/powerloss.py); this one is
deterministic and also loses in-flight messages at the same tick."""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from appliance.testing.sim.streams import Replica, StreamReplicas
from tests.sim.test_stream_restarts import payloads

MESSAGES = 120


def header(number: int) -> bytes:
    return b"NATS/1.0\r\nNats-Msg-Id: id-%d\r\n\r\n" % number


def send(leader: Replica, number: int) -> None:
    leader.publish("s.%d" % (number % 4), b"m%d" % number, reply="r.%d" % number, header=header(number))


def collect_acks(replica: Replica, acked: dict[int, int]) -> None:
    """PubAcks this replica sent (reply `r.<number>`) into acked: number -> seq; a duplicate's
    ack names the first copy's sequence, which must agree."""
    for reply, body in replica.host.sent:
        if reply.startswith(b"r."):
            answer = json.loads(body)
            if "seq" in answer and "error" not in answer:
                number, seq = int(reply[2:]), int(answer["seq"])
                assert acked.setdefault(number, seq) == seq, f"id-{number} acked at {acked[number]} and {seq}"
    replica.host.sent.clear()


@pytest.mark.sim
@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("mode", ["lose", "flush"])
def test_power_loss_of_every_server_at_once_keeps_every_acknowledged_message_once(
    seed: int, mode: str
) -> None:
    rng = random.Random(seed)
    replicas = StreamReplicas(seed=seed, file_stores=True, snapshot_entries=rng.choice([None, 5, 17]))
    acked: dict[int, int] = {}
    next_number = 0
    crash_tick = rng.randrange(4, 40)  # ticks after the first election
    replicas.elect()
    for tick in range(crash_tick):  # publishing a few per tick on whoever leads
        leader = replicas.leader()
        if leader is not None:
            for number in range(next_number, min(MESSAGES, next_number + rng.randrange(1, 6))):
                send(leader, number)
            next_number = min(MESSAGES, next_number + 5)
        replicas.step()
        for replica in replicas.replicas.values():
            collect_acks(replica, acked)
    before_crash = len(acked)
    assert before_crash > 0
    for peer in replicas.peers:  # the power goes out everywhere at once
        replicas.crash(peer, mode)  # type: ignore[arg-type]
    for peer in replicas.peers:
        replicas.start(peer)
    while len(acked) < MESSAGES:  # clients send again what was never acknowledged, same ids
        leader = replicas.elect()
        for number in (n for n in range(MESSAGES) if n not in acked):
            send(leader, number)
        for _ in range(10):
            replicas.step()
        for replica in replicas.replicas.values():
            collect_acks(replica, acked)
    everyone = list(replicas.replicas.values())
    leader = replicas.elect()
    replicas.run_until(lambda: all(r.stream.group.core.log.applied >= leader.stream.group.core.log.committed
                                   for r in everyone), ticks_max=4_000)
    for _ in range(20):
        replicas.step()
    stored = payloads(everyone[0])
    for replica in everyone[1:]:
        assert payloads(replica) == stored, f"seed {seed}: {replica.name} differs from {everyone[0].name}"
    counts = Counter(payload for _, payload in stored)
    assert [p for p, n in counts.items() if n > 1] == [], f"seed {seed}: duplicated"
    by_seq = dict(stored)
    lost = [number for number, seq in acked.items() if by_seq.get(seq) != b"m%d" % number]
    assert lost == [], f"seed {seed} ({mode}, crash at tick {crash_tick}): acknowledged but lost {lost[:5]}"
    assert len(stored) == MESSAGES
    assert all(by_seq[seq] == b"m%d" % number for number, seq in acked.items())
