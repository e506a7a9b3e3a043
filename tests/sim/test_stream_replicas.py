"""Three replicas of a real Stream over the simulator's network (appliance/testing/sim/streams.py):
PubAcks only after quorum persistence, a killed leader loses no acknowledged message, replicas
hold identical stores. Seeded: a failure names its seed."""

import json

import pytest

from appliance.cluster.raft_storage import DurableStorage
from appliance.errors import LimitExceeded
from appliance.jetstream import ops
from appliance.raft.types import Message, MessageType
from appliance.testing.sim.network import NetworkFaults
from appliance.testing.sim.streams import GROUP_ID, Replica, StreamReplicas

SEEDS = [1, 2, 3, 4]


def acks(replica: Replica) -> dict[bytes, dict[str, object]]:
    return {reply: json.loads(body) for reply, body in replica.host.sent if reply.startswith(b"r.")}


def contents(replica: Replica) -> list[tuple[int, str, bytes, bytes, int]]:
    store = replica.stream.store
    state = store.state()
    out = []
    for seq in range(state.first_seq, state.last_seq + 1):
        msg = store.load(seq)
        if msg is not None:
            out.append((msg.seq, msg.subject, msg.headers, msg.payload, msg.timestamp_ns))
    return out


def durable_last_index(replicas: StreamReplicas, peer: str) -> int:
    """What `peer`'s log would recover to if it crashed now (only fsynced bytes survive)."""
    image = replicas.disks[peer].copy()
    image.crash(replicas.rng, torn=False)
    return DurableStorage(image, f"{GROUP_ID}.raftlog").last_index()


def consumer_leader_once_stored(replicas: StreamReplicas, count: int) -> Replica:
    """Publish m0.. to s.a through the stream's leader, wait until every replica stores the
    count messages and the consumer has a leader: that replica."""
    leader = replicas.elect()
    for number in range(count):
        leader.publish("s.a", b"m%d" % number, reply="r.%d" % number)
    replicas.run_until(lambda: all(r.stream.store.state().msgs == count for r in replicas.replicas.values()))
    replicas.run_until(lambda: replicas.consumer_leader() is not None)
    first = replicas.consumer_leader()
    assert first is not None
    return first


def consumer_taken_over(replicas: StreamReplicas) -> bool:
    """Does a replica lead the consumer, ready to deliver?"""
    leader = replicas.consumer_leader()
    return leader is not None and leader.consumer is not None and leader.consumer.group.ready_to_lead()


def published_while_one_lags(replicas: StreamReplicas, leader: Replica, total: int) -> str:
    """Cut one follower off, publish total messages (s.0 .. s.6) until the leader acked them
    all; the follower left behind (still cut off)."""
    lagging = next(p for p in replicas.peers if p != leader.name)
    replicas.network.partition({lagging}, list(replicas.peers))
    for number in range(total):
        leader.publish("s.%d" % (number % 7), b"%d" % number, reply="r.%d" % number)
        if number % 50 == 49:
            replicas.step()
    replicas.run_until(lambda: len(acks(leader)) == total)
    return lagging


@pytest.mark.sim
@pytest.mark.parametrize("seed", SEEDS)
def test_a_puback_leaves_only_once_a_quorum_has_the_batch_on_disk(seed: int) -> None:
    replicas = StreamReplicas(seed=seed)
    leader = replicas.elect()
    followers = [p for p in replicas.peers if p != leader.name]
    replicas.network.partition({leader.name}, list(replicas.peers))
    leader.publish("s.a", b"one", reply="r.1")
    for _ in range(6):  # shorter than an election timeout: the leader stays leader
        replicas.step()
    assert acks(leader) == {}, f"seed {seed}: acknowledged without a quorum"
    assert leader.stream.store.state().msgs == 0  # not committed, so not applied
    replicas.network.heal()
    replicas.run_until(lambda: b"r.1" in acks(leader))
    assert acks(leader)[b"r.1"] == {"stream": "S", "seq": 1}
    index = leader.stream.group.core.log.committed
    on_disk = [p for p in replicas.peers if durable_last_index(replicas, p) >= index]
    assert len(on_disk) >= 2, f"seed {seed}: committed entry durable only on {on_disk}"
    assert followers  # the followers apply it too, once they learn the commit
    replicas.run_until(lambda: all(r.stream.store.state().msgs == 1 for r in replicas.replicas.values()))


@pytest.mark.sim
@pytest.mark.parametrize("seed", SEEDS)
def test_a_killed_leader_loses_no_acknowledged_message_and_replicas_stay_identical(seed: int) -> None:
    faults = NetworkFaults(drop=0.02, duplicate=0.02, delay_ticks_max=3)
    replicas = StreamReplicas(seed=seed, faults=faults)
    leader = replicas.elect()
    total = 100
    acked: dict[int, int] = {}  # message number -> seq

    def publish_from(replica: Replica, numbers: range) -> None:
        for number in numbers:
            if number in acked:
                continue
            header = b"NATS/1.0\r\nNats-Msg-Id: m%d\r\n\r\n" % number
            subject = "s.%d" % (number % 5)
            replica.publish(subject, b"payload %d" % number, reply="r.%d" % number, header=header)

    def collect(replica: Replica) -> None:
        for reply, answer in acks(replica).items():
            acked[int(reply[2:])] = int(str(answer["seq"]))

    kill_at = replicas.rng.randrange(14, 20)  # five publishes a tick; the kill lands mid-stream
    for tick in range(kill_at):
        publish_from(leader, range(5 * tick, 5 * tick + 5))
        replicas.step()
    collect(leader)
    before = dict(acked)
    assert 0 < len(before) < 5 * kill_at, f"seed {seed}: the kill should fall between acked and unacked"
    replicas.crash(leader.name)
    new = replicas.elect()
    assert new.name != leader.name
    for _ in range(20):  # the client retries what was not acknowledged, then goes on
        collect(new)
        if len(acked) == total:
            break
        publish_from(new, range(total))
        for _ in range(30):
            replicas.step()
    collect(new)
    assert len(acked) == total, f"seed {seed}: {total - len(acked)} never acknowledged"
    survivors = list(replicas.replicas.values())
    replicas.run_until(lambda: all(len(contents(r)) == total for r in survivors))
    stored = contents(survivors[0])
    assert stored == contents(survivors[1]), f"seed {seed}: replicas differ"
    by_seq = {seq: payload for seq, _, _, payload, _ in stored}
    for number, seq in before.items():  # acknowledged by the dead leader: still there, unchanged
        assert by_seq.get(seq) == b"payload %d" % number, f"seed {seed}: acked message {number} lost"
    assert sorted(acked.values()) == sorted(by_seq)  # each message once (dedupe on retries)


@pytest.mark.sim
def test_a_publish_to_a_follower_is_refused_not_stored() -> None:
    replicas = StreamReplicas(seed=9)
    leader = replicas.elect()
    follower = next(r for r in replicas.replicas.values() if r is not leader)
    follower.publish("s.a", b"x", reply="r.1")
    for _ in range(20):
        replicas.step()
    assert all(r.stream.store.state().msgs == 0 for r in replicas.replicas.values())


@pytest.mark.sim
@pytest.mark.parametrize("seed", SEEDS)
def test_a_lagging_replica_catches_up_from_a_snapshot_and_the_leaders_store(seed: int) -> None:
    replicas = StreamReplicas(seed=seed, snapshot_entries=4)
    leader = replicas.elect()
    total = 600  # more than two catch-up batches
    lagging = published_while_one_lags(replicas, leader, total)
    deleted: list[object] = []  # a hole (through the log) the lagging replica must not fill in
    leader.stream.propose_op(ops.KIND_DELETE, {"seq": 3, "erase": False}, deleted.append)
    replicas.run_until(lambda: deleted == [True])
    assert leader.stream.group.storage.snapshot().meta.index > 0  # compacted past the lagging one
    replicas.network.heal()
    behind = replicas.replicas[lagging]
    replicas.run_until(lambda: behind.stream.store.state().last_seq == total)
    for number in range(3):  # and it goes on with the stream after the snapshot
        leader.publish("s.x", b"after %d" % number, reply="r.after.%d" % number)
    everyone = list(replicas.replicas.values())
    replicas.run_until(lambda: all(r.stream.store.state().last_seq == total + 3 for r in everyone))
    expected = contents(leader)
    assert len(expected) == total + 2 and all(contents(r) == expected for r in everyone), seed
    assert replicas.catch_up_batches and max(replicas.catch_up_batches) <= 256  # bounded, batch by batch


CONSUMER = {"durable_name": "D", "ack_policy": "explicit", "ack_wait": 1_000_000_000}
PULL = b'{"batch": 10, "expires": 60000000000}'


@pytest.mark.sim
@pytest.mark.parametrize("seed", SEEDS)
def test_after_a_consumer_leader_failover_no_ack_is_lost_and_only_the_unacked_come_again(seed: int) -> None:
    replicas = StreamReplicas(seed=seed, consumer=CONSUMER)
    first = consumer_leader_once_stored(replicas, 10)
    assert first.consumer is not None
    first.consumer.on_pull("_INBOX.p1", PULL)
    replicas.run_until(lambda: len(first.host.delivered) == 10)
    followers = [r for r in replicas.replicas.values() if r is not first]
    assert all(not r.host.delivered for r in followers)  # only the leader delivers
    for number, (_, ack, _) in enumerate(first.host.delivered[:5]):
        first.consumer.on_ack(ack.decode().split("."), f"acked.{number}", b"")  # AckSync
    replicas.run_until(lambda: sum(subject.startswith(b"acked.") for subject, _ in first.host.sent) == 5)
    replicas.crash(first.name)  # every AckSync it answered must survive it
    replicas.run_until(lambda: consumer_taken_over(replicas))
    second = replicas.consumer_leader()
    assert second is not None and second.consumer is not None and second is not first
    assert len(second.consumer.state.pending) == 5, f"seed {seed}: acks or deliveries lost"
    second.consumer.on_pull("_INBOX.p2", PULL)
    replicas.run_until(lambda: len(second.host.delivered) >= 5)  # after ack_wait
    for _ in range(60):  # (unacked, they come again every ack_wait) the acknowledged five never do
        replicas.step()
    assert {payload for _, _, payload in second.host.delivered} == {b"m%d" % n for n in range(5, 10)}


@pytest.mark.sim
@pytest.mark.parametrize("seed", SEEDS)
def test_an_ack_for_a_delivery_the_new_leader_never_heard_of_is_not_confirmed(seed: int) -> None:
    """The consumer leader delivers and dies before its DELIVERED record leaves it; the client
    AckSyncs one of those messages to the next leader, which has not delivered it. As nats-server
    (processAckMsg: an ack at or past the next sequence to deliver is dropped, unanswered), the
    ack gets no reply: answering it would tell the client its ack is safe while the message is
    delivered again. (Found by `appliance sim --streams`, seed 0.)"""
    replicas = StreamReplicas(seed=seed, consumer=CONSUMER)
    first = consumer_leader_once_stored(replicas, 3)
    assert first.consumer is not None
    first.consumer.on_pull("_INBOX.p1", PULL)
    replicas.run_until(lambda: len(first.host.delivered) == 3, ticks_max=3)
    replicas.crash(first.name)  # the DELIVERED record it just proposed goes down with it
    replicas.run_until(lambda: consumer_taken_over(replicas))
    second = replicas.consumer_leader()
    assert second is not None and second.consumer is not None
    assert second.consumer.state.delivered_sseq == 0, f"seed {seed}: the delivery reached a follower"
    _, ack, _ = first.host.delivered[0]
    second.consumer.on_ack(ack.decode().split("."), "acked.0", b"+ACK")
    for _ in range(20):
        replicas.step()
    assert not [s for s, _ in second.host.sent if s.startswith(b"acked.")], f"seed {seed}: confirmed"
    second.consumer.on_pull("_INBOX.p2", PULL)
    replicas.run_until(lambda: len(second.host.delivered) == 3)  # it never had them: all come again


@pytest.mark.sim
@pytest.mark.parametrize("seed", SEEDS)
def test_a_replica_catching_up_when_its_leader_dies_fetches_from_another_and_votes_again(seed: int) -> None:
    """A replica behind the leader's snapshot pauses its group while it fetches the messages the
    snapshot stands for (it answers no vote meanwhile). If the leader dies then, fetching only
    from the leader never ends: the survivors (one fetching, one whole) cannot elect anyone, a
    quorum of live replicas stays without a leader. Any replica that holds the range serves it.
    (Found by `appliance sim --streams`, seed 9: two replicas fetching, stuck for good.)"""
    replicas = StreamReplicas(seed=seed, snapshot_entries=4, file_stores=True)
    leader = replicas.elect()
    total = 600  # three catch-up batches: the leader dies after the first
    lagging = published_while_one_lags(replicas, leader, total)
    assert leader.stream.group.storage.snapshot().meta.index > 0
    replicas.network.heal()
    replicas.run_until(lambda: len(replicas.catch_up_batches) >= 1)
    replicas.crash(leader.name)
    behind = replicas.replicas[lagging]
    replicas.run_until(lambda: behind.stream.store.state().last_seq == total, ticks_max=400)
    new = replicas.elect()
    new.publish("s.x", b"after", reply="r.after")
    survivors = list(replicas.replicas.values())
    replicas.run_until(lambda: all(r.stream.store.state().last_seq == total + 1 for r in survivors))


@pytest.mark.sim
@pytest.mark.parametrize("seed", SEEDS)
def test_a_delivery_that_commits_after_its_ack_wait_is_still_redelivered(seed: int) -> None:
    """The consumer leader's pending set is its applied state: a delivery becomes pending only
    once its DELIVERED record commits. When that takes longer than ack_wait (a slow quorum), the
    ack_wait timer found the message not pending yet and forgot it: never redelivered while that
    replica led. (Found by `appliance sim --streams`, seeds 18 and 22, at the end's drain.)"""
    consumer = {"durable_name": "D", "ack_policy": "explicit", "ack_wait": 150_000_000}  # 3 ticks
    replicas = StreamReplicas(seed=seed, consumer=consumer)
    first = consumer_leader_once_stored(replicas, 3)
    assert first.consumer is not None
    for peer in replicas.peers:  # its appends reach the followers late: commits take 7 ticks
        if peer != first.name:
            replicas.network.clog((first.name, peer), until=replicas.ticks + 12, delay_ticks=6)
    first.consumer.on_pull("_INBOX.p1", b'{"batch": 3, "expires": 60000000000}')
    replicas.run_until(lambda: len(first.host.delivered) == 3, ticks_max=3)
    replicas.run_until(lambda: len(first.consumer.state.pending) == 3, ticks_max=30)  # committed, late
    assert replicas.consumer_leader() is first
    first.consumer.on_pull("_INBOX.p2", b'{"batch": 3, "expires": 60000000000}')
    replicas.run_until(lambda: len(first.host.delivered) >= 6, ticks_max=60)  # all three again
    assert sorted(p for _, _, p in first.host.delivered[3:6]) == [b"m0", b"m1", b"m2"]


@pytest.mark.sim
@pytest.mark.parametrize("seed", SEEDS)
def test_deliveries_whose_record_the_group_refused_come_again(seed: int) -> None:
    """The consumer leader delivers, then proposes the DELIVERED record; the group may refuse it
    (LimitExceeded: its in-flight window to a quorum is full). A later record of later messages
    then moved the delivered position past them: never pending, never redelivered, the ack floor
    passing over them, lost for this consumer. (Found by `appliance sim --streams`, seed 3104.)"""
    replicas = StreamReplicas(seed=seed, consumer=CONSUMER)
    first = consumer_leader_once_stored(replicas, 6)
    assert first.consumer is not None
    group = first.consumer.group
    propose = group.propose
    refused: list[bytes] = []

    def full(data: bytes, on_done: object = None, *, durable: bool = True) -> None:
        refused.append(data)
        raise LimitExceeded("the in-flight window to a quorum of followers is full")

    group.propose = full  # type: ignore[method-assign]
    first.consumer.on_pull("_INBOX.p1", b'{"batch": 3, "expires": 60000000000}')
    replicas.run_until(lambda: len(first.host.delivered) == 3, ticks_max=3)
    assert refused
    group.propose = propose  # type: ignore[method-assign]
    first.consumer.on_pull("_INBOX.p2", b'{"batch": 10, "expires": 60000000000}')
    replicas.run_until(lambda: len(first.consumer.state.pending) == 6, ticks_max=60)
    for _, ack, _ in first.host.delivered[3:]:  # the client acks what it got this time: all six
        first.consumer.on_ack(ack.decode().split("."), "", b"+ACK")
    replicas.run_until(lambda: not first.consumer.state.pending)
    assert sorted(p for _, _, p in first.host.delivered[3:]) == [b"m%d" % n for n in range(6)]


@pytest.mark.sim
@pytest.mark.parametrize("seed", SEEDS)
def test_a_consumer_leader_elected_again_delivers_from_the_replicated_state(seed: int) -> None:
    """A consumer leader delivers, is cut off before its DELIVERED record leaves, another replica
    leads a while, then the first leads again. Its own next sequence (past what it delivered in
    its old term) is stale: the record was lost, so those messages were never pending anywhere;
    taking over it must start from the replicated state. It kept its old position and skipped
    them for good. (Found by `appliance sim --streams`, seed 3104.)"""
    replicas = StreamReplicas(seed=seed, consumer=CONSUMER)
    first = consumer_leader_once_stored(replicas, 3)
    assert first.consumer is not None
    first.consumer.on_pull("_INBOX.p1", b'{"batch": 3, "expires": 60000000000}')
    replicas.run_until(lambda: len(first.host.delivered) == 3, ticks_max=3)
    replicas.network.partition({first.name}, list(replicas.peers))  # its record stays with it
    replicas.run_until(lambda: any(r.consumer is not None and r.consumer.group.ready_to_lead()
                                   for r in replicas.replicas.values() if r is not first))
    replicas.network.heal()
    second = next(r for r in replicas.replicas.values() if r is not first and r.consumer
                  and r.consumer.group.is_leader())
    assert second.consumer is not None and second.consumer.state.delivered_sseq == 0
    replicas.run_until(lambda: first.consumer is not None and not first.consumer.group.is_leader()
                       and first.consumer.group.applied() == second.consumer.group.applied())
    second.consumer.group.transfer_leader(first.name)
    replicas.run_until(lambda: first.consumer is not None and first.consumer.group.ready_to_lead())
    first.consumer.on_pull("_INBOX.p2", b'{"batch": 3, "expires": 60000000000}')
    replicas.run_until(lambda: len(first.host.delivered) == 6, ticks_max=60)
    assert sorted(p for _, _, p in first.host.delivered[3:]) == [b"m0", b"m1", b"m2"]


@pytest.mark.sim
def test_a_replicated_publish_is_appended_and_sent_in_the_turn_that_proposes_it() -> None:
    """A sync publisher waits for every loop turn: the turn that proposes the turn's publishes
    also runs the leader's Ready (appends out to the followers, its fsync), not the next one."""
    replicas = StreamReplicas(seed=5)
    leader = replicas.elect()
    # the followers hold the leader's first entry: its appends are not paused probing them
    replicas.run_until(lambda: all(r.stream.group.applied() >= 1 for r in replicas.replicas.values()))
    leader.publish("s.a", b"one", reply="r.1")
    assert not appends_with_entries(replicas, leader.name)
    leader.host.turn()  # the turn after the publish arrived: propose, and the Ready at once
    assert sorted(m.to for m in appends_with_entries(replicas, leader.name)) == sorted(
        p for p in replicas.peers if p != leader.name)


def appends_with_entries(replicas: StreamReplicas, sender: str) -> list[Message]:
    return [item[3] for item in replicas.network.queue
            if item[3].sender == sender and item[3].type == MessageType.APPEND
            and any(entry.data for entry in item[3].entries)]  # a message entry, not the no-op


def answered(replica: Replica, reply: bytes) -> bool:
    return any(subject == reply for subject, _ in replica.host.sent)


@pytest.mark.sim
@pytest.mark.parametrize("seed", SEEDS)
def test_an_acksync_heard_while_no_replica_leads_is_taken_and_answered_by_the_next_leader(seed: int) -> None:
    """The consumer's leader hands over (a step-down) or dies; an AckSync sent meanwhile reaches
    every server, none of which leads. Before, every replica dropped it and the client never
    heard back; now the replica that takes over takes it, and answers once it is replicated."""
    replicas = StreamReplicas(seed=seed, consumer=CONSUMER)
    first = consumer_leader_once_stored(replicas, 3)
    assert first.consumer is not None
    first.consumer.on_pull("_INBOX.p1", PULL)
    replicas.run_until(lambda: len(first.host.delivered) == 3)
    followers = [r for r in replicas.replicas.values() if r is not first]
    replicas.run_until(lambda: all(r.consumer is not None and len(r.consumer.state.pending) == 3
                                   for r in followers))  # every replica knows of the deliveries
    replicas.crash(first.name)
    _, ack, _ = first.host.delivered[1]
    for replica in followers:  # no replica leads: each hears the AckSync
        assert replica.consumer is not None
        replica.consumer.on_ack(ack.decode().split("."), "acked.1", b"+ACK")
    replicas.run_until(lambda: consumer_taken_over(replicas))
    second = replicas.consumer_leader()
    assert second is not None and second.consumer is not None
    replicas.run_until(lambda: answered(second, b"acked.1"))
    assert sum(answered(r, b"acked.1") for r in followers) == 1  # one answer, from the new leader
    other = next(r for r in followers if r is not second)
    assert other.consumer is not None
    replicas.run_until(lambda: 2 not in other.consumer.state.pending)  # replicated: seq 2 acked
    assert sorted(second.consumer.state.pending) == [1, 3]


def test_a_replicated_streams_pubacks_are_written_out_at_once() -> None:
    """The PubAcks of a committed batch leave in the call that answers them (flush_now), not at
    the end of the loop turn: the synchronous publisher waits for nothing else."""
    replicas = StreamReplicas(seed=1)
    leader = replicas.elect()
    batches: list[tuple[list[tuple[bytes, bytes]], bool]] = []
    record = leader.host.publish_many

    def recording(messages: list[tuple[bytes, bytes]], *, flush_now: bool = False) -> None:
        batches.append((list(messages), flush_now))
        record(messages, flush_now=flush_now)

    leader.host.publish_many = recording  # type: ignore[method-assign]
    for number in range(3):
        leader.publish("s.a", b"m%d" % number, reply="r.%d" % number)
        replicas.run_until(lambda: len(acks(leader)) == number + 1)
    answered = [(reply, flush_now) for messages, flush_now in batches for reply, _ in messages]
    assert answered == [(b"r.0", True), (b"r.1", True), (b"r.2", True)]
