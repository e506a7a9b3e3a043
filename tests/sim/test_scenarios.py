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


@pytest.mark.sim
def test_a_killed_leader_is_replaced_within_a_few_ticks_not_an_election_timeout() -> None:
    """Its connections close with the process (peer_gone): the survivors campaign in their slots."""
    sim = calm(seed=6)
    assert sim.profile.pre_vote and sim.profile.closes_connections  # as the servers run
    sim.run_ticks(20, workload=True)
    leader = sim.leader(GROUP)
    assert leader is not None
    config = leader.groups[GROUP].core.config
    term = leader.groups[GROUP].core.term
    sim.crash(leader.name)
    ticks = 0
    while sim.leader(GROUP) is None and ticks < 4 * config.election_ticks:
        sim.run_ticks(1, workload=True)
        ticks += 1
    new_leader = sim.leader(GROUP)
    assert new_leader is not None and new_leader.groups[GROUP].core.term == term + 1
    # slot 1 or 3 (as the term rotates them), plus the message delays of a pre-vote and a vote round
    assert ticks <= 1 + config.leader_gone_slot_ticks + 4 < config.election_ticks
    sim.restart(leader.name)
    sim.run_ticks(30, workload=True)
    sim.settle()


@pytest.mark.sim
@pytest.mark.parametrize("seed", [2, 3, 6, 7, 8, 11])  # with and without pre-vote, check-quorum
def test_a_flapping_route_to_a_live_leader_costs_at_most_one_election_and_loses_nothing(seed: int) -> None:
    """A follower's connections drop and come back while the leader lives: its early campaign is
    ignored by the others' lease (or, cut off, reaches nobody); the checkers run every step."""
    sim = calm(seed)
    assert sim.profile.closes_connections
    leader = sim.leader(GROUP)
    assert leader is not None
    term = leader.groups[GROUP].core.term
    follower = next(name for name in sim.node_ids if name != leader.name)
    for _ in range(3):
        sim.run_ticks(10, workload=True)
        sim.isolate(follower)
        sim.run_ticks(5, workload=True)
        sim.heal()
    sim.run_ticks(30, workload=True)
    new_leader = sim.leader(GROUP)
    assert new_leader is not None
    # no election at all: with pre-vote (as the servers run) the early campaign reaches no term;
    # without it (some seeds' profiles) peer_gone starts none
    assert new_leader is leader and new_leader.groups[GROUP].core.term == term
    sim.settle()
