"""`/raftz`: the RAFT groups of clustered JetStream held here, as nats-server 2.15.1 answers.

  - no RAFT groups (standalone: JetStream's single-voter groups are no RAFT nodes in nats-server's
    sense; or no JetStream): 404 text/plain `No Raft nodes registered`;
  - `acc` selects the account whose groups are listed; without it the system account's (the meta
    group); no system account: 404 `No Raft nodes returned, check supplied filters`;
  - `group` selects one group of that account; a filter matching nothing answers `{}` (200);
  - the body: {account: {group: {...}}}, keys sorted, indented with three spaces (MarshalIndent
    with "   "), fields and omitempty rules of nats-server's RaftzGroup / RaftzGroupPeer.

Also asked over NATS as `$SYS.REQ.SERVER.PING.RAFTZ` (system.py; options `account`, `group`).
The groups come from the view's optional `raftz_groups()` (the JetStream layer provides them; the
server layer cannot import it).
"""

from __future__ import annotations

from collections.abc import Sequence

from appliance.durations import GO_ZERO_TIME, go_duration, rfc3339_nano, wall_ns
from .endpoint import Endpoint, RequestContext, Response, json_response, text_response
from .gojson import JsonValue
from .view import RaftzGroup, RaftzPeer, RaftzWal, ServerView

NO_RAFT_NODES = "No Raft nodes registered"
NO_MATCH = "No Raft nodes returned, check supplied filters"
INDENT = "   "


def _time(wall_s: float | None) -> str:
    return GO_ZERO_TIME if wall_s is None else rfc3339_nano(wall_ns(wall_s))


def wal_json(wal: RaftzWal) -> dict[str, JsonValue]:
    return {
        "messages": wal.messages,
        "bytes": wal.bytes,
        "first_seq": wal.first_seq,
        "first_ts": _time(wal.first_wall_s),
        "last_seq": wal.last_seq,
        "last_ts": _time(wal.last_wall_s),
        "consumer_count": 0,
    }


def peer_json(peer: RaftzPeer) -> dict[str, JsonValue]:
    out: dict[str, JsonValue] = {"name": peer.name, "known": peer.known}
    if peer.last_replicated_index:
        out["last_replicated_index"] = peer.last_replicated_index
    if peer.last_seen_s is not None:
        out["last_seen"] = go_duration(round(peer.last_seen_s * 1_000_000_000))  # Go: time.Since().String()
    return out


def group_json(group: RaftzGroup) -> dict[str, JsonValue]:
    out: dict[str, JsonValue] = {
        "id": group.id,
        "state": group.state,
        "size": group.size,
        "quorum_needed": group.quorum_needed,
        "committed": group.committed,
        "applied": group.applied,
    }
    if group.catching_up:
        out["catching_up"] = True
    if group.leader:
        out["leader"] = group.leader
    if group.leader_since_wall_s is not None:
        out["leader_since"] = rfc3339_nano(wall_ns(group.leader_since_wall_s))
    out["ever_had_leader"] = group.ever_had_leader
    out["term"] = group.term
    if group.voted_for:
        out["voted_for"] = group.voted_for
    out.update(
        pterm=group.pterm,
        pindex=group.pindex,
        system_account=True,  # replication traffic runs in the system account
        traffic_account=group.traffic_account,
        # queues between the RAFT layer and its users: ours hand over within one loop turn
        ipq_proposal_len=0,
        ipq_entry_len=0,
        ipq_resp_len=0,
        ipq_apply_len=0,
        wal=wal_json(group.wal),
        peers={peer.peer: peer_json(peer) for peer in sorted(group.peers, key=lambda p: p.peer)},
    )
    return out


def raftz_json(groups: Sequence[RaftzGroup], *, account: str, group: str) -> dict[str, JsonValue]:
    """{account: {group: ...}} for the groups of `account` (only `group` when given)."""
    selected = sorted((g for g in groups if g.account == account and (not group or g.name == group)),
                      key=lambda g: g.name)
    if not selected:
        return {}
    return {account: {g.name: group_json(g) for g in selected}}


def _groups(view: ServerView) -> list[RaftzGroup]:
    provider = getattr(view, "raftz_groups", None)
    return list(provider()) if provider is not None else []


def raftz_data(view: ServerView, *, account: str, group: str) -> JsonValue:
    """`$SYS.REQ.SERVER.PING.RAFTZ` {"account", "group"}: the same document, `{}` without groups
    (nats-server's Raftz answers there without the HTTP handler's 404s), null without an account."""
    account = account or view.system_account
    if not account:
        return None
    return raftz_json(_groups(view), account=account, group=group)


def handle(ctx: RequestContext) -> Response:
    ctx.count()
    groups = _groups(ctx.view)
    if not groups:
        return text_response(404, NO_RAFT_NODES)
    account = ctx.query.get("acc") or ctx.view.system_account
    if not account:
        return text_response(404, NO_MATCH)
    return json_response(raftz_json(groups, account=account, group=ctx.query.get("group")), indent=INDENT)


ENDPOINT = Endpoint(paths=("/raftz",), handle=handle, title="Raft Groups")
