"""What an endpoint is: a handler from `RequestContext` to `Response`, and the helpers they share.

An endpoint module defines `ENDPOINT = Endpoint(paths, handle, title)` and nothing else public; the
table in `app.py` lists them. Handlers raise `BadRequest` for nats-server's 400 answers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from . import gojson
from .params import Query
from .view import ServerView

JSON_HEADERS = (("Content-Type", "application/json"), ("Access-Control-Allow-Origin", "*"))
TEXT_CONTENT_TYPE = "text/plain; charset=utf-8"


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes


def json_response(value: gojson.JsonValue, *, status: int = 200, indented: bool = True,
                  indent: str = "  ") -> Response:
    return Response(status, JSON_HEADERS, gojson.dumps(value, indented=indented, indent=indent))


def text_response(status: int, text: str) -> Response:
    return Response(status, (("Content-Type", TEXT_CONTENT_TYPE),), text.encode())


NOT_FOUND = Response(
    404,
    (("Content-Type", TEXT_CONTENT_TYPE), ("X-Content-Type-Options", "nosniff")),
    b"404 page not found\n",
)


@dataclass(slots=True)
class HttpStats:
    """Requests per endpoint since start; keys are endpoint paths only, so the map stays bounded."""

    counts: dict[str, int] = field(default_factory=dict)

    def count(self, path: str) -> None:
        self.counts[path] = self.counts.get(path, 0) + 1

    def snapshot(self) -> dict[str, int]:
        return dict(sorted(self.counts.items()))  # Go marshals map keys sorted


@dataclass(frozen=True, slots=True)
class RequestContext:
    view: ServerView
    query: Query
    stats: HttpStats
    stat_path: str
    endpoints: tuple[Endpoint, ...]  # every endpoint served, for the / index

    def count(self) -> None:
        self.stats.count(self.stat_path)


# What an endpoint needs of the sibling workers' snapshots (ServerView.refresh gathers only that):
# counters, process usage, open and closed connections, per-account sublist statistics and client
# counts, internal queue lengths.
PART_COUNTERS = "counters"
PART_PROCESS = "process"
PART_OPEN = "open"
PART_CLOSED = "closed"
PART_SUBLISTS = "sublists"
PART_QUEUES = "queues"
PARTS = frozenset({PART_COUNTERS, PART_PROCESS, PART_OPEN, PART_CLOSED, PART_SUBLISTS, PART_QUEUES})
# "top:<sort>:<n>" with open/closed: only the first n connections in /connz order `sort` (and the count of
# all): a page of /connz never needs more of any worker, so a sibling never ships its 10,000 closed
PART_TOP = "top:"
NOTHING: frozenset[str] = frozenset()


def needs_nothing(query: Query) -> frozenset[str]:
    return NOTHING


@dataclass(frozen=True, slots=True)
class Endpoint:
    paths: tuple[str, ...]  # the first is the name counted in http_req_stats
    handle: Callable[[RequestContext], Response]
    title: str  # link text on the / index page
    needs: Callable[[Query], frozenset[str]] = needs_nothing  # parts of the siblings' snapshots (PARTS)
