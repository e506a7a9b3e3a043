"""`/routez`: route connections to the other servers of the cluster, in nats-server's RouteInfo shape.

Parameters: subs (1 lists each route's subjects; `detail` too). Standalone, the answer is nats-server's
own: `num_routes` 0 and an empty `routes` list. The routes come from `ServerView.routes()`.
"""

from __future__ import annotations

from .durations import go_duration, rfc3339_nano, uptime, wall_ns
from .endpoint import Endpoint, RequestContext, Response, json_response
from .gojson import JsonValue
from .view import RouteInfo, ServerView


def route_json(route: RouteInfo, *, subs: bool, now_ns: int) -> dict[str, JsonValue]:
    out: dict[str, JsonValue] = {
        "rid": route.rid,
        "remote_id": route.remote_id,
        "remote_name": route.remote_name,
        "did_solicit": route.did_solicit,
        "is_configured": route.is_configured,
        "ip": route.ip,
        "port": route.port,
        "start": rfc3339_nano(wall_ns(route.start_wall_s)),
        "last_activity": rfc3339_nano(wall_ns(route.last_activity_wall_s)),
        "rtt": go_duration(round(route.rtt_s * 1e9)),
        "uptime": uptime(now_ns - wall_ns(route.start_wall_s)),
        "idle": uptime(now_ns - wall_ns(route.last_activity_wall_s)),
        "pending_size": route.pending_bytes,
        "in_msgs": route.in_msgs,
        "out_msgs": route.out_msgs,
        "in_bytes": route.in_bytes,
        "out_bytes": route.out_bytes,
        "subscriptions": len(route.subscriptions),
    }
    if subs and route.subscriptions:
        out["subscriptions_list"] = list(route.subscriptions)
    if route.account:
        out["account"] = route.account
    out["compression"] = route.compression
    return out


def routez_json(view: ServerView, *, subs: bool) -> dict[str, JsonValue]:
    now_ns = wall_ns(view.now_wall_s())
    routes = sorted(view.routes(), key=lambda route: route.rid)
    return {
        "server_id": view.server_id,
        "server_name": view.server_name,
        "now": rfc3339_nano(now_ns),
        "num_routes": len(routes),
        "routes": [route_json(route, subs=subs, now_ns=now_ns) for route in routes],
    }


def handle(ctx: RequestContext) -> Response:
    ctx.count()
    listed, detail = ctx.query.subs()
    return json_response(routez_json(ctx.view, subs=listed or detail))


ENDPOINT = Endpoint(paths=("/routez",), handle=handle, title="Routes")
