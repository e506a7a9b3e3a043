"""Internal clients route like client connections: they receive requests and answer them."""

from __future__ import annotations

import asyncio

import nats

from appliance.server.internal import InternalClient
from appliance.testing.inproc import InProcessServer


def test_internal_service_answers_a_nats_py_request() -> None:
    with InProcessServer() as running:
        assert running.server is not None
        server = running.server
        seen: list[tuple[bytes, bytes | None, bytes | None, bytes]] = []

        def install() -> None:
            service = InternalClient(server, server.global_account(), "echo")

            def handle(subject: bytes, reply: bytes | None, header: bytes | None, data: bytes) -> None:
                seen.append((subject, reply, header, data))
                assert reply is not None
                service.publish(reply, b"echo:" + data[len(header or b""):], header=b"NATS/1.0\r\nX: 1\r\n\r\n")

            service.subscribe(b"svc.>", handle)

        running.call(install)

        async def scenario() -> None:
            nc = await nats.connect(running.url)
            reply = await nc.request("svc.echo", b"ping", timeout=5, headers={"A": "b"})
            assert reply.data == b"echo:ping"
            assert reply.headers == {"X": "1"}
            await nc.close()

        asyncio.run(asyncio.wait_for(scenario(), 20))
        assert seen[0][0] == b"svc.echo" and seen[0][2] is not None
