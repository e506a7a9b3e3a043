"""What a RaftGroup tells monitoring (/metrics): its role, the new leaders it learned of, and as leader
how many entries each follower is behind; and the Prometheus families rendered from it. Pure (a
hand-cranked loop and an in-memory transport)."""

from __future__ import annotations

from types import SimpleNamespace

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from appliance.server.monitor.metrics import raft_families
from appliance.server.monitor.view import RaftGroupStat
from tests.cluster.test_group_api import Cluster


def stats(cluster: Cluster) -> list[RaftGroupStat]:
    return [RaftGroupStat(kind="stream", group=f"S-{peer}", state=group.role_name(),
                          leader_changes=group.leader_changes, replica_lag=group.replica_lags())
            for peer, group in cluster.groups.items()]


def test_roles_leader_changes_and_the_lag_of_a_cut_off_follower() -> None:
    cluster = Cluster()
    leader = cluster.leader()
    cluster.settle()
    assert sorted(group.role_name() for group in cluster.groups.values()) == ["follower", "follower", "leader"]
    assert all(group.leader_changes == 1 for group in cluster.groups.values())
    cut = next(peer for peer in cluster.groups if peer != leader.core.id)
    cluster.net.cut.add(cut)
    for index in range(5):
        leader.propose(b"m%d" % index)
    cluster.settle()
    lags = leader.replica_lags()
    assert lags[cut] >= 5 and all(lag == 0 for peer, lag in lags.items() if peer != cut)
    assert all(not group.replica_lags() for group in cluster.groups.values() if group is not leader)
    cluster.net.cut.clear()
    target = next(peer for peer in cluster.groups if peer not in (leader.core.id, cut))
    assert leader.transfer_leader(target) == target
    cluster.settle()
    assert cluster.groups[target].leader_changes == 2 and leader.leader_changes == 2


def test_raft_families_count_groups_by_state_and_sum_leader_changes_per_kind() -> None:
    cluster = Cluster()
    leader = cluster.leader()
    cluster.settle()
    cut = next(peer for peer in cluster.groups if peer != leader.core.id)
    cluster.net.cut.add(cut)
    leader.propose(b"x")
    cluster.settle()
    groups = [*stats(cluster), RaftGroupStat(kind="meta", group="_meta_", state="candidate", leader_changes=3)]

    class Collector:
        def collect(self):  # type: ignore[no-untyped-def]
            return raft_families(SimpleNamespace(raft_groups=lambda: groups))  # type: ignore[arg-type]

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Collector())  # type: ignore[arg-type]
    samples = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    assert samples[("appliance_raft_groups", (("kind", "stream"), ("state", "leader")))] == 1
    assert samples[("appliance_raft_groups", (("kind", "stream"), ("state", "follower")))] == 2
    assert samples[("appliance_raft_groups", (("kind", "stream"), ("state", "candidate")))] == 0
    assert samples[("appliance_raft_groups", (("kind", "meta"), ("state", "candidate")))] == 1
    assert samples[("appliance_raft_leader_changes_total", (("kind", "stream"),))] == 3
    assert samples[("appliance_raft_leader_changes_total", (("kind", "meta"),))] == 3
    lag = samples[("appliance_raft_group_replica_lag",
                   (("group", f"S-{leader.core.id}"), ("kind", "stream"), ("peer", cut)))]
    assert lag >= 1
