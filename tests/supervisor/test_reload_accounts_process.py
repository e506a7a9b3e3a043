"""Accounts changed by SIGHUP on a real `appliance run` (two workers, JetStream) and on nats-server 2.15.1,
the same client scenario on both: what the clients see must be the same.

An account removed: its client closed without an error; a user moved to another account: closed, and it
reconnects into the new one; an account given JetStream: its API answers at once (on a connection
that was already up); a new account: usable at once, JetStream included; JetStream turned off for an
account: 10039, and on again: its stream is back with its messages."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client as NATS

from appliance.testing.natsserver import NatsServer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
HEAD = "host: 127.0.0.1\nport: -1\nappliance { workers: 2, cpu_pinning: false }\n"
BEFORE = """accounts {
  A: { users: [ {user: a, password: pa} ], jetstream: enabled }
  B: { users: [ {user: b, password: pb} ] }
}
"""
AFTER = """accounts {
  B: { users: [ {user: b, password: pb}, {user: a, password: pa} ], jetstream: enabled }
  C: { users: [ {user: c, password: pc} ], jetstream: enabled }
}
"""
C_OFF = AFTER.replace("{user: c, password: pc} ], jetstream: enabled", "{user: c, password: pc} ]")
DEADLINE_S = 30.0


class Client:
    """A nats-py client that remembers how it ended (errors the server sent, closed or not)."""

    def __init__(self) -> None:
        self.nc: NATS | None = None
        self.errors: list[str] = []

    @classmethod
    async def open(cls, port: int, user: str, password: str) -> Client:
        client = cls()

        async def on_error(error: Exception) -> None:
            client.errors.append(type(error).__name__)

        client.nc = await nats.connect(f"nats://127.0.0.1:{port}", user=user, password=password,
                                       allow_reconnect=False, max_reconnect_attempts=0, connect_timeout=5,
                                       error_cb=on_error)
        return client

    async def api(self, subject: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        assert self.nc is not None
        try:
            reply = await self.nc.request(f"$JS.API.{subject}", json.dumps(body or {}).encode(), timeout=2)
        except (nats.errors.NoRespondersError, nats.errors.TimeoutError) as exc:
            return {"no answer": type(exc).__name__}
        answer: dict[str, Any] = json.loads(reply.data)
        return answer

    async def closed(self) -> list[str]:
        """Wait until the server closed it; the errors it sent on the way."""
        assert self.nc is not None
        deadline = time.monotonic() + DEADLINE_S
        while not self.nc.is_closed:
            assert time.monotonic() < deadline, "the connection stayed open"
            await asyncio.sleep(0.02)
        return [error for error in self.errors if error != "UnexpectedEOF"]

    async def close(self) -> None:
        if self.nc is None:
            return
        if not self.nc.is_closed:
            await self.nc.close()
        transport = getattr(self.nc, "_transport", None)
        if transport is not None:  # closed by the server: nats-py leaves its socket to the GC
            transport.close()
            try:
                await transport.wait_closed()
            except OSError:
                pass


def code(answer: dict[str, Any]) -> object:
    error = answer.get("error")
    return error["err_code"] if isinstance(error, dict) else answer.get("no answer", "ok")


async def until(ask: Callable[[], Awaitable[dict[str, Any]]], wanted: Callable[[dict[str, Any]], bool]) -> Any:
    """The first answer `wanted` accepts (appliance's workers apply a reload one after the other)."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        answer = await ask()
        if wanted(answer):
            return answer
        assert time.monotonic() < deadline, answer
        await asyncio.sleep(0.05)


async def scenario(port: int, reload: Callable[[str], None]) -> dict[str, object]:
    seen: dict[str, object] = {}
    a = await Client.open(port, "a", "pa")
    b = await Client.open(port, "b", "pb")
    seen["b, no JetStream"] = code(await b.api("INFO"))
    created = await a.api("STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"]})
    seen["a creates"] = code(created)
    reload(AFTER)
    seen["a, its account removed"] = await a.closed()
    seen["b, JetStream enabled"] = code(await until(lambda: b.api("INFO"), lambda answer: "streams" in answer))
    c = await Client.open(port, "c", "pc")
    seen["c creates"] = code(await until(lambda: c.api("STREAM.CREATE.T", {"name": "T", "subjects": ["t.>"]}),
                                         lambda answer: "no answer" not in answer))
    assert c.nc is not None
    for n in range(3):
        await c.nc.request("t.x", f"m{n}".encode(), timeout=2)  # stored (the ack answers)
    moved = await Client.open(port, "a", "pa")  # now in B, whose JetStream has no stream (A's had S)
    deadline = time.monotonic() + DEADLINE_S
    while (await moved.api("INFO")).get("streams") != 0:  # a worker the SIGHUP has not reached yet
        assert time.monotonic() < deadline, "a never landed in B"
        await moved.close()  # (its socket too)
        moved = await Client.open(port, "a", "pa")
    seen["a lands in B"] = True
    reload(C_OFF)
    seen["c, JetStream off"] = code(await until(lambda: c.api("INFO"), lambda answer: "error" in answer))
    seen["c stream info, off"] = code(await c.api("STREAM.INFO.T"))
    reload(AFTER)
    back = await until(lambda: c.api("STREAM.INFO.T"), lambda answer: "state" in answer)
    seen["c stream back"] = back["state"]["messages"]
    for client in (a, b, c, moved):
        await client.close()
    return seen


def test_accounts_added_removed_and_jetstream_toggled_as_nats_server(start_supervisor: Any, tmp_path: Path) -> None:
    results = []
    for run in ("nats-server", "appliance"):
        config = tmp_path / f"{run}.conf"
        head = f"jetstream {{ store_dir: {tmp_path / (run + '-store')} }}\n"
        head = head if run == "nats-server" else HEAD + head
        config.write_text(head + BEFORE)
        if run == "nats-server":
            with NatsServer(["-c", str(config)], log_path=tmp_path / "nats-server.log") as real:
                process = real.process
                assert process is not None

                def reload_real(text: str) -> None:
                    config.write_text(head + text)
                    process.send_signal(signal.SIGHUP)

                results.append(asyncio.run(scenario(real.port, reload_real)))
        else:
            server = start_supervisor(command=[sys.executable, "-m", "appliance", "run", "-c", str(config)])
            server.wait_ready()

            def reload_ours(text: str) -> None:
                config.write_text(head + text)
                server.signal(signal.SIGHUP)

            results.append(asyncio.run(scenario(server.port, reload_ours)))
            assert "Reloaded: accounts" in server.log()
    assert results[0] == results[1], results
    assert results[0]["a, its account removed"] == []  # closed without a word
    assert results[0]["c stream back"] == 3


def test_push_consumers_of_a_new_account_deliver_on_every_worker(start_supervisor: Any, tmp_path: Path) -> None:
    """JetStream runs on worker 0; a push consumer's messages reach a client on another worker through
    that worker's relay, which a reload must give the new account too."""
    config = tmp_path / "server.conf"
    head = HEAD + f"jetstream {{ store_dir: {tmp_path / 'store'} }}\n"
    config.write_text(head + BEFORE)
    server = start_supervisor(command=[sys.executable, "-m", "appliance", "run", "-c", str(config)])
    server.wait_ready()
    config.write_text(head + AFTER)
    server.signal(signal.SIGHUP)

    async def scenario() -> None:
        by_worker: dict[int, NATS] = {}
        spare: list[NATS] = []
        deadline = time.monotonic() + DEADLINE_S
        while len(by_worker) < 2:  # worker k hands out client ids k+1, k+3, ... (two workers)
            assert time.monotonic() < deadline, "no client on each worker"
            try:
                nc = await nats.connect(f"nats://127.0.0.1:{server.port}", user="c", password="pc",
                                        allow_reconnect=False, connect_timeout=5)
            except nats.errors.Error:  # a worker the SIGHUP has not reached yet does not know c
                await asyncio.sleep(0.05)
                continue
            worker = (nc._client_id - 1) % 2  # type: ignore[attr-defined]
            if worker in by_worker:
                spare.append(nc)
            else:
                by_worker[worker] = nc
        stream = Client()
        stream.nc = by_worker[0]
        await until(lambda: stream.api("STREAM.CREATE.P", {"name": "P", "subjects": ["p.>"]}),
                    lambda answer: "config" in answer)
        for worker, nc in sorted(by_worker.items()):
            sub = await nc.jetstream().subscribe(f"p.{worker}")
            await nc.jetstream().publish(f"p.{worker}", f"to worker {worker}".encode())
            msg = await sub.next_msg(timeout=5)
            assert msg.data == f"to worker {worker}".encode()
            await msg.ack()
        for nc in [*by_worker.values(), *spare]:
            await nc.close()

    asyncio.run(scenario())
