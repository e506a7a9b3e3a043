"""Seeded faults on real `appliance run` clusters under synchronous publishes with Nats-Msg-Id
(appliance/testing/chaos.py): after healing, every acknowledged message is stored exactly once on
every replica, the replicas are identical and the consumer's ack floor never passed what it was
delivered. The soak runs the same code longer: `appliance chaos --seed S --runs N [--nodes 5]`."""

import pytest

from appliance.testing import chaos_plan
from appliance.testing.chaos import ChaosOptions, RunResult, run_chaos

pytestmark = pytest.mark.integration


def check(result: RunResult, faults: int) -> None:
    report = (f"{chaos_plan.summary_line(1, result.verdict)} {result.failure} {result.verdict.examples} "
              f"{result.kept}")
    assert result.failure == "", report
    assert len(result.faults) == faults, report
    assert result.verdict.acknowledged > 0 and result.delivered > 0, report
    assert result.verdict.clean, report


@pytest.mark.timeout(240)
def test_twenty_kills_of_the_stream_leader_under_load_lose_and_duplicate_nothing() -> None:
    """Issue 14's failover test: kill -9 of the R3 stream's leader 20 times while two publishers
    publish synchronously (~90 s here); the timings are the benchmark's (`make bench` failover)."""
    result = run_chaos(ChaosOptions(seed=20, faults=20, kinds=(chaos_plan.KILL_LEADER,)), log=lambda _: None)
    check(result, 20)
    assert {f.kind for f in result.faults} == {chaos_plan.KILL_LEADER}
    assert len(result.failovers) == 20  # after every kill, publishes were acknowledged again
    ordered = sorted(result.failovers)
    print(f"20 leader kills: first PubAck after p50 {ordered[10]:.2f}s, max {ordered[-1]:.2f}s")


def check_operations(result: RunResult) -> None:
    """Every step-down got a new leader and every peer-remove's server left the stream's group and
    came back (the stream regained its replicas): counted and timed in the result."""
    fired = [f.kind for f in result.faults]
    for kind in chaos_plan.STEPDOWNS:
        assert len(result.stepdowns.get(kind, [])) == fired.count(kind), result.stepdowns
    assert len(result.peer_removals) == fired.count(chaos_plan.PEER_REMOVE), result.peer_removals
    assert all(t > 0 for times in result.stepdowns.values() for t in times)
    assert all(r.removed_s > 0 and r.regained_s > 0 for r in result.peer_removals)


@pytest.mark.timeout(240)
def test_seeded_faults_of_every_kind_on_three_nodes() -> None:
    """Crashes, pauses, partitions and restarts, and the operator's faults: step-downs of the
    stream, the consumer and the meta group, and a peer-remove with no spare server (the stream
    goes on under-replicated until the removed server restarts)."""
    faults = len(chaos_plan.FAULT_KINDS)
    result = run_chaos(ChaosOptions(seed=3, faults=faults), log=lambda _: None)
    check(result, faults)
    assert {f.kind for f in result.faults} == set(chaos_plan.FAULT_KINDS)
    check_operations(result)
    print(f"step-downs {result.stepdowns}; peer-removes {result.peer_removals}")


@pytest.mark.timeout(200)
def test_power_loss_of_every_server_loses_nothing_acknowledged() -> None:
    """kill -9 of every server, then every write none of them fsynced is dropped (the servers
    journal what is durable: appliance/store/powerloss.py), twice with torn last writes; then they
    start again. Acknowledged = fsynced on a quorum, so nothing acknowledged may be missing."""
    result = run_chaos(ChaosOptions(seed=1, faults=3, kinds=(chaos_plan.POWER_LOSS,)), log=lambda _: None)
    check(result, 3)
    assert len(result.power_cuts) == 3
    assert sum(result.power_cuts) > 0  # the cuts did drop unsynced writes: the layer ran in the servers


@pytest.mark.timeout(200)
def test_seeded_faults_on_five_nodes() -> None:
    """Seed 5 on five nodes: two peer-removes (a spare server takes the removed one's place),
    a consumer step-down, a restart and kill -9 of every server (drawn from the kinds before
    power-loss joined them, which has a test of its own)."""
    kinds = tuple(kind for kind in chaos_plan.FAULT_KINDS if kind != chaos_plan.POWER_LOSS)
    result = run_chaos(ChaosOptions(seed=5, nodes=5, faults=5, kinds=kinds), log=lambda _: None)
    check(result, 5)
    assert [f.kind for f in result.faults].count(chaos_plan.PEER_REMOVE) == 2
    check_operations(result)
