"""`/routez`: the routes of this server to the other servers of its cluster.

Fields as nats-server 2.15.1 (spec/captures/n1_routez.json): server_id, server_name, now,
num_routes, routes[] with rid, remote_id, remote_name, did_solicit, is_configured, ip, port, start,
last_activity, rtt, uptime, idle, pending_size, in/out msgs and bytes, subscriptions (a count) and,
with `subs=1`, subscriptions_list (the peer's interest here). We never compress routes: "off".
"""

from __future__ import annotations

from appliance.durations import go_duration, rfc3339_nano, uptime, wall_ns
from .endpoint import Endpoint, RequestContext, Response, json_response
from .gojson import JsonValue
from .view import RouteInfo, ServerView


def route_json(route: RouteInfo, now_ns: int, listed: bool) -> dict[str, JsonValue]:
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
        "rtt": go_duration(int(route.rtt_s * 1e9)) if route.rtt_s is not None else "0s",
        "uptime": uptime(now_ns - wall_ns(route.start_wall_s)),
        "idle": uptime(now_ns - wall_ns(route.last_activity_wall_s)),
        "pending_size": route.pending_size,
        "in_msgs": route.in_msgs,
        "out_msgs": route.out_msgs,
        "in_bytes": route.in_bytes,
        "out_bytes": route.out_bytes,
        "subscriptions": len(route.subscriptions),
    }
    if listed and route.subscriptions:
        out["subscriptions_list"] = list[JsonValue](route.subscriptions)
    out["compression"] = "off"
    return out


def routez_json(view: ServerView, listed: bool) -> dict[str, JsonValue]:
    now_ns = wall_ns(view.now_wall_s())
    routes = sorted(view.routes(), key=lambda route: route.rid)
    return {
        "server_id": view.server_id,
        "server_name": view.server_name,
        "now": rfc3339_nano(now_ns),
        "num_routes": len(routes),
        "routes": [route_json(route, now_ns, listed) for route in routes],
    }


def handle(ctx: RequestContext) -> Response:
    ctx.count()
    listed, detail = ctx.query.subs()
    return json_response(routez_json(ctx.view, listed or detail))


ENDPOINT = Endpoint(paths=("/routez",), handle=handle, title="Routes")
