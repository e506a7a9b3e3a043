"""Imports follow a config reload, as nats-server reloads them: a subscription made before the reload gets
its shadow in the exporting account once the import exists, and loses it when the import goes
(in-process mesh of two workers: the subscriber on one, the publisher on the other)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator

import pytest

from appliance.config import options_from_text
from appliance.config.options import ServerOptions
from appliance.server.reload import apply_reload
from appliance.testing.inproc_mesh import InProcessMesh

BEFORE = ('accounts { A: { users: [ {user: a, password: a} ], exports: [ {stream: "foo.>"}, {service: "q"} ] },\n'
          '  B: { users: [ {user: b, password: b} ] } }\n')
AFTER = ('accounts { A: { users: [ {user: a, password: a} ], exports: [ {stream: "foo.>"}, {service: "q"} ] },\n'
         '  B: { users: [ {user: b, password: b} ],\n'
         '       imports: [ {stream: {account: A, subject: "foo.>"}, prefix: p}, {service: {account: A, subject: q}} ] } }\n')


def opts(text: str) -> ServerOptions:
    return options_from_text(text, filename="server.conf")


@pytest.fixture
def mesh() -> Iterator[InProcessMesh]:
    with InProcessMesh(2, transport="socketpair", options=opts(BEFORE)) as running:
        yield running


async def login(port: int, user: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    await reader.readline()
    fields = {"user": user, "pass": user, "verbose": False, "pedantic": False, "headers": True,
              "no_responders": True, "protocol": 1}
    writer.write(f"CONNECT {json.dumps(fields)}\r\nPING\r\n".encode())
    assert await asyncio.wait_for(reader.readline(), 5) == b"PONG\r\n"
    assert (await asyncio.wait_for(reader.readline(), 5)).startswith(b"INFO ")  # protocol 1: connect_info
    return reader, writer


async def pong(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(b"PING\r\n")
    assert await asyncio.wait_for(reader.readline(), 5) == b"PONG\r\n"


def test_a_reload_adds_and_removes_imports_for_existing_subscriptions(mesh: InProcessMesh) -> None:
    def shadows(worker: int) -> int:
        return mesh.call(lambda: len(mesh.servers[worker].imports.shadows))

    def a_knows_the_interest() -> bool:  # worker 0 holds worker 1's shadow interest in A
        return mesh.call(lambda: any(key[0] == b"A" and key[1] == b"foo.>"
                                     for peer in mesh.fabrics[0].peers.values() for key in peer.interest))

    async def wait_until(condition: object, what: str) -> None:
        deadline = time.monotonic() + 5
        while not condition():  # type: ignore[operator]
            assert time.monotonic() < deadline, what
            await asyncio.sleep(0.01)

    async def scenario() -> None:
        sub_r, sub_w = await login(mesh.ports[1], "b")
        sub_w.write(b"SUB p.foo.> 1\r\n")
        await pong(sub_r, sub_w)
        assert shadows(1) == 0
        for worker in (0, 1):
            mesh.call(apply_reload, mesh.servers[worker], opts(AFTER))
        assert shadows(1) == 1
        await wait_until(a_knows_the_interest, "the shadow's interest reached worker 0")
        pub_r, pub_w = await login(mesh.ports[0], "a")
        pub_w.write(b"PUB foo.x 2\r\nhi\r\n")
        await pong(pub_r, pub_w)
        assert await asyncio.wait_for(sub_r.readline(), 5) == b"MSG p.foo.x 1 2\r\n"
        assert await asyncio.wait_for(sub_r.readline(), 5) == b"hi\r\n"
        # the service import, requested from worker 1, nobody in A: no responders (503)
        sub_w.write(b"SUB _INBOX.r 2\r\nPUB q _INBOX.r 0\r\n\r\n")
        line = await asyncio.wait_for(sub_r.readline(), 5)
        assert line.startswith(b"HMSG _INBOX.r 2 "), line
        assert b"503" in await asyncio.wait_for(sub_r.readline(), 5)
        for worker in (0, 1):
            mesh.call(apply_reload, mesh.servers[worker], opts(BEFORE))
        assert shadows(1) == 0
        await wait_until(lambda: not a_knows_the_interest(), "the shadow's interest left worker 0")
        for writer in (sub_w, pub_w):
            writer.close()

    asyncio.run(asyncio.wait_for(scenario(), 30))
