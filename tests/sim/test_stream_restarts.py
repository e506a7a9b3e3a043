"""Replicated streams restarted with their durable RAFT log and their file store (FaultFS):
the group re-applies only what the store lacks, so nothing is stored twice and nothing acknowledged
is lost, whether the server stopped cleanly, was killed in the middle of an apply, or lost power.
Seeded: a failure names its seed and crash point."""

from __future__ import annotations

import json

import pytest

from appliance.store.applied import JOURNAL_NAME
from appliance.testing.sim.streams import Replica, StreamReplicas

SEEDS = [1, 2, 3]


def acked(replica: Replica) -> dict[int, int]:
    """message number -> seq, from the PubAcks this replica sent."""
    out = {}
    for reply, body in replica.host.sent:
        if reply.startswith(b"r."):
            answer = json.loads(body)
            if "seq" in answer and "error" not in answer:
                out[int(reply[2:])] = int(answer["seq"])
    return out


def payloads(replica: Replica) -> list[tuple[int, bytes]]:
    store = replica.stream.store
    state = store.state()
    out = []
    for seq in range(state.first_seq, state.last_seq + 1):
        msg = store.load(seq)
        if msg is not None:
            out.append((msg.seq, msg.payload))
    return out


def publish(replica: Replica, numbers: range) -> None:
    for number in numbers:
        replica.publish("s.%d" % (number % 3), b"m%d" % number, reply="r.%d" % number)


def converge(replicas: StreamReplicas, count: int) -> list[tuple[int, bytes]]:
    everyone = list(replicas.replicas.values())
    replicas.run_until(lambda: all(len(payloads(r)) >= count for r in everyone), ticks_max=4_000)
    for _ in range(40):  # and nothing more arrives
        replicas.step()
    expected = payloads(everyone[0])
    for replica in everyone[1:]:
        assert payloads(replica) == expected, f"{replica.name} differs from {everyone[0].name}"
    stored = [payload for _, payload in expected]
    assert len(stored) == len(set(stored)), "a message is stored twice"
    return expected


@pytest.mark.sim
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("snapshot_entries", [None, 4])
def test_restarted_replicas_and_leader_apply_only_what_their_store_lacks(seed: int, snapshot_entries: int | None) -> None:
    replicas = StreamReplicas(seed=seed, file_stores=True, snapshot_entries=snapshot_entries)
    leader = replicas.elect()
    publish(leader, range(60))
    replicas.run_until(lambda: len(acked(leader)) == 60)
    converge(replicas, 60)
    follower = next(p for p in replicas.peers if p != leader.name)
    for name in (follower, leader.name):  # a follower, then the leader: stopped, started again
        replicas.replicas[name].stream.close()  # a clean stop (fsyncs store and journal)
        replicas.crash(name, "lose")
        replicas.start(name)
        replicas.elect()
    new = replicas.elect()
    publish(new, range(60, 80))
    replicas.run_until(lambda: len(acked(new)) == 20)
    stored = converge(replicas, 80)
    assert [payload for _, payload in stored] == [b"m%d" % n for n in range(80)], seed
    assert [seq for seq, _ in stored] == list(range(1, 81))


@pytest.mark.sim
@pytest.mark.parametrize("mode", ["flush", "lose"])
@pytest.mark.parametrize("victim", ["leader", "follower"])
@pytest.mark.parametrize("crash_point", range(1, 30))
@pytest.mark.parametrize("segment_bytes", [None, 600])
def test_a_crash_at_any_store_write_neither_duplicates_nor_loses(
    mode: str, victim: str, crash_point: int, segment_bytes: int | None
) -> None:
    """Killed (flush: the OS keeps every write) or powered off (lose: only fsynced bytes stay) at
    the n-th file write while it applies batches: between a store write and its journal record,
    with segments rolled (and sealed) inside one apply when they are small."""
    seed = crash_point * 7 + (victim == "leader")
    replicas = StreamReplicas(seed=seed, file_stores=True, snapshot_entries=6, segment_bytes=segment_bytes)
    leader = replicas.elect()
    publish(leader, range(10))
    replicas.run_until(lambda: len(acked(leader)) == 10)
    target = leader.name if victim == "leader" else next(p for p in replicas.peers if p != leader.name)
    replicas.crash_store_at(target, crash_point, mode)  # type: ignore[arg-type]
    before = dict(acked(leader))
    for tick in range(40):  # publishing on until the crash, then a little more
        if leader.name in replicas.replicas:
            publish(leader, range(10 + 5 * tick, 15 + 5 * tick))
        replicas.step()
        if replicas.crashes and tick % 4 == 3:
            break
    assert replicas.crashes == [target], f"no crash at write {crash_point}"
    if leader.name in replicas.replicas:
        before = acked(leader)
    replicas.start(target)
    new = replicas.elect()
    publish(new, range(1000, 1005))
    replicas.run_until(lambda: all(n in acked(new) for n in range(1000, 1005)), ticks_max=4_000)
    stored = converge(replicas, len(before) + 5)
    by_seq = dict(stored)
    for number, seq in before.items():  # every acknowledged message is there, where it was acked
        assert by_seq.get(seq) == b"m%d" % number, f"acked message {number} lost (write {crash_point})"


@pytest.mark.sim
def test_the_journal_lives_beside_the_store_and_stays_bounded() -> None:
    from appliance import limits

    replicas = StreamReplicas(seed=5, file_stores=True)
    leader = replicas.elect()
    for tick in range(50):
        publish(leader, range(tick * 2, tick * 2 + 2))
        replicas.step()
    fs = replicas.filesystems[leader.name]
    path = f"/{leader.name}/streams/S/{JOURNAL_NAME}"
    assert fs.exists(path)
    assert fs.size(path) <= limits.STORE_APPLIED_JOURNAL_RECORDS_MAX * 36


@pytest.mark.sim
@pytest.mark.parametrize("mode", ["flush", "lose"])
def test_a_replica_killed_while_fetching_behind_a_snapshot_fetches_on_after_its_restart(mode: str) -> None:
    replicas = StreamReplicas(seed=11, file_stores=True, snapshot_entries=4)
    leader = replicas.elect()
    lagging = next(p for p in replicas.peers if p != leader.name)
    replicas.network.partition({lagging}, list(replicas.peers))
    total = 700  # three catch-up batches
    for tick in range(14):
        publish(leader, range(tick * 50, tick * 50 + 50))
        replicas.step()
    replicas.run_until(lambda: len(acked(leader)) == total)
    assert leader.stream.group.storage.snapshot().meta.index > 0  # compacted past the lagging one
    replicas.network.heal()
    behind = replicas.replicas[lagging]
    replicas.run_until(lambda: len(replicas.catch_up_batches) == 2)  # the first is stored, the second asked
    assert 0 < behind.stream.store.state().last_seq < total  # part of it fetched
    replicas.crash(lagging, mode)  # type: ignore[arg-type]
    restarted = replicas.start(lagging)  # its log holds the snapshot; its store does not, yet
    replicas.run_until(lambda: restarted.stream.store.state().last_seq == total)
    publish(leader, range(total, total + 5))
    stored = converge(replicas, total + 5)
    assert [payload for _, payload in stored] == [b"m%d" % n for n in range(total + 5)]


def identical(replicas: StreamReplicas) -> list[tuple[int, bytes]]:
    """Wait until every replica applied all it can, then compare stores (contents and bounds)."""
    everyone = list(replicas.replicas.values())
    leader = replicas.elect()
    replicas.run_until(lambda: all(r.stream.group.core.log.applied >= leader.stream.group.core.log.committed
                                   for r in everyone), ticks_max=4_000)
    for _ in range(20):
        replicas.step()
    first = everyone[0].stream.store.state()
    for replica in everyone[1:]:
        state = replica.stream.store.state()
        assert (state.first_seq, state.last_seq, state.msgs) == (first.first_seq, first.last_seq, first.msgs), replica.name
        assert payloads(replica) == payloads(everyone[0]), f"{replica.name} differs from {everyone[0].name}"
    return payloads(everyone[0])


@pytest.mark.sim
@pytest.mark.parametrize("mode", ["flush", "lose"])
@pytest.mark.parametrize("victim", ["leader", "follower"])
@pytest.mark.parametrize("crash_point", range(1, 30, 2))
def test_a_crash_mid_apply_with_limits_and_deletes_keeps_replicas_identical(mode: str, victim: str, crash_point: int) -> None:
    """Limits that remove while storing (two per subject, discard old: a KV with history 2), a
    max_msgs bound and deletes through the log: the state an entry is applied to again must be
    the one it was first applied to, or the replicas diverge."""
    from appliance.jetstream import ops
    from appliance.jetstream.config import parse_stream_config

    config = parse_stream_config({"name": "S", "subjects": ["s.>"], "max_msgs_per_subject": 2, "max_msgs": 40})
    replicas = StreamReplicas(seed=crash_point, config=config, file_stores=True, snapshot_entries=5)
    leader = replicas.elect()
    target = leader.name if victim == "leader" else next(p for p in replicas.peers if p != leader.name)
    replicas.crash_store_at(target, crash_point, mode)  # type: ignore[arg-type]
    for tick in range(40):
        current = replicas.leader()
        if current is not None:
            for number in range(tick * 6, tick * 6 + 6):
                current.publish("s.%d" % (number % 9), b"m%d" % number, reply="r.%d" % number)
            if tick % 3 == 2:
                current.stream.propose_op(ops.KIND_DELETE, {"seq": tick * 4, "erase": False}, lambda _r: None)
        replicas.step()
        if replicas.crashes and tick % 5 == 4:
            break
    assert replicas.crashes == [target], f"no crash at write {crash_point}"
    replicas.start(target)
    stored = identical(replicas)
    assert len({payload for _, payload in stored}) == len(stored), "a message is stored twice"
