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

from . import accountz, connz, healthz, index, ipqueuesz, jsz, leafz, metrics, raftz, routez, stacksz, subsz, system, varz
from .endpoint import NOT_FOUND, NOTHING, Endpoint, HttpStats, RequestContext, Response, text_response
from .params import BadRequest, Query
from .view import ServerView

ENDPOINTS: tuple[Endpoint, ...] = (
    index.ENDPOINT,
    varz.ENDPOINT,
    connz.ENDPOINT,
    subsz.ENDPOINT,
    healthz.ENDPOINT,
    jsz.ENDPOINT,
    accountz.ENDPOINT,
    routez.ENDPOINT,
    leafz.LEAFZ,
    leafz.GATEWAYZ,
    raftz.ENDPOINT,
    ipqueuesz.ENDPOINT,
    stacksz.ENDPOINT,
    metrics.ENDPOINT,
)


def clean_path(path: str) -> str:
    """Go's http.ServeMux cleanPath: one slash between elements, `.` and `..` resolved, a trailing
    slash kept. A request whose path is not clean gets a 307 to the clean one (`//varz` -> `/varz`)."""
    if not path.startswith("/"):
        path = "/" + path
    elements: list[str] = []
    for element in path.split("/"):
        if element in ("", "."):
            continue
        if element == "..":
            if elements:
                elements.pop()
            continue
        elements.append(element)
    cleaned = "/" + "/".join(elements)
    if path.endswith("/") and cleaned != "/":
        cleaned += "/"
    return cleaned


GO_HTML_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&#34;", "'": "&#39;"})


def redirect(location: str) -> Response:
    """Go's http.Redirect for a GET: 307 with a small HTML body naming the new location."""
    body = f'<a href="{location.translate(GO_HTML_ESCAPES)}">Temporary Redirect</a>.\n\n'
    return Response(307, (("Content-Type", "text/html; charset=utf-8"), ("Location", location)), body.encode())


class MonitorApp:
    """Routes a request to its endpoint; pure apart from reading the view."""

    def __init__(self, view: ServerView, endpoints: tuple[Endpoint, ...] | None = None) -> None:
        self.view = view
        self.stats = HttpStats()
        self.endpoints = ENDPOINTS if endpoints is None else endpoints
        self._routes: Mapping[str, Endpoint] = {path: e for e in self.endpoints for path in e.paths}

    def respond(self, path: str, query: str) -> Response:
        cleaned = clean_path(path)
        if cleaned != path:
            return redirect(cleaned + ("?" + query if query else ""))
        endpoint = self._routes.get(path)
        if endpoint is None:
            return NOT_FOUND
        context = RequestContext(self.view, Query(query), self.stats, endpoint.paths[0], self.endpoints)
        try:
            return endpoint.handle(context)
        except BadRequest as problem:
            return text_response(400, str(problem))

    def count(self, path: str) -> None:
        """Count a request of `path` answered with an answer made for an earlier one (http.py)."""
        endpoint = self._routes.get(path)
        if endpoint is not None:
            self.stats.count(endpoint.paths[0])

    def needs(self, path: str, query: str) -> frozenset[str]:
        """What the endpoint of `path` needs gathered from sibling workers before it answers."""
        endpoint = self._routes.get(path)
        if endpoint is None:
            return NOTHING
        try:
            return endpoint.needs(Query(query))
        except BadRequest:
            return NOTHING  # the endpoint answers 400 without looking at the view

    def system_reply(self, name: str, body: bytes, *, seq: int) -> bytes | None:
        """The reply to a `$SYS.REQ.SERVER...<name>` request (see system.py); None: not for this server."""
        return system.system_reply(self.view, self.stats, name, body, seq=seq)

    def date_header(self) -> str:
        return email.utils.formatdate(self.view.now_wall_s(), usegmt=True)
