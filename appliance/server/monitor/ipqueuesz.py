"""`/ipqueuesz`: the server's internal queues and how many items wait in each, by name
(`{"<name>": {"pending": n}}`). Like nats-server, only queues with something pending are listed unless
`all=1`. Ours are the queues between worker processes: each link's backlog toward a sibling, the
PONGs and first reads waiting for an interest sync, the monitoring gathers awaited.
"""

from __future__ import annotations

from .endpoint import PART_QUEUES, Endpoint, RequestContext, Response, json_response
from .gojson import JsonValue
from .params import Query


def handle(ctx: RequestContext) -> Response:
    ctx.count()
    every = ctx.query.boolean("all")
    queues = ctx.view.internal_queues()
    out: dict[str, JsonValue] = {name: {"pending": pending} for name, pending in sorted(queues.items())
                                 if every or pending}
    return json_response(out)


def needs(query: Query) -> frozenset[str]:
    return frozenset({PART_QUEUES})


ENDPOINT = Endpoint(paths=("/ipqueuesz",), handle=handle, title="Internal Queues", needs=needs)
