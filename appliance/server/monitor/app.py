"""Path → endpoint table of the monitoring HTTP server.

Theory of operation: `http.py` parses bytes into (method, path, query) and writes back a `Response`;
`MonitorApp.respond` picks the endpoint for the path, gives it a `RequestContext` and turns a
`BadRequest` into nats-server's `400 text/plain`. Adding an endpoint (/routez, /jsz, /raftz, ...) is
one module that defines `ENDPOINT = Endpoint(...)` plus one entry in `ENDPOINTS` below.

`http_req_stats` (shown by /varz) is counted per endpoint at the point nats-server counts: each
handler calls `ctx.count()` (most before decoding parameters, /connz after).
"""

from __future__ import annotations

import email.utils
from collections.abc import Mapping

from . import connz, healthz, index, jsz, metrics, subsz, system, varz
from .endpoint import NOT_FOUND, Endpoint, HttpStats, RequestContext, Response, text_response
from .params import BadRequest, Query
from .view import ServerView

ENDPOINTS: tuple[Endpoint, ...] = (
    index.ENDPOINT,
    varz.ENDPOINT,
    connz.ENDPOINT,
    subsz.ENDPOINT,
    healthz.ENDPOINT,
    jsz.ENDPOINT,
    metrics.ENDPOINT,
)


class MonitorApp:
    """Routes a request to its endpoint; pure apart from reading the view."""

    def __init__(self, view: ServerView, endpoints: tuple[Endpoint, ...] | None = None) -> None:
        self.view = view
        self.stats = HttpStats()
        self.endpoints = ENDPOINTS if endpoints is None else endpoints
        self._routes: Mapping[str, Endpoint] = {path: e for e in self.endpoints for path in e.paths}

    def respond(self, path: str, query: str) -> Response:
        endpoint = self._routes.get(path)
        if endpoint is None:
            return NOT_FOUND
        context = RequestContext(self.view, Query(query), self.stats, endpoint.paths[0], self.endpoints)
        try:
            return endpoint.handle(context)
        except BadRequest as problem:
            return text_response(400, str(problem))

    def system_reply(self, name: str, body: bytes, *, seq: int) -> bytes | None:
        """The reply to a `$SYS.REQ.SERVER...<name>` request (see system.py); None: not for this server."""
        return system.system_reply(self.view, self.stats, name, body, seq=seq)

    def date_header(self) -> str:
        return email.utils.formatdate(self.view.now_wall_s(), usegmt=True)
