"""A follower whose store is behind its leader's decided batch resyncs from its leader
(jetstream/resync.py) instead of refusing that batch and every later one. Three real Stream
replicas over the simulator's network (appliance/testing/sim/streams.py); no sockets, no real
clock. The follower's store is replaced by one that lost its tail (the leader's first messages
only), underneath a log that says it applied them all."""

import json
import logging

import pytest

from appliance.jetstream import ops
from appliance.store.api import StoredMsg
from appliance.testing.sim.streams import Replica, StreamReplicas

SEEDS = [1, 2, 3]


def acks(replica: Replica) -> dict[bytes, dict[str, object]]:
    return {reply: json.loads(body) for reply, body in replica.host.sent if reply.startswith(b"r.")}


def contents(replica: Replica) -> list[tuple[int, str, bytes, bytes, int]]:
    return [(m.seq, m.subject, m.headers, m.payload, m.timestamp_ns) for m in replica.stream.store.scan(1)]


def bounds(replica: Replica) -> tuple[int, int, int, tuple[int, ...]]:
    state = replica.stream.store.state(with_deleted=True)
    return state.first_seq, state.last_seq, state.msgs, state.deleted


def holds_only(follower: Replica, msgs: list[StoredMsg]) -> None:
    """The follower's store now holds only `msgs` (its tail lost underneath its log)."""
    store = follower.stream.store
    store.reset()
    store.append_restored(msgs)  # type: ignore[attr-defined]
    store.finish_restore(msgs[-1].seq, msgs[-1].timestamp_ns)  # type: ignore[attr-defined]


def lose_tail(follower: Replica, leader: Replica, keep: int) -> None:
    """The follower's store now holds only the leader's messages up to `keep`."""
    holds_only(follower, [m for m in leader.stream.store.scan(1) if m.seq <= keep])


@pytest.mark.sim
@pytest.mark.parametrize("file_stores", [False, True])
@pytest.mark.parametrize("seed", SEEDS)
def test_a_follower_behind_the_leaders_batch_catches_up_and_applies_the_later_batches(
    seed: int, file_stores: bool, caplog: pytest.LogCaptureFixture
) -> None:
    replicas = StreamReplicas(seed=seed, file_stores=file_stores, segment_bytes=256 if file_stores else None)
    leader = replicas.elect()
    for n in range(1, 7):
        leader.publish(f"s.{n % 2}", b"m%d" % n, reply=f"r.{n}")
        replicas.step()
    everyone = list(replicas.replicas.values())
    replicas.run_until(lambda: all(r.stream.store.state().last_seq == 6 for r in everyone))
    deleted: list[object] = []  # a hole inside the range the follower lacks: it must stay a hole
    leader.stream.propose_op(ops.KIND_DELETE, {"seq": 4, "erase": False}, deleted.append)
    replicas.run_until(lambda: deleted == [True] and all(r.stream.store.state().msgs == 5 for r in everyone))
    follower = next(r for r in everyone if r is not leader)
    lose_tail(follower, leader, keep=2)

    degraded_while_fetching: list[bool] = []

    def watch() -> bool:
        if follower.stream.fetching:
            degraded_while_fetching.append(follower.stream.group.core.degraded)
        return False

    with caplog.at_level(logging.WARNING, logger="appliance.jetstream.resync"):
        replies = []
        for n in range(7, 19):  # several batches: the first finds the follower behind, the rest follow it
            leader.publish("s.x", b"m%d" % n, reply=f"r.{n}")
            replies.append(f"r.{n}".encode())
            if n % 3 == 0:
                replicas.step()
                watch()
        replicas.run_until(lambda: watch() or (all(r in acks(leader) for r in replies)
                                                and contents(follower) == contents(leader)))
    assert [acks(leader)[r]["seq"] for r in replies] == list(range(7, 19))
    assert contents(follower) == contents(leader)
    assert bounds(follower) == bounds(leader) == (1, 18, 17, (4,))
    assert follower.stream.mismatches == 1
    assert degraded_while_fetching and all(degraded_while_fetching), "not current while it resyncs"
    assert not follower.stream.group.core.degraded and not follower.stream.fetching
    assert any("Resetting stream cluster state for 'S': this replica's last sequence 2 is behind the leader's "
               "batch at sequence 7; catching up sequences 3..6" in r.getMessage() for r in caplog.records)
    # and the replica goes on as a whole copy: it can lead
    leader.publish("s.y", b"last", reply="r.last")
    replicas.run_until(lambda: b"r.last" in acks(leader))
    replicas.run_until(lambda: all(contents(r) == contents(leader) for r in everyone))


@pytest.mark.sim
@pytest.mark.parametrize("file_stores", [False, True])
@pytest.mark.parametrize("seed", SEEDS)
def test_a_follower_ahead_of_the_leaders_batch_starts_over_from_the_leader(
    seed: int, file_stores: bool, caplog: pytest.LogCaptureFixture
) -> None:
    replicas = StreamReplicas(seed=seed, file_stores=file_stores, segment_bytes=256 if file_stores else None)
    leader = replicas.elect()
    for n in range(1, 6):
        leader.publish("s.a", b"m%d" % n, reply=f"r.{n}")
        replicas.step()
    everyone = list(replicas.replicas.values())
    replicas.run_until(lambda: all(r.stream.store.state().last_seq == 5 for r in everyone))
    deleted: list[object] = []
    leader.stream.propose_op(ops.KIND_DELETE, {"seq": 2, "erase": False}, deleted.append)
    replicas.run_until(lambda: deleted == [True] and all(r.stream.store.state().msgs == 4 for r in everyone))
    follower = next(r for r in everyone if r is not leader)
    for n in range(2):  # messages its leader never decided: sequences 6 and 7 here only
        follower.stream.store.store_msg("s.x", b"", b"stray %d" % n, 1)
    with caplog.at_level(logging.WARNING, logger="appliance.jetstream.resync"):
        replies = []
        for n in range(6, 16):
            leader.publish("s.b", b"m%d" % n, reply=f"r.{n}")
            replies.append(f"r.{n}".encode())
            if n % 4 == 0:
                replicas.step()
        replicas.run_until(lambda: all(r in acks(leader) for r in replies)
                           and contents(follower) == contents(leader))
    assert [acks(leader)[r]["seq"] for r in replies] == list(range(6, 16))
    assert bounds(follower) == bounds(leader) == (1, 15, 14, (2,))
    assert all(b"stray" not in m[3] for m in contents(follower))
    assert follower.stream.mismatches == 1
    assert not follower.stream.group.core.degraded and not follower.stream.fetching
    assert any("is ahead of the leader's batch at sequence 6" in r.getMessage() for r in caplog.records)
    leader.publish("s.y", b"last", reply="r.last")
    replicas.run_until(lambda: b"r.last" in acks(leader))
    replicas.run_until(lambda: all(contents(r) == contents(leader) for r in everyone))


@pytest.mark.sim
def test_a_follower_whose_store_was_emptied_below_the_batch_starts_at_it() -> None:
    """The leader holds nothing before its batch (deleted): the replica that is ahead empties
    its store, its fetch brings no message, and it stores the batch at its sequence."""
    replicas = StreamReplicas(seed=4)
    leader = replicas.elect()
    leader.publish("s.a", b"one", reply="r.1")
    everyone = list(replicas.replicas.values())
    replicas.run_until(lambda: all(r.stream.store.state().msgs == 1 for r in everyone))
    purged: list[object] = []
    leader.stream.propose_op(ops.KIND_DELETE, {"seq": 1, "erase": False}, purged.append)
    replicas.run_until(lambda: purged == [True] and all(r.stream.store.state().msgs == 0 for r in everyone))
    follower = next(r for r in everyone if r is not leader)
    follower.stream.store.store_msg("s.x", b"", b"stray", 1)  # sequence 2 here only
    leader.publish("s.a", b"two", reply="r.2")
    replicas.run_until(lambda: b"r.2" in acks(leader) and contents(follower) == contents(leader))
    assert [m[0] for m in contents(follower)] == [2] and bounds(follower) == bounds(leader)


@pytest.mark.sim
@pytest.mark.parametrize("mode", ["flush", "lose"])
@pytest.mark.parametrize("seed", SEEDS)
def test_a_file_store_replica_that_crashes_while_it_starts_over_converges_after_its_restart(
    seed: int, mode: str
) -> None:
    replicas = StreamReplicas(seed=seed, file_stores=True, segment_bytes=256)
    leader = replicas.elect()
    for n in range(1, 40):
        leader.publish("s.a", b"m%d" % n, reply=f"r.{n}")
        if n % 5 == 0:
            replicas.step()
    everyone = list(replicas.replicas.values())
    replicas.run_until(lambda: all(r.stream.store.state().last_seq == 39 for r in everyone))
    follower = next(r for r in everyone if r is not leader)
    follower.stream.store.store_msg("s.x", b"", b"stray", 1)  # sequence 40 here only
    leader.publish("s.b", b"m40", reply="r.40")
    # emptied, refilling from the leader
    replicas.run_until(lambda: follower.stream.fetching and follower.stream.store.state().last_seq < 39)
    replicas.crash(follower.name, mode)  # type: ignore[arg-type]
    replicas.start(follower.name)
    for n in range(41, 50):
        leader.publish("s.b", b"m%d" % n, reply=f"r.{n}")
        replicas.step()
    everyone = list(replicas.replicas.values())
    replicas.run_until(lambda: b"r.49" in acks(leader)
                       and all(contents(r) == contents(leader) for r in everyone))
    assert bounds(replicas.replicas[follower.name]) == bounds(leader) == (1, 49, 49, ())


@pytest.mark.sim
@pytest.mark.parametrize("seed", SEEDS)
def test_a_follower_behind_whose_first_messages_its_leader_removed_starts_over(
    seed: int, caplog: pytest.LogCaptureFixture
) -> None:
    """Behind, but its store is not the start of the leader's (the leader removed its first
    messages since): fetching only the missing tail would leave it with another first sequence."""
    replicas = StreamReplicas(seed=seed)
    leader = replicas.elect()
    for n in range(1, 9):
        leader.publish("s.a", b"m%d" % n, reply=f"r.{n}")
        replicas.step()
    everyone = list(replicas.replicas.values())
    replicas.run_until(lambda: all(r.stream.store.state().last_seq == 8 for r in everyone))
    old = list(leader.stream.store.scan(1))[:5]
    for seq in (1, 2, 3):
        done: list[object] = []
        leader.stream.propose_op(ops.KIND_DELETE, {"seq": seq, "erase": False}, done.append)
        replicas.run_until(lambda: done == [True])
    replicas.run_until(lambda: all(r.stream.store.state().first_seq == 4 for r in everyone))
    follower = next(r for r in everyone if r is not leader)
    holds_only(follower, old)  # 1..5: its leader holds 4..8
    with caplog.at_level(logging.WARNING, logger="appliance.jetstream.resync"):
        leader.publish("s.b", b"m9", reply="r.9")
        replicas.run_until(lambda: b"r.9" in acks(leader) and contents(follower) == contents(leader))
    assert bounds(follower) == bounds(leader) == (4, 9, 6, ())
    assert any("holds sequence 1 unlike its leader and is behind the leader's batch at sequence 9"
               in r.getMessage() for r in caplog.records)


@pytest.mark.sim
@pytest.mark.parametrize("seed", SEEDS)
def test_a_leader_whose_store_lost_its_tail_hands_over_and_resyncs_instead_of_deciding_over_acked_messages(
    seed: int, caplog: pytest.LogCaptureFixture
) -> None:
    replicas = StreamReplicas(seed=seed)
    leader = replicas.elect()
    for n in range(1, 7):
        leader.publish("s.a", b"m%d" % n, reply=f"r.{n}")
        replicas.step()
    everyone = list(replicas.replicas.values())
    replicas.run_until(lambda: all(b"r.%d" % n in acks(leader) for n in range(1, 7))
                       and all(r.stream.store.state().last_seq == 6 for r in everyone))
    acked = contents(leader)
    lose_tail(leader, leader, keep=2)  # acknowledged 3..6 gone from the leader's store only
    with caplog.at_level(logging.ERROR, logger="appliance.jetstream.stream"):
        leader.publish("s.b", b"lost?", reply="r.x")
        replicas.run_until(lambda: (new := replicas.leader()) is not None and new is not leader)
    assert b"r.x" not in acks(leader), "never decided over the acknowledged sequences"
    assert any("below sequence 6 it held" in r.getMessage() for r in caplog.records)
    new = replicas.leader()
    assert new is not None and new is not leader
    new.publish("s.b", b"m7", reply="r.7")
    replicas.run_until(lambda: b"r.7" in acks(new) and all(contents(r) == contents(new) for r in everyone))
    assert acks(new)[b"r.7"]["seq"] == 7
    assert contents(leader)[:6] == acked, "the old leader got its acknowledged messages back"
    assert bounds(leader) == bounds(new) == (1, 7, 7, ())
