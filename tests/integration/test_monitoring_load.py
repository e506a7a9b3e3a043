"""The monitoring port under load, on two real workers (`appliance run`), at a bounded size.

After 2,000 connections opened and closed, 100 concurrent /varz and 100 concurrent /connz (open with
subscription details, and closed) are all answered 200 with documents that count every worker, while
a client on worker 1 keeps getting its PONGs and requests answered across workers, both workers keep
heartbeating, and the log holds no flood of "did not answer" warnings. No assertion on speed.
(Once, each request made every sibling serialize all its closed connections: 500 parallel /varz got
65-75 % 503s and a worker stopped heartbeating for ~45 s under /connz load.)
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import nats
import pytest

from appliance.testing.clients import flush_after_subs
from appliance.testing.process import ApplianceProcess, free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(180)]
OPENED_AND_CLOSED = 2_000
CONCURRENT = 100
HEARTBEAT_SILENCE_MAX_S = 10.0  # far above a healthy worker's 0.25 s, far below the supervisor's kill at 60 s


def status(port: int) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-m", "appliance", "status", "--port", str(port), "--json"],
                          capture_output=True, text=True, timeout=60)
    return json.loads(done.stdout) if done.stdout.strip() else {}


async def http_get(port: int, target: str) -> tuple[int, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
    await writer.drain()
    answer = await reader.read()
    writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


async def open_and_close(port: int, count: int) -> None:
    async def one() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        await reader.readline()  # INFO
        writer.write(b'CONNECT {"verbose":false,"name":"churn"}\r\nPING\r\n')
        await writer.drain()
        assert (await reader.readline()).startswith(b"PONG")
        writer.close()
        await writer.wait_closed()

    for start in range(0, count, 100):
        await asyncio.gather(*(one() for _ in range(min(100, count - start))))


async def connect_on(url: str, worker: int) -> nats.NATS:
    for _ in range(200):
        nc = await nats.connect(url, allow_reconnect=False)
        if (int(nc._client_id or 0) - 1) % 2 == worker:
            return nc
        await nc.close()
    raise AssertionError(f"no connection landed on worker {worker}")


def test_monitoring_under_many_connections_answers_everything_and_workers_stay_live(tmp_path: Path) -> None:
    port, http = free_port(), free_port()
    config = tmp_path / "two.conf"
    config.write_text(f"listen: 127.0.0.1:{port}\nhttp: 127.0.0.1:{http}\nappliance {{ workers: 2 }}\n")
    with ApplianceProcess(["-c", str(config)], log_dir=tmp_path) as server:
        url = f"nats://127.0.0.1:{port}"
        pids = [worker["pid"] for worker in status(port)["workers"]]  # type: ignore[union-attr]

        async def scenario() -> None:
            await open_and_close(port, OPENED_AND_CLOSED)

            async def all_closed_recorded() -> None:
                while True:
                    code, body = await http_get(http, "/connz?state=closed&limit=1")
                    if code == 200 and json.loads(body)["total"] >= OPENED_AND_CLOSED:
                        return
                    await asyncio.sleep(0.05)

            await asyncio.wait_for(all_closed_recorded(), 60)
            on_zero = await connect_on(url, 0)
            on_one = await connect_on(url, 1)
            try:

                async def echo(msg: object) -> None:
                    await msg.respond(b"pong")  # type: ignore[attr-defined]

                await on_zero.subscribe("svc.echo", cb=echo)
                await flush_after_subs(on_zero)
                burst_over = asyncio.Event()
                client_rounds = 0

                async def client_meanwhile() -> None:
                    nonlocal client_rounds
                    while not burst_over.is_set() or client_rounds < 3:
                        await on_one.flush(timeout=30)  # PING answered, on the sibling
                        await on_zero.flush(timeout=30)  # and on worker 0, which answers the HTTP requests
                        assert (await on_one.request("svc.echo", b"", timeout=30)).data == b"pong"
                        client_rounds += 1

                heartbeat_ages: list[float] = []

                async def heartbeats_meanwhile() -> None:
                    while not burst_over.is_set():
                        report = await asyncio.to_thread(status, port)
                        heartbeat_ages.extend(w["heartbeat_age_s"] for w in report["workers"])  # type: ignore[union-attr]

                client = asyncio.ensure_future(client_meanwhile())
                watcher = asyncio.ensure_future(heartbeats_meanwhile())
                targets = (["/varz"] * CONCURRENT + ["/connz?subs=detail"] * CONCURRENT
                           + ["/connz?state=closed"] * (CONCURRENT // 2))
                answers = await asyncio.gather(*(http_get(http, target) for target in targets))
                burst_over.set()
                await asyncio.wait_for(client, 60)
                await asyncio.wait_for(watcher, 60)

                assert [code for code, _ in answers] == [200] * len(targets)
                for target, (_, body) in zip(targets, answers):
                    document = json.loads(body)
                    if target == "/varz":
                        assert document["total_connections"] >= OPENED_AND_CLOSED + 2
                        assert document["connections"] >= 2
                    elif target == "/connz?subs=detail":
                        assert document["total"] >= 2  # both workers' clients
                        listed = [s["subject"] for c in document["connections"] for s in c.get("subscriptions_list_detail", [])]
                        assert "svc.echo" in listed
                    else:
                        assert document["total"] >= OPENED_AND_CLOSED
                        assert document["num_connections"] == 1024  # nats-server's default limit, a full page
                assert heartbeat_ages and max(heartbeat_ages) < HEARTBEAT_SILENCE_MAX_S, heartbeat_ages
            finally:  # closed on a failed assertion too (unclosed sockets fail a later test)
                for nc in (on_zero, on_one):
                    await nc.close()

        asyncio.run(asyncio.wait_for(scenario(), 150))
        after = status(port)
        assert after["health"] == "ok", after
        assert [worker["pid"] for worker in after["workers"]] == pids  # type: ignore[union-attr]
        assert server.log().count("did not answer") <= 2  # rate-limited: never one per request
