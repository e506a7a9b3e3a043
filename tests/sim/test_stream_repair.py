"""Replicated streams repair damaged records from a peer (issue 15 §6), in the simulator with file
stores on FaultFS: a flipped byte in one replica's segment (found on open, or by a read while it
runs) is reported lost, never served (not to a client, not to another replica catching up), and
fetched from a replica that holds it intact, until every replica holds the same messages again.
Seeded: a failure names its seed."""

from __future__ import annotations

import pytest

from appliance.errors import CorruptData
from appliance.jetstream.cluster_info import ClusterContext
from appliance.jetstream.cluster_info import replicas as replicas_json
from appliance.store import records, segment
from appliance.store.filestore import FileStreamStore
from appliance.testing.faultfs import FaultFS
from appliance.testing.sim.streams import Replica, StreamReplicas
from tests.sim.test_stream_restarts import acked, converge, publish

SEEDS = [1, 2, 3]
COUNT = 40


def file_store(replica: Replica) -> FileStreamStore:
    store = replica.stream.store
    assert isinstance(store, FileStreamStore)
    return store


def flip_record(fs: FaultFS, peer: str, seq: int) -> None:
    """Flip one byte in the middle of message `seq`'s record in `peer`'s active segment."""
    directory = f"/{peer}/streams/S"
    (name,) = [n for n in fs.list_dir(directory) if n.endswith(".seg")]
    path = f"{directory}/{name}"
    frames, _ = records.scan_frames(fs.read_all(path), segment.HEADER_BYTES)
    (span,) = [(f[0], f[1]) for f in frames if f[2] == records.Kind.MSG and f[3] == seq]
    fs.flip_bit(path, (span[0] + span[1]) // 2 * 8 + 2)


def restart_damaged(replicas: StreamReplicas, damage: dict[str, list[int]]) -> None:
    """Stop each named server cleanly, damage its records, start it again."""
    for peer, seqs in damage.items():
        replicas.replicas[peer].stream.close()
        replicas.crash(peer, "flush")
        for seq in sorted(seqs, reverse=True):  # a damaged record hides the chain after it from scan_frames
            flip_record(replicas.filesystems[peer], peer, seq)
    for peer in damage:
        replicas.start(peer)


def filled(seed: int) -> tuple[StreamReplicas, Replica]:
    replicas = StreamReplicas(seed=seed, file_stores=True)
    leader = replicas.elect()
    publish(leader, range(COUNT))
    replicas.run_until(lambda: len(acked(leader)) == COUNT)
    converge(replicas, COUNT)
    return replicas, leader


def all_whole(replicas: StreamReplicas) -> bool:
    return all(not file_store(r).lost_ranges() for r in replicas.replicas.values())


@pytest.mark.sim
@pytest.mark.parametrize("seed", SEEDS)
def test_a_damaged_follower_is_repaired_and_serves_nothing_damaged_meanwhile(seed: int) -> None:
    replicas, leader = filled(seed)
    follower = next(p for p in replicas.peers if p != leader.name)
    restart_damaged(replicas, {follower: [7]})
    damaged = replicas.replicas[follower]
    assert file_store(damaged).lost_ranges() == [(7, 7)]
    with pytest.raises(CorruptData):
        damaged.stream.store.load(7)
    assert damaged.stream.catch_up_batch(1, COUNT, 256, 1 << 20) is None  # no gap handed on as a deletion
    replicas.run_until(lambda: all_whole(replicas))
    stored = converge(replicas, COUNT)
    assert [payload for _, payload in stored] == [b"m%d" % n for n in range(COUNT)]
    assert damaged.stream.repair is not None and damaged.stream.repair.repaired == 1
    assert not file_store(damaged).lost().damaged


@pytest.mark.sim
@pytest.mark.parametrize("seed", SEEDS)
def test_a_damaged_leader_repairs_from_a_follower(seed: int) -> None:
    replicas, leader = filled(seed)
    restart_damaged(replicas, {leader.name: [3, 30]})
    replicas.run_until(lambda: all_whole(replicas))
    new = replicas.elect()
    publish(new, range(COUNT, COUNT + 5))
    replicas.run_until(lambda: len(acked(new)) == 5)
    stored = converge(replicas, COUNT + 5)
    assert [payload for _, payload in stored] == [b"m%d" % n for n in range(COUNT + 5)]


@pytest.mark.sim
@pytest.mark.parametrize("seed", SEEDS)
def test_two_replicas_damaged_at_the_same_record_both_repair_from_the_third(seed: int) -> None:
    replicas, leader = filled(seed)
    damaged = [p for p in replicas.peers if p != leader.name]
    restart_damaged(replicas, {peer: [11] for peer in damaged})
    for peer in damaged:
        assert replicas.replicas[peer].stream.catch_up_batch(11, 11, 256, 1 << 20) is None
    replicas.run_until(lambda: all_whole(replicas))
    stored = converge(replicas, COUNT)
    assert [payload for _, payload in stored] == [b"m%d" % n for n in range(COUNT)]


@pytest.mark.sim
@pytest.mark.parametrize("seed", SEEDS)
def test_damage_found_by_a_read_while_running_is_repaired(seed: int) -> None:
    replicas, leader = filled(seed)
    follower = next(p for p in replicas.peers if p != leader.name)
    replica = replicas.replicas[follower]
    file_store(replica).sync()
    flip_record(replicas.filesystems[follower], follower, 19)
    served = [m.seq for m in replica.stream.store.scan()]  # the read meets the bad checksum
    assert 19 not in served and len(served) == COUNT - 1
    assert file_store(replica).lost_ranges() == [(19, 19)]
    replicas.run_until(lambda: all_whole(replicas))
    stored = converge(replicas, COUNT)
    assert [payload for _, payload in stored] == [b"m%d" % n for n in range(COUNT)]


@pytest.mark.sim
@pytest.mark.parametrize("seed", SEEDS)
def test_the_leader_finding_damage_repairs_from_a_follower_and_keeps_leading(seed: int) -> None:
    replicas, leader = filled(seed)
    file_store(leader).sync()
    flip_record(replicas.filesystems[leader.name], leader.name, 25)
    served = [m.seq for m in leader.stream.store.scan()]  # a read (a consumer replaying) meets the bad checksum
    assert 25 not in served
    assert file_store(leader).lost_ranges() == [(25, 25)]
    replicas.run_until(lambda: all_whole(replicas))
    assert leader.stream.group.is_leader()
    assert leader.stream.store.load(25) is not None and leader.stream.store.load(25).payload == b"m24"
    publish(leader, range(COUNT, COUNT + 3))
    replicas.run_until(lambda: len(acked(leader)) == COUNT + 3)
    converge(replicas, COUNT + 3)


@pytest.mark.sim
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("snapshot_entries", [None, 4])
def test_a_replica_whose_store_files_are_gone_rebuilds_from_its_peers(seed: int, snapshot_entries: int | None) -> None:
    replicas = StreamReplicas(seed=seed, file_stores=True, snapshot_entries=snapshot_entries)
    leader = replicas.elect()
    publish(leader, range(COUNT))
    replicas.run_until(lambda: len(acked(leader)) == COUNT)
    converge(replicas, COUNT)
    follower = next(p for p in replicas.peers if p != leader.name)
    replicas.replicas[follower].stream.close()
    replicas.crash(follower, "flush")
    fs = replicas.filesystems[follower]
    directory = f"/{follower}/streams/S"
    for name in fs.list_dir(directory):  # the store wiped: segments and its applied journal
        fs.remove(f"{directory}/{name}")
    replicas.start(follower)
    stored = converge(replicas, COUNT)
    assert [payload for _, payload in stored] == [b"m%d" % n for n in range(COUNT)]
    assert file_store(replicas.replicas[follower]).state().last_seq == COUNT


CONSUMER = {"durable_name": "D", "ack_policy": "explicit", "ack_wait": 30_000_000_000}
PULL = b'{"batch": 20, "expires": 60000000000}'


@pytest.mark.sim
@pytest.mark.parametrize("seed", SEEDS)
def test_a_consumer_meeting_a_damaged_record_waits_for_its_repair_and_delivers_in_order(seed: int) -> None:
    replicas = StreamReplicas(seed=seed, file_stores=True, consumer=CONSUMER)
    leader = replicas.elect()
    publish(leader, range(12))
    replicas.run_until(lambda: len(acked(leader)) == 12)
    converge(replicas, 12)
    replicas.run_until(lambda: replicas.consumer_leader() is not None)
    reader = replicas.consumer_leader()
    assert reader is not None and reader.consumer is not None
    file_store(reader).sync()
    flip_record(replicas.filesystems[reader.name], reader.name, 5)
    reader.consumer.on_pull("_INBOX.p1", PULL)
    replicas.run_until(lambda: len(reader.host.delivered) >= 12)
    assert [payload for _, _, payload in reader.host.delivered] == [b"m%d" % n for n in range(12)]
    assert not file_store(reader).lost_ranges()


@pytest.mark.sim
@pytest.mark.parametrize("seed", SEEDS)
def test_a_record_damaged_on_every_replica_stays_lost_and_is_asked_for_ever_slower(seed: int) -> None:
    replicas, _leader = filled(seed)
    restart_damaged(replicas, {peer: [9] for peer in replicas.peers})
    for _ in range(1_200):  # a simulated minute
        replicas.step()
    for replica in replicas.replicas.values():
        assert file_store(replica).lost_ranges() == [(9, 9)]  # never filled from another replica's gap
        repair = replica.stream.repair
        assert repair is not None and repair.repaired == 0
        assert repair.attempts <= 20, repair.attempts  # backed off, not a request every retry interval
        assert not repair.holding  # consumers went on past it after the hold
    new = replicas.elect()
    publish(new, range(COUNT, COUNT + 3))
    replicas.run_until(lambda: len(acked(new)) == 3)  # the stream still takes writes


@pytest.mark.sim
@pytest.mark.parametrize("seed", SEEDS)
def test_a_range_no_peer_can_give_does_not_keep_the_next_one_from_repair(seed: int) -> None:
    replicas, leader = filled(seed)
    follower = next(p for p in replicas.peers if p != leader.name)
    restart_damaged(replicas, {peer: [3, 30] if peer == follower else [3] for peer in replicas.peers})
    damaged = replicas.replicas[follower]
    replicas.run_until(lambda: file_store(damaged).lost_ranges() == [(3, 3)], ticks_max=1_200)
    assert damaged.stream.store.load(30) is not None and damaged.stream.store.load(30).payload == b"m29"


@pytest.mark.sim
@pytest.mark.parametrize("seed", SEEDS)
def test_a_repaired_message_counts_for_dedupe_again(seed: int) -> None:
    """The replica opened with the message lost (its dedupe read from the store lacks its id);
    once repaired and leading, a publish with that id is a duplicate of the repaired one."""
    replicas = StreamReplicas(seed=seed, file_stores=True)
    leader = replicas.elect()
    for n in range(10):
        leader.publish("s.a", b"m%d" % n, reply="r.%d" % n, header=b"NATS/1.0\r\nNats-Msg-Id: id-%d\r\n\r\n" % n)
    replicas.run_until(lambda: len(acked(leader)) == 10)
    converge(replicas, 10)
    follower = next(p for p in replicas.peers if p != leader.name)
    restart_damaged(replicas, {follower: [6]})
    damaged = replicas.replicas[follower]
    replicas.run_until(lambda: not file_store(damaged).lost_ranges())
    current = replicas.elect()
    if current is not damaged:
        current.stream.group.transfer_leader(follower)
        replicas.run_until(lambda: replicas.leader() is damaged)
    damaged.publish("s.a", b"again", reply="r.again", header=b"NATS/1.0\r\nNats-Msg-Id: id-5\r\n\r\n")
    replicas.run_until(lambda: any(reply == b"r.again" for reply, _ in damaged.host.sent))
    (answer,) = [body for reply, body in damaged.host.sent if reply == b"r.again"]
    assert b'"duplicate": true' in answer and b'"seq":6' in answer, answer


def leaders_view(replicas: StreamReplicas) -> dict[str, bool]:
    """Each follower's `current`, as the stream's leader reports it (Cluster Information)."""
    leader = replicas.elect()
    ctx = ClusterContext("C1", leader.name, leader.name, {p: p for p in replicas.peers})
    return {info.name: info.current for info in replicas_json(leader.stream.group, ctx)}


@pytest.mark.sim
@pytest.mark.parametrize("seed", SEEDS)
def test_a_follower_with_a_lost_range_is_not_current_until_repaired(seed: int) -> None:
    """Its log is up to date, its store is not whole: the leader must not report it current.
    A record lost on every replica stays lost (no peer holds it): the followers stay not current;
    a later repair makes them current again."""
    replicas, _leader = filled(seed)
    restart_damaged(replicas, {peer: [9] for peer in replicas.peers})
    for _ in range(100):  # five simulated seconds: heard from, logs up to date, still lost
        replicas.step()
    leader = replicas.elect()
    assert all(file_store(r).lost_ranges() == [(9, 9)] for r in replicas.replicas.values())
    assert all(p.match == leader.stream.group.commit_index() for p in leader.stream.group.peers())
    assert leaders_view(replicas) == {p: False for p in replicas.peers if p != leader.name}
    assert not any(p.current for p in leader.stream.group.peers())


@pytest.mark.sim
@pytest.mark.parametrize("seed", SEEDS)
def test_a_repaired_follower_is_current_again(seed: int) -> None:
    replicas, leader = filled(seed)
    follower = next(p for p in replicas.peers if p != leader.name)
    restart_damaged(replicas, {follower: [9]})
    replicas.run_until(lambda: all_whole(replicas), ticks_max=1_200)
    replicas.run_until(lambda: all(leaders_view(replicas).values()), ticks_max=200)
