"""Clustered JetStream monitoring from a replica's RAFT state (jetstream/raft_report.py): nats-server's
group health rules, /raftz entries, and the summary `appliance status` judges (all pure)."""

from dataclasses import replace

from appliance.cluster.group import GroupReport, PeerReport
from appliance.jetstream.cluster_info import ClusterContext
from appliance.jetstream.raft_report import (
    NODE_UNHEALTHY,
    CommitHistory,
    STREAM_CATCHING_UP,
    consumer_problem,
    node_healthy,
    raftz_group,
    stream_problem,
    summarise,
    summary_json,
)
from appliance.supervisor.cluster_status import assess_cluster
from appliance.cli.status import render

CTX = ClusterContext(cluster="C1", server_name="n1", peer="P1", names={"P1": "n1", "P2": "n2", "P3": "n3"})


def leader(**overrides: object) -> GroupReport:
    values: dict[str, object] = dict(
        group_id="S-abc", peer="P1", role="LEADER", term=2, voted_for="P1", leader="P1", ever_had_leader=True,
        leader_since_wall_s=1000.0, leader_seen_ago_s=0.0, committed=30, applied=30, first_index=1,
        last_index=30, last_term=2, log_entries=30, log_bytes=900, first_append_wall_s=990.0,
        last_append_wall_s=1001.0,
        voters=("P1", "P2", "P3"), peers=(PeerReport("P2", 30, 0.1), PeerReport("P3", 30, 0.2)),
        apply_paused=False,
    )
    values.update(overrides)
    return GroupReport(**values)  # type: ignore[arg-type]


def follower(**overrides: object) -> GroupReport:
    values: dict[str, object] = dict(role="FOLLOWER", leader="P2", voted_for="P2", leader_since_wall_s=None,
                                     leader_seen_ago_s=0.3, peers=(PeerReport("P2", 0, 0.3), PeerReport("P3")))
    values.update(overrides)
    return leader(**values)


def test_node_health_follows_nats_servers_is_current() -> None:
    assert node_healthy(leader())
    assert not node_healthy(leader(committed=0, applied=0))  # nothing committed yet
    assert node_healthy(follower())
    assert not node_healthy(follower(leader_seen_ago_s=2.5))  # no recent leader contact
    assert node_healthy(follower(leader="", role="CANDIDATE", leader_seen_ago_s=9.0))  # election: as nats-server
    assert not node_healthy(follower(apply_paused=True))
    assert stream_problem(follower(apply_paused=True)) == STREAM_CATCHING_UP
    assert stream_problem(follower(leader_seen_ago_s=3.0)) == NODE_UNHEALTHY
    assert consumer_problem(follower(leader_seen_ago_s=3.0)) == NODE_UNHEALTHY
    assert stream_problem(leader()) == consumer_problem(leader()) == ""


def test_raftz_entry_of_a_leader_and_a_follower() -> None:
    entry = raftz_group(leader(), CTX, account="$G", kind="stream")
    assert (entry.state, entry.size, entry.quorum_needed, entry.pindex, entry.pterm) == ("LEADER", 3, 2, 30, 2)
    assert [(p.peer, p.name, p.last_replicated_index, p.last_seen_s) for p in entry.peers] == [
        ("P2", "n2", 30, 0.1), ("P3", "n3", 30, 0.2)]
    assert (entry.wal.messages, entry.wal.bytes, entry.wal.first_seq, entry.wal.last_seq) == (30, 900, 1, 30)
    assert (entry.wal.first_wall_s, entry.wal.last_wall_s) == (990.0, 1001.0)
    meta = raftz_group(follower(), CTX, account="$SYS", kind="meta", name="_meta_")
    assert meta.name == "_meta_" and meta.leader == "P2" and meta.leader_since_wall_s is None
    assert [(p.name, p.last_replicated_index, p.last_seen_s) for p in meta.peers] == [("n2", 0, 0.3), ("n3", 0, None)]


def test_summary_of_healthy_lagging_and_leaderless_groups() -> None:
    healthy = summarise(leader(), CTX, kind="stream", label="$G > S", replicas=3, current_s=10.0)
    assert healthy.quorum and not healthy.lagging and not healthy.under_replicated and healthy.leader == "n1"
    behind = summarise(leader(peers=(PeerReport("P2", 30, 0.1), PeerReport("P3", 12, 0.1))), CTX,
                       kind="stream", label="$G > S", replicas=3, current_s=10.0)
    assert behind.quorum and behind.lagging == ("n3 (18 behind)",)
    gone = summarise(leader(peers=(PeerReport("P2", 30, 12.5), PeerReport("P3", 30, 11.0))), CTX,
                     kind="stream", label="$G > S", replicas=3, current_s=10.0)
    assert not gone.quorum  # a leader that heard from no follower lately has no quorum
    assert gone.lagging == ("n2 (not seen for 12.5s, 0 behind)", "n3 (not seen for 11.0s, 0 behind)")
    leaderless = summarise(follower(leader="", role="CANDIDATE"), CTX, kind="meta", label="_meta_", replicas=3,
                           current_s=10.0)
    assert not leaderless.quorum and leaderless.leader == ""
    under = summarise(leader(voters=("P1", "P2"), peers=(PeerReport("P2", 30, 0.1),)), CTX, kind="stream",
                      label="$G > S", replicas=3, current_s=10.0)
    assert under.under_replicated == "2 of 3 replicas"
    # voters P1, P2 (P2 silent) and a learner P3 heard from: the learner gives the leader no quorum
    learner = summarise(leader(voters=("P1", "P2"), learners=("P3",),
                               peers=(PeerReport("P2", 30, 12.0), PeerReport("P3", 2, 0.1))), CTX,
                        kind="stream", label="$G > S", replicas=3, current_s=10.0)
    assert not learner.quorum and learner.under_replicated == "2 of 3 replicas"
    assert learner.lagging == ("n2 (not seen for 12.0s, 0 behind)", "n3 (28 behind)")


def test_status_levels_and_text() -> None:
    ok = summary_json([summarise(leader(), CTX, kind="meta", label="_meta_", replicas=3, current_s=10.0)],
                      meta_leader="n1", clustered=True)
    assert assess_cluster(ok) == ("ok", [])
    assert assess_cluster(None) == ("ok", [])
    lagging = summary_json([summarise(leader(peers=(PeerReport("P2", 30, 0.1), PeerReport("P3", 12, 0.1))), CTX,
                                      kind="stream", label="$G > S", replicas=3, current_s=10.0)],
                           meta_leader="n1", clustered=True)
    assert assess_cluster(lagging) == ("degraded", ["lagging: stream $G > S: n3 (18 behind)"])
    down = summary_json([summarise(follower(leader="", role="CANDIDATE"), CTX, kind="meta", label="_meta_",
                                   replicas=3, current_s=10.0),
                         summarise(replace(follower(), leader=""), CTX, kind="stream", label="$G > S", replicas=3,
                                   current_s=10.0)],
                        meta_leader="", clustered=True)
    level, reasons = assess_cluster(down)
    assert level == "down"
    assert reasons[0].startswith("JetStream meta group has no leader") and reasons[1:] == ["no quorum: stream $G > S"]
    text = render({"health": "down", "reasons": reasons, "jetstream": down, "workers": [], "routes": []})
    assert "JetStream cluster:\n  Meta leader: none (no quorum)\n" in text
    assert "  RAFT groups held here: 2, without quorum: 2, lagging: 0, under-replicated: 0" in text
    assert "  Without quorum: stream $G > S" in text


def test_a_follower_a_few_entries_behind_under_load_is_no_lag() -> None:
    """The slower follower of a quorum trails the newest commit; it lags only when it has not
    replicated what was committed STATUS_LAG_S ago."""
    busy = leader(committed=120, peers=(PeerReport("P2", 120, 0.1), PeerReport("P3", 117, 0.1)))
    assert summarise(busy, CTX, kind="stream", label="$G > S", replicas=3, current_s=10.0,
                     settled_commit=100).lagging == ()
    stuck = leader(committed=120, peers=(PeerReport("P2", 120, 0.1), PeerReport("P3", 60, 0.1)))
    assert summarise(stuck, CTX, kind="stream", label="$G > S", replicas=3, current_s=10.0,
                     settled_commit=100).lagging == ("n3 (60 behind)",)


def test_commit_history_gives_the_commit_of_age_s_ago() -> None:
    history = CommitHistory(age_s=2.0, samples_max=4)
    assert history.settled("S", 0.0, 10) == 0  # nothing is old enough yet
    assert history.settled("S", 1.0, 20) == 0
    assert history.settled("S", 2.0, 30) == 10
    assert history.settled("S", 3.5, 40) == 20
    for step in range(10):  # bounded
        history.settled("S", 4.0 + step * 0.01, 50 + step)
    assert history.sample_count("S") <= 4
    history.settled("C", 0.0, 1)
    history.keep_only({"S"})
    assert history.sample_count("C") == 0 and history.sample_count("S") > 0
