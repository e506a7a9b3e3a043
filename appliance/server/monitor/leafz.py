"""`/leafz` and `/gatewayz`: leaf node and gateway connections. This server makes neither (no
`leafnodes` or `gateway` support), so both give nats-server's answer for a server without them: no
leaf nodes, no gateways. Parameters are still decoded as nats-server decodes them (400 on a bad one).
"""

from __future__ import annotations

from appliance.durations import rfc3339_nano, wall_ns
from .endpoint import Endpoint, RequestContext, Response, json_response


def handle_leafz(ctx: RequestContext) -> Response:
    ctx.count()
    ctx.query.boolean("subs")
    view = ctx.view
    return json_response({"server_id": view.server_id, "now": rfc3339_nano(wall_ns(view.now_wall_s())),
                          "leafnodes": 0, "leafs": []})


def handle_gatewayz(ctx: RequestContext) -> Response:
    ctx.count()
    ctx.query.boolean("accs")
    view = ctx.view
    return json_response({"server_id": view.server_id, "now": rfc3339_nano(wall_ns(view.now_wall_s())),
                          "outbound_gateways": {}, "inbound_gateways": {}})


LEAFZ = Endpoint(paths=("/leafz",), handle=handle_leafz, title="Leafnodes")
GATEWAYZ = Endpoint(paths=("/gatewayz",), handle=handle_gatewayz, title="Gateways")
