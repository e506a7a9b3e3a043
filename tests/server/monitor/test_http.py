"""The HTTP/1.1 adapter on a real loopback socket: keep-alive, HEAD, bounds, errors, idle close."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest
import uvloop

from appliance import limits
from appliance.server.monitor import MonitorApp, MonitorServer
from appliance.server.monitor.http import parse_head
from appliance.testing.fake_view import FakeServerView

ANSWER_TIMEOUT_S = 10.0


def listener() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    sock.setblocking(False)
    return sock


@asynccontextmanager
async def serving() -> AsyncIterator[MonitorServer]:
    server = MonitorServer(MonitorApp(FakeServerView()), listener())
    await server.start()
    try:
        yield server
    finally:
        await server.close()


Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def read_response(
    reader: asyncio.StreamReader, *, head_only: bool = False
) -> tuple[int, dict[str, str], bytes]:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), ANSWER_TIMEOUT_S)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
    length = 0 if head_only else int(headers["content-length"])
    body = await asyncio.wait_for(reader.readexactly(length), ANSWER_TIMEOUT_S)
    return status, headers, body


async def closed_by_peer(reader: asyncio.StreamReader) -> bool:
    rest = await asyncio.wait_for(reader.read(), ANSWER_TIMEOUT_S)
    return rest == b""


Scenario = Callable[[MonitorServer], Awaitable[None]]
Runner = Callable[[Scenario], None]


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request: pytest.FixtureRequest) -> Runner:
    """Runs a scenario against a fresh server, on the stdlib loop and on uvloop (what workers use)."""
    loop_runner = uvloop.run if request.param == "uvloop" else asyncio.run

    def runner(scenario: Scenario) -> None:
        async def main() -> None:
            async with serving() as server:
                await scenario(server)

        loop_runner(main())

    return runner


def test_keep_alive_serves_several_requests_on_one_connection(run: Runner) -> None:
    async def scenario(server: MonitorServer) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /varz?x=1 HTTP/1.1\r\nHost: x\r\n\r\n")
        status, headers, body = await read_response(reader)
        assert (status, body) == (200, b'{"status":"ok"}')
        assert headers["content-type"] == "application/json"
        assert headers["access-control-allow-origin"] == "*"
        assert "connection" not in headers
        assert headers["date"].endswith(" GMT")
        status, _, body = await read_response(reader)
        assert status == 200 and body.startswith(b'{\n  "server_id"')
        writer.write(b"GET /nope HTTP/1.1\r\nConnection: close\r\n\r\n")
        status, headers, body = await read_response(reader)
        assert (status, headers["connection"], body) == (404, "close", b"404 page not found\n")
        assert await closed_by_peer(reader)
        writer.close()

    run(scenario)


def test_head_gets_headers_only_and_http10_closes(run: Runner) -> None:
    async def scenario(server: MonitorServer) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"HEAD /healthz HTTP/1.0\r\n\r\n")
        status, headers, body = await read_response(reader, head_only=True)
        assert (status, headers["content-length"], body) == (200, "15", b"")
        assert await closed_by_peer(reader)
        writer.close()

    run(scenario)


def test_any_method_and_a_body_are_accepted_like_nats_server(run: Runner) -> None:
    async def scenario(server: MonitorServer) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"POST /healthz HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello")
        writer.write(b"GET /healthz HTTP/1.1\r\n\r\n")
        assert (await read_response(reader))[0] == 200
        assert (await read_response(reader))[0] == 200
        writer.close()

    run(scenario)


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"GARBAGE\r\n\r\n", 400),
        (b"GET /varz HTTP/2.0\r\n\r\n", 400),
        (b"GET /varz HTTP/1.1\r\nno colon here\r\n\r\n", 400),
        (b"GET /varz HTTP/1.1\r\nContent-Length: ten\r\n\r\n", 400),
        (b"POST /varz HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 501),
        (b"POST /varz HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % (limits.HTTP_BODY_BYTES_MAX + 1), 413),
        (b"GET /varz HTTP/1.1\r\nX-Big: " + b"a" * limits.HTTP_REQUEST_BYTES_MAX + b"\r\n\r\n", 431),
    ],
)
def test_malformed_or_oversized_requests_are_answered_then_closed(
    request_bytes: bytes, status: int, run: Runner
) -> None:
    async def scenario(server: MonitorServer) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(request_bytes)
        answered, headers, _ = await read_response(reader)
        assert (answered, headers["connection"]) == (status, "close")
        assert await closed_by_peer(reader)
        writer.close()

    run(scenario)


def test_connections_beyond_the_limit_get_503(monkeypatch: pytest.MonkeyPatch, run: Runner) -> None:
    monkeypatch.setattr(limits, "HTTP_CONNECTIONS_MAX", 1)

    async def scenario(server: MonitorServer) -> None:
        first_reader, first_writer = await asyncio.open_connection("127.0.0.1", server.port)
        first_writer.write(b"GET /healthz HTTP/1.1\r\n\r\n")
        assert (await read_response(first_reader))[0] == 200  # the first connection is now being served
        second_reader, second_writer = await asyncio.open_connection("127.0.0.1", server.port)
        assert (await read_response(second_reader))[0] == 503
        assert await closed_by_peer(second_reader)
        first_writer.close()
        second_writer.close()

    run(scenario)


def test_an_endpoint_that_raises_answers_500_and_the_server_serves_on(
    monkeypatch: pytest.MonkeyPatch, run: Runner
) -> None:
    def failing(self: FakeServerView) -> object:
        raise RecursionError("maximum recursion depth exceeded (injected)")

    monkeypatch.setattr(FakeServerView, "counters", failing)

    async def scenario(server: MonitorServer) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"GET /varz HTTP/1.1\r\n\r\nGET /healthz HTTP/1.1\r\n\r\n")
        status, _, body = await read_response(reader)
        assert (status, body) == (500, b"500 Internal Server Error")
        assert (await read_response(reader))[0] == 200  # the same connection goes on
        writer.close()

    run(scenario)


async def status_of(port: int, path: str) -> int:
    """The HTTP status of one GET on a connection of its own."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nConnection: close\r\n\r\n".encode())
    status = (await read_response(reader))[0]
    writer.close()
    return status


def test_a_burst_sharing_one_gather_gets_one_rendering_per_page_and_every_request_counted() -> None:
    class GatheringView(FakeServerView):  # type: ignore[misc]
        gathered: list[dict[str, object]] = [{"from": "sibling"}]
        renders = 0

        async def refresh(self, parts: frozenset[str]) -> list[dict[str, object]]:
            await asyncio.sleep(0.01)
            return self.gathered  # the same list for every request of the burst, as GatherCoalescer

        def answer_from(self, gathered: list[dict[str, object]]) -> None:
            assert gathered is self.gathered

        def counters(self) -> object:
            GatheringView.renders += 1
            return FakeServerView.counters(self)

    async def scenario() -> None:
        app = MonitorApp(GatheringView())
        server = MonitorServer(app, listener())
        await server.start()
        try:
            statuses = await asyncio.gather(*(status_of(server.port, "/varz") for _ in range(30)),
                                            status_of(server.port, "/varz?x=1"))
            assert statuses == [200] * 31
            assert GatheringView.renders == 2  # /varz once, /varz?x=1 once
            assert app.stats.snapshot()["/varz"] == 31
        finally:
            await server.close()

    asyncio.run(scenario())


def test_each_request_answers_from_its_own_gather_though_others_gather_while_it_waits_to_render() -> None:
    """/varz and /connz?state=closed gather different parts; a /varz waiting for its turn to render
    while a /connz gather lands must still read the siblings' counters from its own gather."""

    class PartsView(FakeServerView):  # type: ignore[misc]
        wrong_reads = 0
        reads = 0

        def __init__(self) -> None:
            super().__init__()
            self.peers: list[dict[str, object]] = []
            self.rendering = asyncio.Event()

        async def refresh(self, parts: frozenset[str]) -> list[dict[str, object]]:
            if "counters" not in parts:
                await self.rendering.wait()  # lands while the /varz requests wait for their turn
            self.peers = [{"parts": parts}]  # what the view held before answer_from existed
            return self.peers

        def answer_from(self, gathered: list[dict[str, object]]) -> None:
            self.peers = gathered

        def counters(self) -> object:
            self.rendering.set()
            PartsView.reads += 1
            if "counters" not in self.peers[0]["parts"]:  # type: ignore[operator]
                PartsView.wrong_reads += 1
            return FakeServerView.counters(self)

    async def scenario() -> None:
        app = MonitorApp(PartsView())
        assert "counters" in app.needs("/varz", "") and "counters" not in app.needs("/connz", "state=closed")
        server = MonitorServer(app, listener())
        await server.start()
        try:
            paths = ["/connz?state=closed"] + [f"/varz?n={i}" for i in range(20)]
            assert await asyncio.gather(*(status_of(server.port, path) for path in paths)) == [200] * 21
            assert PartsView.reads == 20 and PartsView.wrong_reads == 0
        finally:
            await server.close()

    asyncio.run(scenario())


def test_a_silent_connection_is_closed_after_the_idle_timeout(
    monkeypatch: pytest.MonkeyPatch, run: Runner
) -> None:
    monkeypatch.setattr(limits, "HTTP_IDLE_TIMEOUT_S", 0.2)

    async def scenario(server: MonitorServer) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"GET /varz HTTP/1.1\r\n")  # never finished
        assert await closed_by_peer(reader)
        assert await wait_for_no_connections(server)
        writer.close()

    run(scenario)


async def wait_for_no_connections(server: MonitorServer) -> bool:
    deadline = asyncio.get_running_loop().time() + ANSWER_TIMEOUT_S
    while server.open_connections and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0)
    return server.open_connections == 0


def test_parse_head_decodes_path_and_keeps_the_query_raw() -> None:
    request = parse_head(b"GET /conn%7A?subs=1&acc=%24G HTTP/1.1\r\nHost: a\r\n\r\n")
    assert (request.method, request.path, request.query, request.keep_alive) == (
        "GET",
        "/connz",
        "subs=1&acc=%24G",
        True,
    )
    absolute = parse_head(b"GET http://127.0.0.1:8222/varz HTTP/1.1\r\n\r\n")
    assert absolute.path == "/varz"
    assert parse_head(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").keep_alive is True
    doubled = parse_head(b"GET //varz?subs=1 HTTP/1.1\r\n\r\n")  # a path (redirected), not an authority
    assert (doubled.path, doubled.query) == ("//varz", "subs=1")


def test_close_ends_kept_alive_connections() -> None:
    async def main() -> None:
        server = MonitorServer(MonitorApp(FakeServerView()), listener())
        await server.start()
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"GET /healthz HTTP/1.1\r\n\r\n")
        assert (await read_response(reader))[0] == 200
        await server.close()
        assert await closed_by_peer(reader)
        assert await wait_for_no_connections(server)
        writer.close()

    asyncio.run(main())


def test_http10_keep_alive_is_said_out_loud(run: Runner) -> None:
    async def scenario(server: MonitorServer) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        status, headers, _ = await read_response(reader)
        assert (status, headers["connection"]) == (200, "keep-alive")
        writer.write(b"GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        assert (await read_response(reader))[0] == 200  # the connection stayed open
        writer.close()

    run(scenario)
