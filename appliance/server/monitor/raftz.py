"""`/raftz`: RAFT groups. nats-server lists the groups of clustered JetStream; a standalone server has
none and answers `404 No Raft nodes registered` (text/plain). This server runs standalone (routes to
other servers are not built yet): its JetStream keeps single-voter groups internally, which are not RAFT
nodes of a cluster, so it gives the standalone answer. Parameters (acc, group) are accepted as there.
"""

from __future__ import annotations

from .endpoint import Endpoint, RequestContext, Response, text_response

NO_RAFT_NODES = "No Raft nodes registered"


def handle(ctx: RequestContext) -> Response:
    ctx.count()
    return text_response(404, NO_RAFT_NODES)


ENDPOINT = Endpoint(paths=("/raftz",), handle=handle, title="Raft Groups")
