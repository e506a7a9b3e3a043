"""Named scenarios on the simulator harness (TigerBeetle's replica_test style): faults placed by
hand at the moments that matter, every checker running after every step."""

import pytest

from appliance.testing.sim.simulator import SimOptions, Simulator

GROUP = "g0"


def calm(seed: int = 1, nodes: int = 3) -> Simulator:
    sim = Simulator(SimOptions(seed=seed, ticks=0, nodes=nodes, groups=1, faults=frozenset()))
    sim.run_ticks(60)
    assert sim.leader(GROUP) is not None
    return sim


@pytest.mark.sim
def test_leader_crashes_after_persisting_before_its_appends_leave() -> None:
    sim = calm()
    leader = sim.leader(GROUP)
    assert leader is not None
    assert sim.propose(leader.name, GROUP)
    leader.groups[GROUP].process_ready()  # persisted and handed to the network ...
    sim.crash(leader.name)  # ... and the process dies before the sends are flushed
    sim.run_ticks(80)
    new_leader = sim.leader(GROUP)
    assert new_leader is not None and new_leader.name != leader.name
    sim.settle()  # the entry is now committed everywhere or nowhere; the checkers agree


@pytest.mark.sim
def test_follower_with_a_torn_last_write_recovers_and_catches_up() -> None:
    sim = calm()
    leader = sim.leader(GROUP)
    assert leader is not None
    follower = next(name for name in sim.node_ids if name != leader.name)
    sim.run_ticks(30, workload=True)
    node = sim.nodes[follower]
    log_name = f"{GROUP}.raftlog"
    half_record = b"\x40\x00\x00\x00\x00\x00\x00\x00\x01half"  # a 64-byte record cut after 13 bytes
    node.disk.append(log_name, half_record)
    node.disk.sync(log_name)  # the cut write did reach the disk
    sim.crash(follower)
    sim.restart(follower)
    assert node.groups[GROUP].storage.torn_bytes == len(half_record)  # truncated on open
    sim.run_ticks(30, workload=True)
    sim.settle()


@pytest.mark.sim
def test_a_node_away_for_long_catches_up_by_install_snapshot() -> None:
    sim = calm()
    leader = sim.leader(GROUP)
    assert leader is not None
    away = next(name for name in sim.node_ids if name != leader.name)
    sim.crash(away)
    sim.run_ticks(200, workload=True)
    live_leader = sim.leader(GROUP)
    assert live_leader is not None
    assert live_leader.groups[GROUP].storage.first_index() > 1  # the log was compacted meanwhile
    sim.restart(away)
    sim.settle()
    assert sim.nodes[away].groups[GROUP].storage.snapshot().meta.index > 0


@pytest.mark.sim
def test_a_minority_leader_commits_nothing_and_its_tail_is_replaced_after_heal() -> None:
    sim = calm(nodes=5)
    leader = sim.leader(GROUP)
    assert leader is not None
    commit_before = leader.groups[GROUP].core.log.committed
    sim.isolate(leader.name)
    for _ in range(5):
        sim.propose(leader.name, GROUP)
    sim.run_ticks(5)
    assert leader.groups[GROUP].core.log.committed == commit_before
    sim.run_ticks(100, workload=True)
    assert not leader.groups[GROUP].is_leader()  # check-quorum: it stepped down
    sim.heal()
    sim.settle()


@pytest.mark.sim
def test_the_whole_cluster_loses_power_and_keeps_every_acknowledged_write() -> None:
    sim = calm()
    sim.run_ticks(50, workload=True)
    acked = sim.checkers.acked_count()
    assert acked > 0
    for name in sim.node_ids:
        sim.crash(name)
    for name in sim.node_ids:
        sim.restart(name)
    sim.settle()  # every acknowledged entry is applied on every node again (checked on apply)
