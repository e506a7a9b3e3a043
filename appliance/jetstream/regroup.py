"""Membership of a stream's RAFT group: how the meta record's group changes, and what its leader
does about it (pure decisions, no I/O).

The meta log is the one place of ordering. A peer-remove, a server removal, a replica-count
change or the re-placement of an under-replicated stream is one meta op that sets the stream's
group record to its new peer list (consumers follow: their groups get the same peers). Every
server applies it in log order:

  - a server newly in `peers` opens the stream (and its consumers) as a *joiner*: its RAFT log
    starts with no voters and waits for the leader's appends or snapshot (the snapshot fetches the
    leader's stored messages, cluster/catch_up.py); `joining` lists those peers, so a joiner that
    restarts before it heard from the leader joins again instead of bootstrapping a voter set
    with an empty log (which could elect it);
  - the stream's RAFT leader turns its voters into `peers`, one change at a time as single-server
    membership changes require: first it adds the new peers as *learners* (they fetch the
    snapshot and the log but count for no quorum: a joiner that fetches gigabytes never leaves
    the group without a quorum), the group's leader promotes each to voter once it caught up
    (cluster/group.py), and only when every wanted peer votes come the removals, its own last
    (RAFT hands leadership to the most up-to-date voter); a learner no longer wanted goes first;
  - a server no longer in `peers` keeps its replica running until the group no longer counts it
    (its removal applied there, or the leader stopped contacting it), then closes it and deletes
    its copy.

Replica-count change 1 -> N: an R1 stream runs a single-voter group whose log is in memory (its
store is the durable copy). Its server *converts* it in place: the stream reopens with a durable
RAFT log under the same group id whose first entry is a snapshot of the store's position (voters:
itself), and the joiners catch up from that snapshot. The group id stays the stream's: nothing
else (consumers, clients, monitoring) needs to learn a new one. N -> 1 keeps the durable log of
the group (`raft: true` in the record): a single voter that commits on its own fsync.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

Group = dict[str, object]


def peers_of(group: object) -> list[str]:
    if not isinstance(group, dict):
        return []
    return [str(peer) for peer in group.get("peers") or ()]


def joining_of(group: object) -> list[str]:
    if not isinstance(group, dict):
        return []
    return [str(peer) for peer in group.get("joining") or ()]


def excluded_of(group: object) -> list[str]:
    """Peers taken off this stream by PEER.REMOVE: not placed on it again until they restart."""
    if not isinstance(group, dict):
        return []
    return [str(peer) for peer in group.get("excluded") or ()]


Exclusion = tuple[str, str, str]  # (account, stream, peer): PEER.REMOVE took the peer off the stream


def exclusions(accounts: Mapping[str, Mapping[str, Mapping[str, object]]]) -> set[Exclusion]:
    """Every (account, stream, peer) a stream's group record excludes (meta state's accounts)."""
    return {(account, name, peer) for account, streams in accounts.items() for name, record in streams.items()
            for peer in excluded_of(record.get("group"))}


def restarted_since_excluded(before: set[Exclusion], excluded: set[Exclusion],
                             came_back: set[str]) -> set[Exclusion]:
    """The exclusions whose server went offline and came back after the exclusion was made:
    those of `before` still in force, and those of servers that came back just now. A restart
    before the peer-remove does not end it (the server still holds nothing of the stream to
    start afresh from), and an exclusion that ended and is made again starts over."""
    return {e for e in before if e in excluded} | {e for e in excluded if e[2] in came_back}


def regrouped(group: Group, peers: Sequence[str]) -> Group:
    """`group` with a new peer list: peers that were not members join; the preferred (first)
    leader stays if it is still a member; `raft` marks a group that runs a durable RAFT log."""
    old = peers_of(group)
    new = list(dict.fromkeys(peers))
    assert new, "a stream keeps at least one peer"
    joining = [peer for peer in new if peer not in old or peer in joining_of(group)]
    preferred = str(group.get("preferred") or "")
    out: Group = {**group, "peers": new, "preferred": preferred if preferred in new else new[0]}
    if joining:
        out["joining"] = joining
    else:
        out.pop("joining", None)
    if len(new) > 1 or group.get("raft"):
        out["raft"] = True
    return out


def follows(consumer_group: object, stream_group: Group) -> object:
    """A consumer's group after its stream's changed: the same peers (R follows the stream)."""
    if not isinstance(consumer_group, dict):
        return consumer_group
    return regrouped(consumer_group, peers_of(stream_group))


def resized(peers: Sequence[str], replicas: int, keep_first: str) -> list[str]:
    """The peers kept when a group shrinks to `replicas`: `keep_first` (the proposer, the stream's
    leader when it asks) stays, then the others in their order."""
    ordered = [peer for peer in peers if peer == keep_first] + [peer for peer in peers if peer != keep_first]
    return ordered[:replicas]


def next_change(voters: Sequence[str], wanted: Sequence[str], own: str,
                learners: Sequence[str] = ()) -> tuple[str, str] | None:
    """The one membership change a leader with `voters` and `learners` proposes next to reach
    `wanted` as voters: ("add_learner", peer), ("remove", peer) or None when there is nothing
    to do now (done, or a wanted learner is still catching up: its group promotes it). New
    peers come first, as learners; then unwanted learners go; voters are removed only once every
    wanted peer votes, this leader's own removal last."""
    for peer in wanted:
        if peer not in voters and peer not in learners:
            return ("add_learner", peer)
    for peer in learners:
        if peer not in wanted:
            return ("remove", peer)
    if any(peer in learners for peer in wanted):
        return None
    extra = [peer for peer in voters if peer not in wanted]
    others = [peer for peer in extra if peer != own]
    if others:
        return ("remove", others[0])
    if extra:
        return ("remove", own)
    return None


def under_replicated(record: dict[str, object]) -> int:
    """How many replicas a stream's meta record lacks (0: as configured)."""
    config = record.get("config")
    if not isinstance(config, dict):
        return 0
    wanted = max(int(str(config.get("num_replicas", 1) or 1)), 1)
    return max(wanted - len(peers_of(record.get("group"))), 0)
