"""Accounts added and removed by a reload, applied worker by worker (in-process mesh of two workers, each
reloaded on its own as the supervisor's SIGHUP reaches them one after the other)."""

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

BEFORE = "accounts { A: { users: [ {user: a, password: pa}, {user: m, password: pm} ] } }\n"
AFTER = ("accounts { A: { users: [ {user: a, password: pa} ] },\n"
         "  B: { users: [ {user: b, password: pb}, {user: m, password: pm} ] } }\n")


def opts(text: str) -> ServerOptions:
    return options_from_text(text, filename="server.conf")


@pytest.fixture
def mesh() -> Iterator[InProcessMesh]:
    with InProcessMesh(2, transport="socketpair", options=opts(BEFORE)) as running:
        yield running


async def login(port: int, user: str, password: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    await reader.readline()
    fields = {"user": user, "pass": password, "verbose": False, "pedantic": False}
    writer.write(f"CONNECT {json.dumps(fields)}\r\nPING\r\n".encode())
    return reader, writer, await asyncio.wait_for(reader.readline(), 5)


async def read_all(reader: asyncio.StreamReader) -> bytes:
    """Everything until the server closes the connection."""
    return await asyncio.wait_for(reader.read(), 5)


def reload(mesh: InProcessMesh, worker: int, text: str) -> None:
    mesh.call(apply_reload, mesh.servers[worker], opts(text))


def test_interest_in_an_account_new_on_a_sibling_first_reaches_it_once_it_reloads(mesh: InProcessMesh) -> None:
    """Worker 1 reloads first: its client of the new account B subscribes, worker 0 does not know B yet;
    when worker 0 reloads, that interest is in its sublist and a publish there reaches worker 1."""

    async def scenario() -> None:
        reload(mesh, 1, AFTER)
        sub_r, sub_w, answer = await login(mesh.ports[1], "b", "pb")
        assert answer == b"PONG\r\n"
        sub_w.write(b"SUB news 1\r\nPING\r\n")
        assert await asyncio.wait_for(sub_r.readline(), 5) == b"PONG\r\n"
        deadline = time.monotonic() + 5  # the SUB crosses the link to worker 0, which keeps it for B
        while not mesh.call(lambda: any(key[0] == b"B" for peer in mesh.fabrics[0].peers.values()
                                        for key in peer.interest)):
            assert time.monotonic() < deadline, "worker 0 dropped interest in an account it does not know yet"
            await asyncio.sleep(0.01)
        reload(mesh, 0, AFTER)
        pub_r, pub_w, answer = await login(mesh.ports[0], "b", "pb")
        assert answer == b"PONG\r\n"
        pub_w.write(b"PUB news 2\r\nhi\r\nPING\r\n")
        assert await asyncio.wait_for(pub_r.readline(), 5) == b"PONG\r\n"
        assert await asyncio.wait_for(sub_r.readline(), 5) == b"MSG news 1 2\r\n"
        for writer in (sub_w, pub_w):
            writer.close()

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_a_moved_user_is_closed_without_an_error_and_lands_in_its_new_account(mesh: InProcessMesh) -> None:
    """As nats-server (probed): a client whose user moved to another account, or whose user is gone, is
    closed with no -ERR (Client Closed); a client whose password changed gets 'Authorization Violation'."""

    async def scenario() -> None:
        moved_r, moved_w, _ = await login(mesh.ports[0], "m", "pm")
        stays_r, stays_w, _ = await login(mesh.ports[0], "a", "pa")
        for worker in (0, 1):
            reload(mesh, worker, AFTER)
        assert await read_all(moved_r) == b""  # closed, nothing said
        stays_w.write(b"PING\r\n")
        assert await asyncio.wait_for(stays_r.readline(), 5) == b"PONG\r\n"
        again_r, again_w, answer = await login(mesh.ports[0], "m", "pm")
        assert answer == b"PONG\r\n"
        assert mesh.call(lambda: sorted(conn.account.name for conn in mesh.servers[0].clients.values())) == ["A", "B"]
        for worker in (0, 1):
            reload(mesh, worker, AFTER.replace("password: pa", "password: new"))
        assert await read_all(stays_r) == b"-ERR 'Authorization Violation'\r\n"
        for writer in (moved_w, stays_w, again_w):
            writer.close()

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_removing_an_account_closes_its_clients_and_forgets_it(mesh: InProcessMesh) -> None:
    async def scenario() -> None:
        reader, writer, _ = await login(mesh.ports[1], "a", "pa")
        writer.write(b"SUB x 1\r\nPING\r\n")
        assert await asyncio.wait_for(reader.readline(), 5) == b"PONG\r\n"
        for worker in (0, 1):
            reload(mesh, worker, "accounts { B: { users: [ {user: b, password: pb} ] } }\n")
        assert await read_all(reader) == b""
        assert mesh.call(lambda: [server.accounts.get("A") for server in mesh.servers]) == [None, None]
        _, gone_w, answer = await login(mesh.ports[0], "a", "pa")
        assert answer == b"-ERR 'Authorization Violation'\r\n"
        for stream in (writer, gone_w):
            stream.close()

    asyncio.run(asyncio.wait_for(scenario(), 30))
