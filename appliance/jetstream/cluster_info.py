"""The `cluster` block of stream info, consumer info and /jsz stream details, and /jsz
`meta_cluster`, as nats-server 2.15.1 reports a RAFT group (its ClusterInfo / MetaClusterInfo).

Pure: everything comes from the replica's view of its group (`ReportingGroup`, which RaftGroup
implements) and a ClusterContext (cluster name, this server, peer id -> server name).

  - not clustered, or a single-voter group (R1; nats-server runs no RAFT node for it):
    {"name"?: cluster, "leader": this server}; a standalone server has no cluster name.
  - several members: {"name", "raft_group", "leader"?, "leader_since"?, "system_account",
    "traffic_account", "replicas"?}. `replicas` lists the group's members (voters and learners,
    RaftGroup's catching-up joiners, never current until promoted) except the answering
    server, sorted by name; a leaderless group (or one whose leader's name is unknown) has no
    `leader` and lists the answering server too. On the leader a follower is `current` when it
    holds everything committed (`lag` = commit - its last index, omitted when 0), was heard
    from within JS_REPLICA_CURRENT_S and its last response did not say its store lacks data (a
    range lost to damage, awaiting repair: RAFT's DEGRADED_CONTEXT); on a follower the leader is current when heard from
    within JS_LEADER_CURRENT_S and the other followers are not current, never seen.
  - a peer whose server name is unknown: "Server name unknown at this time (peerID: X)",
    offline, no lag.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from appliance import limits
from appliance.cluster.group import PeerInfo as GroupPeer
from appliance.jetstream.wire import rfc3339
from appliance.server.monitor.jsinfo import peer_json
from appliance.server.monitor.view import MetaClusterInfo, PeerInfo

if TYPE_CHECKING:
    from appliance.jetstream.service import JetStreamService

UNKNOWN_SERVER = "Server name unknown at this time (peerID: {peer})"
NS_PER_S = 1_000_000_000


class ReportingGroup(Protocol):
    """What cluster info reads from a replica of a RAFT group (cluster/group.py RaftGroup)."""

    group_id: str

    def is_leader(self) -> bool: ...

    def leader(self) -> str: ...  # the leader's peer id; "" when none is known

    def voters(self) -> tuple[str, ...]: ...

    def learners(self) -> tuple[str, ...]: ...  # members that do not vote yet (catching up)

    def peers(self) -> list[GroupPeer]: ...  # the leader's view of its followers (empty elsewhere)

    def commit_index(self) -> int: ...

    def leader_since_wall_s(self) -> float | None: ...

    def leader_seen_ago_s(self) -> float: ...


@dataclass(frozen=True, slots=True)
class ClusterContext:
    cluster: str  # the cluster's name; "" when this server is not clustered
    server_name: str
    peer: str  # this server's peer id
    names: Mapping[str, str] = field(default_factory=dict)  # peer id -> server name
    offline: Collection[str] = ()  # peer ids whose server is known to be down
    system_account: str = "$SYS"  # replication traffic's account (nats-server's default)

    def name_of(self, peer: str) -> str:
        """The server name of a peer id; "" when unknown."""
        if peer == self.peer:
            return self.names.get(peer) or self.server_name
        return self.names.get(peer, "")


def replicas(group: ReportingGroup, ctx: ClusterContext) -> list[PeerInfo]:
    """The group's members as the answering replica reports them (module docstring), by name."""
    leader_peer = group.leader()
    leaderless = not leader_peer or not ctx.name_of(leader_peer)
    leading = group.is_leader()
    seen = {peer.peer: peer for peer in group.peers()} if leading else {}
    commit = group.commit_index() if leading else 0
    out: list[PeerInfo] = []
    learners = group.learners()
    for voter in group.voters() + learners:
        if voter == ctx.peer and not leaderless:
            continue
        active_s, lag, current = 0.0, 0, False
        if voter == ctx.peer:
            current = voter not in learners
        elif leading:
            follower = seen.get(voter)
            if follower is not None:
                active_s, lag = follower.seen_ago_s, max(commit - follower.match, 0)
                current = (lag == 0 and active_s <= limits.JS_REPLICA_CURRENT_S and not follower.learner
                           and not follower.degraded)
        elif voter == leader_peer:
            active_s = group.leader_seen_ago_s()
            current = active_s <= limits.JS_LEADER_CURRENT_S
        name = ctx.name_of(voter)
        if name:
            out.append(PeerInfo(name, current, active_s, voter, offline=voter in ctx.offline, lag=lag))
        else:
            out.append(PeerInfo(UNKNOWN_SERVER.format(peer=voter), current, active_s, voter, offline=True))
    out.sort(key=lambda peer: peer.name)
    return out


def cluster_json(group: ReportingGroup | None, ctx: ClusterContext) -> dict[str, object]:
    """The `cluster` block of a stream's or consumer's info (see the module docstring)."""
    out: dict[str, object] = {}
    if ctx.cluster:
        out["name"] = ctx.cluster
    if group is None or len(group.voters()) + len(group.learners()) <= 1:
        out["leader"] = ctx.server_name
        return out
    out["raft_group"] = group.group_id
    leader = ctx.name_of(group.leader()) if group.leader() else ""
    if leader:
        out["leader"] = leader
    since = group.leader_since_wall_s()
    if since is not None:
        out["leader_since"] = rfc3339(int(since * NS_PER_S))
    out["system_account"] = True
    out["traffic_account"] = ctx.system_account
    listed = replicas(group, ctx)
    if listed:
        out["replicas"] = [peer_json(peer) for peer in listed]
    return out


def meta_cluster(group: ReportingGroup, ctx: ClusterContext) -> MetaClusterInfo | None:
    """/jsz `meta_cluster` and /varz `jetstream.meta`: None when not clustered (nats-server
    omits it on a standalone server)."""
    if not ctx.cluster:
        return None
    voters = group.voters()
    leader_peer = group.leader()
    leader = ctx.name_of(leader_peer) if leader_peer else ""
    return MetaClusterInfo(
        name=ctx.cluster,
        cluster_size=len(voters),
        quorum_needed=len(voters) // 2 + 1,
        leader=leader,
        leader_peer=leader_peer if leader else "",
        replicas=tuple(replicas(group, ctx)),
    )


def context_of(service: JetStreamService) -> ClusterContext:
    """The running service's cluster context: its cluster name and peer id, the peer names the
    meta group's server list knows (its offline servers flagged) and, over them, the service's
    `peer_names`."""
    server = service.server
    known = service.meta.servers
    names = {info.peer: info.name for info in known}
    names.update(service.peer_names)
    return ClusterContext(
        cluster=service.meta.cluster,
        server_name=server.server_name,
        peer=service.peer,
        names=names,
        offline=frozenset(info.peer for info in known if not info.online),
        system_account=server.accounts.system_name or "$SYS",
    )


def asset_cluster(
    service: JetStreamService, group: ReportingGroup, *, standalone: bool
) -> dict[str, object] | None:
    """An asset's `cluster` block as an API answer carries it: always when clustered; on a
    standalone server only where nats-server adds {"leader"} (`standalone`: STREAM.INFO and /jsz;
    not stream create/update/list nor any consumer answer)."""
    ctx = context_of(service)
    return cluster_json(group, ctx) if ctx.cluster or standalone else None
