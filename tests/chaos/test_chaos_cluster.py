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


@pytest.mark.timeout(200)
def test_seeded_faults_of_every_kind_on_three_nodes() -> None:
    result = run_chaos(ChaosOptions(seed=3, faults=8), log=lambda _: None)
    check(result, 8)


@pytest.mark.timeout(200)
def test_seeded_faults_on_five_nodes() -> None:
    result = run_chaos(ChaosOptions(seed=5, nodes=5, faults=5), log=lambda _: None)
    check(result, 5)
