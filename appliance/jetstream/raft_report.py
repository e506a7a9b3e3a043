"""The RAFT groups of clustered JetStream as monitoring reports them: /raftz entries, the group
health /healthz checks (nats-server's `isCurrent`), and the cluster summary of `appliance status`.

Pure: everything comes from a replica's GroupReport (cluster/group.py) and a ClusterContext.

Group health, as nats-server's raft `Healthy()` (isCurrent with forward progress) judges a replica:
  - nothing committed yet (commit 0): unhealthy;
  - the leader: healthy;
  - a follower that knows its leader but has not heard from it within LEADER_CONTACT_S (nats-server:
    twice its 1 s heartbeat interval): unhealthy;
  - catching up (a snapshot's data being fetched: apply paused): unhealthy;
  - otherwise healthy when everything committed is applied. nats-server also waits up to 10 ms for
    applies to make progress; our applies run in the same event loop turn as the commit, so a gap
    seen between turns is one that is being worked on: only a paused apply counts against it.
  A follower with no leader known (an election in progress) is healthy by these rules, as there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from appliance.cluster.group import GroupReport
from appliance.jetstream.cluster_info import ClusterContext
from appliance.server.monitor.view import RaftzGroup, RaftzPeer, RaftzWal

NODE_UNHEALTHY = "group node unhealthy"  # nats-server's isStreamHealthy / isConsumerHealthy texts
STREAM_CATCHING_UP = "stream catching up"
LEADER_CONTACT_S = 2.0  # nats-server: hbInterval * 2
META_GROUP_NAME = "_meta_"  # what nats-server names its meta group (ours is "_meta" on disk and wire)


def node_healthy(report: GroupReport) -> bool:
    """nats-server's raft Healthy() (module docstring)."""
    if report.committed == 0:
        return False
    if report.role == "LEADER":
        return True
    if report.leader and report.leader != report.peer and report.leader_seen_ago_s > LEADER_CONTACT_S:
        return False
    if report.apply_paused:
        return False
    return True


def stream_problem(report: GroupReport) -> str:
    """Why a replicated stream's replica is not current ("" when it is), as nats-server words it."""
    if report.apply_paused:
        return STREAM_CATCHING_UP
    return "" if node_healthy(report) else NODE_UNHEALTHY


def consumer_problem(report: GroupReport) -> str:
    return "" if node_healthy(report) else NODE_UNHEALTHY


def raftz_group(
    report: GroupReport, ctx: ClusterContext, *, account: str, kind: str, name: str | None = None
) -> RaftzGroup:
    """One /raftz entry: a follower knows only its leader's contact; the leader every follower's
    replicated index and contact."""
    peers = tuple(
        RaftzPeer(
            peer=p.peer,
            name=ctx.name_of(p.peer),
            last_replicated_index=p.last_replicated_index,
            last_seen_s=p.seen_ago_s,
        )
        for p in report.peers
    )
    size = len(report.voters)
    wal = RaftzWal(
        messages=report.log_entries,
        bytes=report.log_bytes,
        first_seq=report.first_index,
        first_wall_s=report.first_append_wall_s,
        last_seq=report.last_index,
        last_wall_s=report.last_append_wall_s,
    )
    return RaftzGroup(
        account=account,
        name=name or report.group_id,
        kind=kind,
        id=report.peer,
        state=report.role,
        size=size,
        quorum_needed=size // 2 + 1,
        committed=report.committed,
        applied=report.applied,
        term=report.term,
        pterm=report.last_term,
        pindex=report.last_index,
        leader=report.leader,
        leader_since_wall_s=report.leader_since_wall_s,
        ever_had_leader=report.ever_had_leader,
        voted_for=report.voted_for,
        catching_up=report.apply_paused,
        traffic_account=ctx.system_account,
        wal=wal,
        peers=peers,
    )


@dataclass(frozen=True, slots=True)
class GroupSummary:
    """One replicated group as `appliance status` judges it from this server."""

    kind: str  # meta, stream or consumer
    label: str  # "_meta_", "ACC > STREAM", "ACC > STREAM > CONSUMER"
    leader: str  # server name; "" when none is known
    size: int
    quorum: bool  # a leader is known (or this server leads with a quorum heard from)
    lagging: tuple[str, ...] = ()  # "n2-c1 (12 behind)" or "n2-c1 (not seen for 4.2s)"
    under_replicated: str = ""  # "1 of 3 replicas" when the group has fewer voters than configured


def summarise(
    report: GroupReport, ctx: ClusterContext, *, kind: str, label: str, replicas: int, current_s: float,
    settled_commit: int | None = None,
) -> GroupSummary:
    """This server's view of one group: its leader, quorum, lagging followers and under-replication
    (`replicas` configured, fewer voters). On the leader a follower lags when it was not heard from
    within `current_s`, or has not replicated `settled_commit` (what the group had committed a
    little while ago: CommitHistory): under a steady load the slower follower of a quorum is always
    a few entries behind the newest commit, which is no lag. None: the newest commit."""
    size = len(report.voters)
    leader = ctx.name_of(report.leader) if report.leader else ""
    quorum = bool(report.leader)
    lagging: list[str] = []
    if report.role == "LEADER":
        heard = 1 + sum(1 for p in report.peers  # voters only: a learner (catching up) counts for no quorum
                        if p.peer in report.voters and p.seen_ago_s is not None and p.seen_ago_s <= current_s)
        quorum = heard >= size // 2 + 1
        settled = report.committed if settled_commit is None else settled_commit
        for p in report.peers:
            name = ctx.name_of(p.peer) or p.peer
            behind = max(report.committed - p.last_replicated_index, 0)
            if p.seen_ago_s is None or p.seen_ago_s > current_s:
                seen = "never seen" if p.seen_ago_s is None else f"not seen for {p.seen_ago_s:.1f}s"
                lagging.append(f"{name} ({seen}, {behind} behind)")
            elif p.last_replicated_index < settled:
                lagging.append(f"{name} ({behind} behind)")
    under = f"{size} of {replicas} replicas" if size < replicas else ""
    return GroupSummary(kind, label, leader, size, quorum, tuple(lagging), under)


class CommitHistory:
    """Each group's commit index as sampled at each status summary (every second), for the
    `settled_commit` of summarise: the newest commit at least `age_s` old. Bounded: a few samples
    per group, and groups not sampled in a round are forgotten."""

    def __init__(self, age_s: float, samples_max: int = 16) -> None:
        self.age_s = age_s
        self.samples_max = samples_max
        self._samples: dict[str, list[tuple[float, int]]] = {}

    def settled(self, group_id: str, now_s: float, commit: int) -> int:
        """Record `commit` now; the commit of the newest sample at least age_s old (0 when none is)."""
        samples = self._samples.setdefault(group_id, [])
        samples.append((now_s, commit))
        old = [sample for sample in samples if now_s - sample[0] >= self.age_s]
        del samples[: max(len(old) - 1, 0)]  # keep the newest old-enough sample and every newer one
        del samples[: max(len(samples) - self.samples_max, 0)]
        return old[-1][1] if old else 0

    def sample_count(self, group_id: str) -> int:
        return len(self._samples.get(group_id, ()))

    def keep_only(self, group_ids: set[str]) -> None:
        for gone in set(self._samples) - group_ids:
            del self._samples[gone]


def summary_json(groups: Sequence[GroupSummary], *, meta_leader: str, clustered: bool) -> dict[str, object]:
    """The `jetstream` part of the status document worker 0 writes for the supervisor."""
    return {
        "clustered": clustered,
        "meta_leader": meta_leader,
        "groups": len(groups),
        "no_quorum": [f"{g.kind} {g.label}" for g in groups if not g.quorum],
        "lagging": [f"{g.kind} {g.label}: {', '.join(g.lagging)}" for g in groups if g.lagging],
        "under_replicated": [f"{g.kind} {g.label}: {g.under_replicated}" for g in groups if g.under_replicated],
    }
