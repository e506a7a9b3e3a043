"""`/connz`: client connections, filtered, sorted and paged as nats-server does.

Parameters: sort (cid, start, subs, pending, msgs_to, msgs_from, bytes_to, bytes_from, last, idle,
uptime, stop, reason, rtt), auth, subs (1 or detail), offset, limit (default 1024), cid, state
(open, closed, any), acc, user, mqtt_client. Only cid/start and uptime sort ascending; reason sorts by text;
every other order is descending. Ties keep cid order.

Quirks kept on purpose because clients may rely on them: `total` counts the connections in scope
before the user filter; an unknown `acc` answers with an empty `server_id` and `"connections": null`;
closed connections list subscription details with their account, and with auth=1 have no `name_tag`
when they were in $G (nats-server snapshots closed connections differently from open ones).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from appliance.durations import go_duration, rfc3339_nano, uptime, wall_ns
from .endpoint import NOTHING, PART_CLOSED, PART_OPEN, PART_TOP, Endpoint, RequestContext, Response, json_response
from .gojson import JsonValue
from .params import BadRequest, Query
from .view import ConnectionInfo, ConnState, ServerView, SubscriptionInfo

GLOBAL_ACCOUNT = "$G"
CONNECTIONS_LIMIT_DEFAULT = 1024  # nats-server DefaultConnListSize


@dataclass(frozen=True, slots=True)
class ConnzOptions:
    sort: str = ""
    auth: bool = False
    subs: bool = False
    subs_detail: bool = False
    offset: int = 0
    limit: int = CONNECTIONS_LIMIT_DEFAULT
    cid: int = 0
    state: ConnState | None = "open"  # None: a state nats-server does not know, which matches nothing
    user: str = ""
    account: str = ""
    filter_subject: str = ""  # only connections with a subscription that could share a message with it
    mqtt_client: str = ""  # only the MQTT connection with this client id (we serve no MQTT: none match)


SortKey = Callable[[ConnectionInfo, int], float]


def _stop_ns(conn: ConnectionInfo, now_ns: int) -> int:
    return now_ns if conn.stop_wall_s is None else wall_ns(conn.stop_wall_s)


# name -> (key(conn, now_ns), descending)
SORTS: dict[str, tuple[SortKey, bool]] = {
    "cid": (lambda c, now: c.cid, False),
    "start": (lambda c, now: c.cid, False),
    "subs": (lambda c, now: len(c.subscriptions), True),
    "pending": (lambda c, now: c.pending_bytes, True),
    "msgs_to": (lambda c, now: c.out_msgs, True),
    "msgs_from": (lambda c, now: c.in_msgs, True),
    "bytes_to": (lambda c, now: c.out_bytes, True),
    "bytes_from": (lambda c, now: c.in_bytes, True),
    "last": (lambda c, now: wall_ns(c.last_activity_wall_s), True),
    "idle": (lambda c, now: now - wall_ns(c.last_activity_wall_s), True),
    "uptime": (lambda c, now: _stop_ns(c, now) - wall_ns(c.start_wall_s), False),
    "stop": (lambda c, now: _stop_ns(c, now), True),
    "rtt": (lambda c, now: wall_ns(c.rtt_s), True),
}
CLOSED_ONLY_SORTS = ("stop", "reason")


def decode(ctx: RequestContext) -> ConnzOptions:
    return decode_query(ctx.query)


def decode_query(query: Query) -> ConnzOptions:
    sort = query.get("sort")
    auth = query.boolean("auth")
    subs, subs_detail = query.subs()
    offset = query.integer("offset")
    limit = query.integer("limit")
    cid = query.unsigned("cid")
    state = query.state()
    return ConnzOptions(
        sort=sort,
        auth=auth,
        subs=subs,
        subs_detail=subs_detail,
        offset=max(offset, 0),
        limit=limit if limit > 0 else CONNECTIONS_LIMIT_DEFAULT,
        cid=cid,
        state=state,
        user=query.get("user"),
        account=query.get("acc"),
        mqtt_client=query.get("mqtt_client"),
    )


def validate(options: ConnzOptions) -> None:
    if options.sort and options.sort not in SORTS and options.sort != "reason":
        raise BadRequest(f"invalid sorting option: {options.sort}")
    for name in CLOSED_ONLY_SORTS:
        if options.sort == name and options.state != "closed":
            raise BadRequest(f"sort by {name} only valid on closed connections")
    if options.filter_subject not in ("", ">") and not options.account:
        raise BadRequest("filter by subject only valid with account filtering")


def subjects_collide(first: str, second: str) -> bool:
    """Could one message match both subjects (either may hold wildcards)? nats-server SubjectsCollide."""
    left, right = first.split("."), second.split(".")
    for a, b in zip(left, right, strict=False):
        if a == ">" or b == ">":
            return True
        if a != b and a != "*" and b != "*":
            return False
    return len(left) == len(right)


def sub_detail_json(sub: SubscriptionInfo, *, with_account: bool = False) -> dict[str, JsonValue]:
    """A SubDetail; a closed connection's keep their account (nats-server snapshots them at close)."""
    out: dict[str, JsonValue] = {}
    if with_account:
        out["account"] = sub.account
        out["account_tag"] = sub.account
    out["subject"] = sub.subject
    if sub.queue:
        out["qgroup"] = sub.queue
    out["sid"] = sub.sid
    out["msgs"] = sub.msgs
    if sub.max_msgs:
        out["max"] = sub.max_msgs
    out["cid"] = sub.cid
    return out


def connection_json(conn: ConnectionInfo, options: ConnzOptions, now_ns: int) -> dict[str, JsonValue]:
    """One ConnInfo; a closed connection's durations are measured to its stop time."""
    until_ns = _stop_ns(conn, now_ns)
    out: dict[str, JsonValue] = {
        "cid": conn.cid,
        "kind": conn.kind,
        "type": conn.type,
        "ip": conn.ip,
        "port": conn.port,
        "start": rfc3339_nano(wall_ns(conn.start_wall_s)),
        "last_activity": rfc3339_nano(wall_ns(conn.last_activity_wall_s)),
    }
    if conn.stop_wall_s is not None:
        out["stop"] = rfc3339_nano(wall_ns(conn.stop_wall_s))
    if conn.reason:
        out["reason"] = conn.reason
    out["rtt"] = go_duration(_rtt_ns(conn.rtt_s))
    out["uptime"] = uptime(until_ns - wall_ns(conn.start_wall_s))
    out["idle"] = uptime(until_ns - wall_ns(conn.last_activity_wall_s))
    out["pending_bytes"] = conn.pending_bytes
    out["in_msgs"] = conn.in_msgs
    out["out_msgs"] = conn.out_msgs
    out["in_bytes"] = conn.in_bytes
    out["out_bytes"] = conn.out_bytes
    if conn.stalls:
        out["stalls"] = conn.stalls
    out["subscriptions"] = len(conn.subscriptions)
    for key, text in (
        ("name", conn.name),
        ("lang", conn.lang),
        ("version", conn.version),
        ("tls_version", conn.tls_version),
        ("tls_cipher_suite", conn.tls_cipher_suite),
    ):
        if text:
            out[key] = text
    if conn.tls_first:
        out["tls_first"] = True
    if options.auth:
        if conn.authorized_user:
            out["authorized_user"] = conn.authorized_user
        if conn.account != GLOBAL_ACCOUNT:
            out["account"] = conn.account
    closed = conn.stop_wall_s is not None
    if conn.subscriptions and options.subs_detail:
        out["subscriptions_list_detail"] = [
            sub_detail_json(s, with_account=closed) for s in conn.subscriptions
        ]
    elif conn.subscriptions and options.subs:
        out["subscriptions_list"] = [s.subject for s in conn.subscriptions]
    if options.auth and conn.jwt:
        out["jwt"] = conn.jwt
    if options.auth and conn.issuer_key:
        out["issuer_key"] = conn.issuer_key
    if options.auth and not (closed and conn.account == GLOBAL_ACCOUNT):
        out["name_tag"] = conn.name_tag or conn.account  # nats-server names no tag for a closed connection of $G
    return out


def _rtt_ns(rtt_s: float) -> int:
    """nats-server shows an RTT between 1µs and 1ms truncated to whole microseconds."""
    rtt_ns = round(rtt_s * 1e9)
    if 1_000 < rtt_ns < 1_000_000:
        return rtt_ns - rtt_ns % 1_000
    return rtt_ns


def select(view: ServerView, options: ConnzOptions) -> tuple[list[ConnectionInfo], int]:
    """The connections to show before sorting and paging, and nats-server's `total`."""
    if options.state is None:
        return [], 0
    in_scope = [
        c for c in view.connections(options.state) if not options.account or c.account == options.account
    ]
    # every connection of the state counts, also those a sibling did not send (beyond the page: `needs`)
    total = len(in_scope) if options.account else view.connection_count(options.state)
    if options.cid:
        found = [c for c in in_scope if c.cid == options.cid]
        in_scope = [c for c in found if c.stop_wall_s is None] or found[:1]
    if options.user:
        in_scope = [c for c in in_scope if c.authorized_user == options.user]
    if options.mqtt_client:
        in_scope = []  # no connection here has an MQTT client id
    if options.filter_subject not in ("", ">"):
        wanted = options.filter_subject
        in_scope = [
            c
            for c in in_scope
            if c.stop_wall_s is not None or any(subjects_collide(wanted, s.subject) for s in c.subscriptions)
        ]
    return in_scope, total


def ordered(conns: list[ConnectionInfo], sort: str, now_ns: int) -> list[ConnectionInfo]:
    by_cid = sorted(conns, key=lambda c: c.cid)
    if sort == "reason":
        return sorted(by_cid, key=lambda c: c.reason)
    key, descending = SORTS[sort or "cid"]
    return sorted(by_cid, key=lambda c: key(c, now_ns), reverse=descending)


def connz_json(view: ServerView, options: ConnzOptions) -> dict[str, JsonValue]:
    """The /connz document for decoded options; raises BadRequest as nats-server's Connz() errors."""
    validate(options)
    now_ns = wall_ns(view.now_wall_s())
    limit = 1 if options.cid else options.limit
    out: dict[str, JsonValue] = {
        "server_id": view.server_id,
        "now": rfc3339_nano(now_ns),
        "num_connections": 0,
        "total": 0,
        "offset": options.offset,
        "limit": limit,
        "connections": None,
    }
    if options.account and not view.has_account(options.account):
        out["server_id"] = ""  # nats-server returns before filling in its id
        return out
    conns, total = select(view, options)
    page = ordered(conns, options.sort, now_ns)[options.offset : options.offset + limit]
    out["total"] = total
    out["num_connections"] = len(page)
    out["connections"] = [connection_json(c, options, now_ns) for c in page]
    return out


def handle(ctx: RequestContext) -> Response:
    options = decode(ctx)
    ctx.count()  # nats-server counts /connz only once its parameters decode
    return json_response(connz_json(ctx.view, options))


def needs(query: Query) -> frozenset[str]:
    """The siblings' open or closed connections, as `state` asks; without filters, only as many of each
    worker's as the page can show (`PART_TOP`): the first offset+limit in the page's order."""
    options = decode_query(query)
    parts = {"open": {PART_OPEN}, "closed": {PART_CLOSED}, "any": {PART_OPEN, PART_CLOSED}}.get(options.state or "")
    if parts is None:
        return NOTHING
    sort = options.sort or "cid"
    unfiltered = not (options.cid or options.user or options.account or options.mqtt_client or options.filter_subject)
    if unfiltered and (sort in SORTS or sort == "reason"):
        parts = parts | {f"{PART_TOP}{sort}:{options.offset + options.limit}"}
    return frozenset(parts)


def top(conns: list[ConnectionInfo], part: str, now_ns: int) -> list[ConnectionInfo]:
    """The connections a `PART_TOP` part asks a worker for: the first n in the page's order."""
    sort, _, keep = part[len(PART_TOP):].rpartition(":")
    return ordered(conns, sort, now_ns)[: int(keep)]


ENDPOINT = Endpoint(paths=("/connz",), handle=handle, title="Connections", needs=needs)
