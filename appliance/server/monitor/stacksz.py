"""`/stacksz`: the stack of every thread of the process serving monitoring, as text (nats-server dumps
its goroutines, with the same `application/json` content type it sends for every endpoint)."""

from __future__ import annotations

import sys
import threading
import traceback

from .endpoint import JSON_HEADERS, Endpoint, RequestContext, Response


def stacks_text() -> str:
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    parts = []
    for ident, frame in sorted(sys._current_frames().items()):
        lines = "".join(traceback.format_stack(frame))
        parts.append(f"thread {ident} [{names.get(ident, 'unknown')}]:\n{lines}")
    return "\n".join(parts)


def handle(ctx: RequestContext) -> Response:
    ctx.count()
    return Response(200, JSON_HEADERS, stacks_text().encode())


ENDPOINT = Endpoint(paths=("/stacksz",), handle=handle, title="Stacks")
