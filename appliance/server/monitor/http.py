"""A tiny bounded HTTP/1.1 server for the monitoring endpoints, on a socket that is already listening.

The worker (or a test) owns the listening socket; `MonitorServer.start` serves it with
`asyncio.start_server(sock=...)`. Per connection: requests are read one at a time (no pipelining
beyond what the stream buffer holds), the head is bounded by `HTTP_REQUEST_BYTES_MAX`, a body (rare:
nats-server answers any method the same) by `HTTP_BODY_BYTES_MAX`, silence by `HTTP_IDLE_TIMEOUT_S`;
at most `HTTP_CONNECTIONS_MAX` connections are served, the rest get 503 and are closed.

HTTP/1.1 keeps the connection open unless the client says `Connection: close`; HTTP/1.0 closes unless
it says `keep-alive`. HEAD gets the headers of GET without a body.

Bursts (a multi-worker view): the requests of a burst wait for one shared gather of the siblings'
snapshots (`refresh` returns it), then are answered one per loop turn (`_render_turn`), so the
clients served by this worker's loop get their turns between answers rather than after the whole
burst; requests for the same page that shared a gather share its answer (rendered once).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from dataclasses import dataclass
from http import HTTPStatus
from urllib.parse import unquote, urlsplit

from appliance import limits
from appliance.errors import ApplianceError
from appliance.log import ContainedErrors

from .app import MonitorApp
from .endpoint import Response, text_response

HEAD_END = b"\r\n\r\n"
ENDPOINT_ERRORS = ContainedErrors(logging.getLogger(__name__))
SHARED_ANSWERS_MAX = 64  # distinct pages answered from one gather and kept for the rest of its burst


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str
    query: str
    keep_alive: bool
    body_bytes: int
    http10: bool = False

    @property
    def connection_header(self) -> str | None:
        """What the answer's Connection header says: HTTP/1.0 needs keep-alive said out loud."""
        if not self.keep_alive:
            return "close"
        return "keep-alive" if self.http10 else None


class HttpError(ApplianceError):
    """The client sent a request we cannot serve; answer `response` and close."""

    def __init__(self, response: Response) -> None:
        super().__init__(response.status)
        self.response = response


def _error(status: HTTPStatus) -> HttpError:
    return HttpError(text_response(status.value, f"{status.value} {status.phrase}"))


def parse_head(head: bytes) -> Request:
    """Parse a request line and headers (ending with CRLF CRLF) into a Request."""
    lines = head.decode("latin-1")[: -len(HEAD_END)].split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[0].isalpha() or not parts[2].startswith("HTTP/1."):
        raise _error(HTTPStatus.BAD_REQUEST)
    method, target, version = parts
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip():
            raise _error(HTTPStatus.BAD_REQUEST)
        headers[name.lower()] = value.strip()
    if "chunked" in headers.get("transfer-encoding", "").lower():
        raise _error(HTTPStatus.NOT_IMPLEMENTED)
    length_text = headers.get("content-length", "0")
    if not length_text.isdigit():
        raise _error(HTTPStatus.BAD_REQUEST)
    body_bytes = int(length_text)
    if body_bytes > limits.HTTP_BODY_BYTES_MAX:
        raise _error(HTTPStatus.REQUEST_ENTITY_TOO_LARGE)
    connection = headers.get("connection", "").lower()
    keep_alive = connection != "close" if version == "HTTP/1.1" else connection == "keep-alive"
    if target.startswith("/"):  # origin form: `//varz` is a path (to redirect), not an authority
        raw_path, _, query = target.partition("?")
        query = query.partition("#")[0]
    else:  # absolute form: http://host:port/path?query
        url = urlsplit(target)
        raw_path, query = url.path, url.query
    path = unquote(raw_path) or "/"
    return Request(method.upper(), path, query, keep_alive, body_bytes, http10=version == "HTTP/1.0")


def render(response: Response, *, date: str, connection: str | None, head_only: bool) -> bytes:
    status = HTTPStatus(response.status)
    lines = [f"HTTP/1.1 {status.value} {status.phrase}"]
    lines.extend(f"{name}: {value}" for name, value in response.headers)
    lines.append(f"Date: {date}")
    lines.append(f"Content-Length: {len(response.body)}")
    if connection is not None:
        lines.append(f"Connection: {connection}")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head if head_only else head + response.body


class MonitorServer:
    """Serves a MonitorApp on a listening socket until closed."""

    def __init__(self, app: MonitorApp, listener: socket.socket, ssl_context: ssl.SSLContext | None = None) -> None:
        self.app = app
        self.listener = listener
        self._render_turn = asyncio.Lock()
        self._shared_gather: object | None = None  # the gather the answers below were made from
        self._shared_answers: dict[tuple[str, str], Response] = {}  # bounded: SHARED_ANSWERS_MAX
        self.ssl_context = ssl_context  # https_port: the client port's TLS config, as nats-server
        # open connections and their handler tasks; beyond HTTP_CONNECTIONS_MAX only while a 503 is written
        self._writers: set[asyncio.StreamWriter] = set()
        self._handlers: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None

    @property
    def open_connections(self) -> int:
        return len(self._writers)

    @property
    def port(self) -> int:
        port = self.listener.getsockname()[1]
        assert isinstance(port, int)
        return port

    async def start(self) -> None:
        assert self._server is None, "started twice"
        self._server = await asyncio.start_server(
            self._serve_connection, sock=self.listener, limit=limits.HTTP_REQUEST_BYTES_MAX, ssl=self.ssl_context
        )

    async def close(self) -> None:
        """Stop listening and close every open connection (a request being answered is cut short)."""
        if self._server is not None:
            self._server.close()
            for writer in list(self._writers):
                writer.close()
            if self._handlers:  # each ends at its next read or write of the closed transport
                await asyncio.wait(list(self._handlers), timeout=limits.HTTP_IDLE_TIMEOUT_S)
            await self._server.wait_closed()

    async def _serve_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handler = asyncio.current_task()
        assert handler is not None
        self._handlers.add(handler)
        self._writers.add(writer)
        try:
            if self.open_connections > limits.HTTP_CONNECTIONS_MAX:
                await self._answer(
                    writer, _error(HTTPStatus.SERVICE_UNAVAILABLE).response, connection="close"
                )
                return
            while await self._serve_request(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            pass  # the client went away or fell silent: nothing to answer
        finally:
            self._writers.discard(writer)
            self._handlers.discard(handler)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _serve_request(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Answer one request; True to keep the connection for another."""
        try:
            head = await asyncio.wait_for(reader.readuntil(HEAD_END), limits.HTTP_IDLE_TIMEOUT_S)
            request = parse_head(head)
            if request.body_bytes:
                await asyncio.wait_for(reader.readexactly(request.body_bytes), limits.HTTP_IDLE_TIMEOUT_S)
        except asyncio.LimitOverrunError:
            await self._answer(
                writer, _error(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE).response, connection="close"
            )
            return False
        except HttpError as problem:
            await self._answer(writer, problem.response, connection="close")
            return False
        try:
            refresh = getattr(self.app.view, "refresh", None)  # a multi-worker view gathers its siblings first
            gathered = None
            if refresh is not None:
                gathered = await refresh(self.app.needs(request.path, request.query))
            async with self._render_turn:
                if gathered is not None:  # another request's gather may have come in while this one waited
                    self.app.view.answer_from(gathered)
                response = self._respond(request, gathered)
                await asyncio.sleep(0)  # one answer per loop turn: clients of this worker run in between
        except Exception as error:  # a bug answering one request: that request gets a 500, the server goes on
            ENDPOINT_ERRORS.contain(f"monitoring {request.path}", error)
            response = _error(HTTPStatus.INTERNAL_SERVER_ERROR).response
        await self._answer(
            writer, response, connection=request.connection_header, head_only=request.method == "HEAD"
        )
        return request.keep_alive

    def _respond(self, request: Request, gathered: object | None) -> Response:
        """The app's answer; the same page asked again from the same gather gets the same answer."""
        if gathered is None or not isinstance(gathered, list) or not gathered:
            return self.app.respond(request.path, request.query)  # nothing gathered: nothing to share
        key = (request.path, request.query)
        if gathered is self._shared_gather:
            shared = self._shared_answers.get(key)
            if shared is not None:
                self.app.count(request.path)
                return shared
        else:
            self._shared_gather = gathered
            self._shared_answers.clear()
        response = self.app.respond(request.path, request.query)
        if response.status == 200 and len(self._shared_answers) < SHARED_ANSWERS_MAX:
            self._shared_answers[key] = response
        return response

    async def _answer(
        self,
        writer: asyncio.StreamWriter,
        response: Response,
        *,
        connection: str | None,
        head_only: bool = False,
    ) -> None:
        writer.write(
            render(response, date=self.app.date_header(), connection=connection, head_only=head_only)
        )
        await asyncio.wait_for(writer.drain(), limits.HTTP_IDLE_TIMEOUT_S)
