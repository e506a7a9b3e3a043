"""A failing internal handler costs its own message only: never the link it came over, the batch it
came in, the client that sent it, or the interest sync between workers.

The failure is injected (a handler raising RecursionError, as deeply nested JSON once did in the
JetStream API), so this holds whatever the handlers' own input checks become.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import nats
import pytest

from appliance import native
from appliance.log import ContainedErrors
from appliance.server.internal import InternalClient
from appliance.testing.clients import flush_after_subs
from appliance.testing.inproc_mesh import InProcessMesh

TRANSPORTS = ["socketpair"] + (["ring"] if native.ENABLED else [])
BOOM_REQUESTS = 5


@pytest.fixture(params=TRANSPORTS)
def mesh(request: pytest.FixtureRequest) -> Iterator[InProcessMesh]:
    with InProcessMesh(2, transport=request.param) as running:
        yield running


def install_services(mesh: InProcessMesh) -> list[bytes]:
    """On worker 0: `boom.>` raises; `echo.>` answers. Returns what boom saw (filled on the loop)."""
    server = mesh.servers[0]
    seen: list[bytes] = []

    def install() -> None:
        client = InternalClient(server, server.global_account(), "hostile-test")

        def boom(subject: bytes, reply: bytes | None, header: bytes | None, data: bytes) -> None:
            seen.append(subject)
            raise RecursionError("maximum recursion depth exceeded (injected)")

        def echo(subject: bytes, reply: bytes | None, header: bytes | None, data: bytes) -> None:
            if reply:
                client.publish(reply, b"echo:" + data)

        client.subscribe(b"boom.>", boom)
        client.subscribe(b"echo.>", echo)

    mesh.call(install)
    return seen


def wait_interest(mesh: InProcessMesh, worker: int, subject: bytes) -> None:
    deadline = time.monotonic() + 10
    while not mesh.call(lambda: mesh.servers[worker].global_account().sublist.match(subject)[0]):
        assert time.monotonic() < deadline, f"no interest in {subject!r} on worker {worker}"
        time.sleep(0.01)


def test_a_raising_handler_loses_its_request_only_across_workers_and_locally(mesh: InProcessMesh) -> None:
    seen = install_services(mesh)
    wait_interest(mesh, 1, b"boom.x")
    wait_interest(mesh, 1, b"echo.x")

    async def scenario() -> None:
        remote = await nats.connect(mesh.url(1), allow_reconnect=False)
        local = await nats.connect(mesh.url(0), allow_reconnect=False)
        for client in (remote, local):
            for i in range(BOOM_REQUESTS):  # a failing request right before a good one, in one read
                inbox = client.new_inbox()
                await client.publish(f"boom.{i}", b"[" * 100, reply=inbox)
                answer = await client.request(f"echo.{i}", b"after boom", timeout=5)
                assert answer.data == b"echo:after boom"
        assert len(seen) == 2 * BOOM_REQUESTS
        assert remote.is_connected and local.is_connected  # the sender's connection was not closed
        # the interest sync across the link still works both ways: a PONG after a SUB, then delivery
        for subscriber, publisher in ((remote, local), (local, remote)):
            sub = await subscriber.subscribe("after.boom")
            await flush_after_subs(subscriber)
            await publisher.publish("after.boom", b"delivered")
            assert (await sub.next_msg(timeout=5)).data == b"delivered"
            await sub.unsubscribe()
        fresh = await nats.connect(mesh.url(1), allow_reconnect=False)  # a new client's first PING
        await fresh.flush(timeout=5)
        assert (await fresh.request("echo.fresh", b"hi", timeout=5)).data == b"echo:hi"
        for client in (remote, local, fresh):
            await client.close()

    asyncio.run(asyncio.wait_for(scenario(), 60))


def test_contained_errors_log_the_first_of_a_kind_then_count() -> None:
    logged: list[str] = []

    class Recorder:
        def error(self, message: str, *args: object, exc_info: object = None) -> None:
            logged.append(message % args)

    now = [0.0]
    errors = ContainedErrors(Recorder(), quiet_s=60.0, kinds_max=2, monotonic=lambda: now[0])  # type: ignore[arg-type]
    for _ in range(1000):
        errors.contain("handler A", RecursionError("deep"))
    assert len(logged) == 1 and "handler A failed" in logged[0] and "RecursionError" in logged[0]
    errors.contain("handler A", ValueError("other kind"))
    assert len(logged) == 2
    now[0] = 61.0
    errors.contain("handler A", RecursionError("deep again"))
    assert len(logged) == 3 and "1000 more time(s)" in logged[2]
    for place in range(100):  # kinds are bounded: the rest share one
        errors.contain(f"place {place}", KeyError(place))
    assert len(logged) == 4 and "(other places)" in logged[3]
    assert errors.total == 1000 + 1 + 1 + 100
