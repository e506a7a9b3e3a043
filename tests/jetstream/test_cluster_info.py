"""The `cluster` block of stream/consumer info and /jsz `meta_cluster` (jetstream/cluster_info.py),
in nats-server 2.15.1's shapes: pure, from real three-voter RaftGroups on a hand-cranked loop
(tests/cluster/test_group_api.py) and from fake groups for the states a real one is slow to reach."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from appliance.cluster.group import PeerInfo as GroupPeer
from appliance.jetstream.cluster_info import ClusterContext, cluster_json, meta_cluster, replicas
from appliance.server.monitor.jsinfo import meta_json
from tests.cluster.test_group_api import Cluster

NAMES = {"a": "n1-c1", "b": "n2-c1", "c": "n3-c1"}


def context(peer: str, *, cluster: str = "C1", names: dict[str, str] | None = None) -> ClusterContext:
    return ClusterContext(cluster=cluster, server_name=NAMES[peer], peer=peer,
                          names=NAMES if names is None else names, system_account="SYS")


@dataclass
class FakeGroup:
    """A replica's view of its group, set by hand."""

    me: str
    lead: str
    members: tuple[str, ...]
    followers: list[GroupPeer] = field(default_factory=list)
    commit: int = 0
    since_wall_s: float | None = None
    leader_seen_s: float = 0.0
    group_id: str = "S-R3F-abc"
    catching_up: tuple[str, ...] = ()  # learners

    def is_leader(self) -> bool:
        return self.lead == self.me

    def leader(self) -> str:
        return self.lead

    def voters(self) -> tuple[str, ...]:
        return self.members

    def learners(self) -> tuple[str, ...]:
        return self.catching_up

    def peers(self) -> list[GroupPeer]:
        return self.followers if self.is_leader() else []

    def commit_index(self) -> int:
        return self.commit

    def leader_since_wall_s(self) -> float | None:
        return self.since_wall_s if self.is_leader() else None

    def leader_seen_ago_s(self) -> float:
        return 0.0 if self.is_leader() else self.leader_seen_s


def test_standalone_and_single_voter_assets_name_only_their_server() -> None:
    single = FakeGroup("a", "a", ("a",))
    assert cluster_json(single, context("a", cluster="")) == {"leader": "n1-c1"}  # nats-server: {"leader":"S1"}
    assert list(cluster_json(single, context("a")).items()) == [("name", "C1"), ("leader", "n1-c1")]
    assert cluster_json(None, context("b")) == {"name": "C1", "leader": "n2-c1"}


def test_the_leader_of_a_real_r3_group_reports_both_followers_current_in_key_order() -> None:
    cluster = Cluster()
    leader = cluster.leader()
    cluster.settle()
    me = leader.core.id
    info = cluster_json(leader, context(me))
    assert list(info) == ["name", "raft_group", "leader", "leader_since", "system_account",
                          "traffic_account", "replicas"]
    assert info["name"] == "C1" and info["raft_group"] == "S-1" and info["leader"] == NAMES[me]
    assert str(info["leader_since"]).startswith("2023-11-14T22:13:2")  # ManualClock wall time, elected
    assert info["system_account"] is True and info["traffic_account"] == "SYS"
    listed = info["replicas"]
    assert isinstance(listed, list)
    others = sorted(NAMES[p] for p in NAMES if p != me)
    assert [r["name"] for r in listed] == others
    for replica in listed:
        assert list(replica) == ["name", "current", "active", "peer"]  # lag 0 and offline omitted
        assert replica["current"] is True and replica["peer"] in NAMES


def test_a_cut_off_follower_lags_and_stops_being_current() -> None:
    cluster = Cluster()
    leader = cluster.leader()
    cluster.settle()
    me = leader.core.id
    cut = next(p for p in cluster.groups if p != me)
    cluster.net.cut.add(cut)
    for index in range(3):
        leader.propose(b"m%d" % index)
    cluster.settle()
    cluster.clock.advance(0.5)
    leader.tick()
    by_peer = {r.peer: r for r in replicas(leader, context(me))}
    assert by_peer[cut].lag == 3 and not by_peer[cut].current
    assert by_peer[cut].active_s >= 0.5
    healthy = next(p for p in by_peer if p != cut)
    assert by_peer[healthy].lag == 0 and by_peer[healthy].current
    row = json.loads(json.dumps(cluster_json(leader, context(me))))["replicas"]
    assert [r for r in row if r["peer"] == cut][0]["lag"] == 3


def test_a_follower_reports_the_leader_and_the_other_follower_but_not_itself() -> None:
    cluster = Cluster()
    leader = cluster.leader()
    cluster.settle()
    follower_id = next(p for p in cluster.groups if p != leader.core.id)
    follower = cluster.groups[follower_id]
    info = cluster_json(follower, context(follower_id))
    assert info["leader"] == NAMES[leader.core.id] and "leader_since" not in info  # only the leader has it
    listed = {r["peer"]: r for r in info["replicas"]}  # type: ignore[union-attr]
    assert set(listed) == set(NAMES) - {follower_id}
    assert listed[leader.core.id]["current"] is True
    other = next(p for p in listed if p != leader.core.id)
    assert listed[other] == {"name": NAMES[other], "current": False, "active": 0, "peer": other}


def test_follower_view_of_a_leader_not_heard_from_for_over_two_seconds_is_outdated() -> None:
    group = FakeGroup("b", "a", ("a", "b", "c"), leader_seen_s=2.5)
    by_peer = {r.peer: r for r in replicas(group, context("b"))}
    assert not by_peer["a"].current and by_peer["a"].active_s == 2.5


def test_leaderless_group_has_no_leader_and_lists_the_answering_server() -> None:
    group = FakeGroup("b", "", ("a", "b", "c"))
    info = cluster_json(group, context("b"))
    assert "leader" not in info and "leader_since" not in info
    assert [(r["name"], r["current"]) for r in info["replicas"]] == [  # type: ignore[union-attr]
        ("n1-c1", False), ("n2-c1", True), ("n3-c1", False)]


def test_unknown_peer_names_are_spelled_as_nats_server_does_and_lose_their_lag() -> None:
    followers = [GroupPeer("b", True, 0.1, 10), GroupPeer("zz", False, 3.0, 4)]
    group = FakeGroup("a", "a", ("a", "b", "zz"), followers=followers, commit=10, since_wall_s=1_700_000_000.5)
    info = cluster_json(group, context("a"))
    assert info["leader_since"] == "2023-11-14T22:13:20.5Z"
    assert info["replicas"] == [
        {"name": "Server name unknown at this time (peerID: zz)", "current": False, "offline": True,
         "active": 3_000_000_000, "peer": "zz"},
        {"name": "n2-c1", "current": True, "active": 100_000_000, "peer": "b"},
    ]


def test_a_follower_silent_for_over_ten_seconds_is_not_current_even_without_lag() -> None:
    followers = [GroupPeer("b", True, 10.5, 7), GroupPeer("c", True, 9.9, 7)]
    group = FakeGroup("a", "a", ("a", "b", "c"), followers=followers, commit=7)
    by_peer = {r.peer: r for r in replicas(group, context("a"))}
    assert not by_peer["b"].current and by_peer["c"].current


def test_a_learner_is_listed_outdated_with_its_lag_until_promoted() -> None:
    # an R1 stream raised to R3: one voter, two learners fetching its messages
    followers = [GroupPeer("b", False, 0.1, 1, learner=True), GroupPeer("c", False, 0.1, 9, learner=True)]
    group = FakeGroup("a", "a", ("a",), followers=followers, commit=9, catching_up=("b", "c"))
    info = cluster_json(group, context("a"))
    assert info["leader"] == "n1-c1"
    assert info["replicas"] == [
        {"name": "n2-c1", "current": False, "active": 100_000_000, "lag": 8, "peer": "b"},
        {"name": "n3-c1", "current": False, "active": 100_000_000, "peer": "c"},  # no lag, still a learner
    ]


def test_a_leader_whose_name_is_unknown_counts_as_leaderless() -> None:
    group = FakeGroup("b", "x", ("x", "b", "c"))
    info = cluster_json(group, context("b"))
    assert "leader" not in info
    assert "n2-c1" in [r["name"] for r in info["replicas"]]  # type: ignore[union-attr]


def test_offline_peers_are_flagged_before_active() -> None:
    ctx = ClusterContext(cluster="C1", server_name="n1-c1", peer="a", names=NAMES, offline={"c"})
    group = FakeGroup("a", "a", ("a", "b", "c"),
                      followers=[GroupPeer("b", True, 0.2, 5), GroupPeer("c", False, 12.0, 2)], commit=5)
    row = cluster_json(group, ctx)["replicas"][1]  # type: ignore[index]
    assert list(row) == ["name", "current", "offline", "active", "lag", "peer"]
    assert row["offline"] is True and row["lag"] == 3


def test_meta_cluster_as_jsz_shows_it_on_a_follower_and_is_absent_standalone() -> None:
    group = FakeGroup("a", "b", ("a", "b", "c"), leader_seen_s=0.434)
    meta = meta_cluster(group, context("a"))
    assert meta is not None
    out = meta_json(meta)
    # the shape nats-server 2.15.1 answered on follower n1-c1 (leader n2-c1)
    assert list(out) == ["name", "leader", "peer", "replicas", "cluster_size", "quorum_needed", "pending",
                         "pending_requests", "pending_infos", "snapshot"]
    assert out["leader"] == "n2-c1" and out["peer"] == "b"
    assert out["replicas"] == [{"name": "n2-c1", "current": True, "active": 434_000_000, "peer": "b"},
                               {"name": "n3-c1", "current": False, "active": 0, "peer": "c"}]
    assert out["cluster_size"] == 3 and out["quorum_needed"] == 2
    assert meta_cluster(group, context("a", cluster="")) is None


def test_the_service_context_names_peers_from_the_meta_servers_and_peer_names() -> None:
    from types import SimpleNamespace

    from appliance.cluster.placement import ServerInfo
    from appliance.jetstream.cluster_info import context_of

    meta = SimpleNamespace(cluster="C1", servers=[ServerInfo("n1-c1", "a", "C1"), ServerInfo("old", "b", "C1"),
                                                  ServerInfo("n3-c1", "c", "C1", online=False)])
    server = SimpleNamespace(server_name="n1-c1", accounts=SimpleNamespace(system_name="SYS"))
    service = SimpleNamespace(server=server, meta=meta, peer="a", peer_names={"a": "n1-c1", "b": "n2-c1"})
    ctx = context_of(service)  # type: ignore[arg-type]
    assert (ctx.cluster, ctx.peer, ctx.system_account) == ("C1", "a", "SYS")
    assert [ctx.name_of(p) for p in "abcd"] == ["n1-c1", "n2-c1", "n3-c1", ""]
    assert set(ctx.offline) == {"c"}
