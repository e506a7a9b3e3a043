"""Real workers under the real supervisor, with an injected failing internal handler on worker 0
(tests/supervisor/workers/hostile_worker.py): requests from clients on worker 1 reach it over the
shared-memory link. One failing request costs itself only; a worker that stops draining its links
is reported by `status` and restarted by the supervisor."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client as NATS

from appliance.testing.clients import flush_after_subs

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
Start = Callable[..., Any]
WORKERS_DIR = Path(__file__).with_name("workers")
TARGET = "hostile_worker:serve"


async def connect_to_worker(port: int, worker: int) -> NATS:
    deadline = time.monotonic() + 60  # a worker still starting (a loaded machine) takes none yet
    while time.monotonic() < deadline:
        client = await nats.connect(f"nats://127.0.0.1:{port}", connect_timeout=5, allow_reconnect=False)
        if client.client_id is not None and (client.client_id - 1) % 2 == worker:
            return client
        await client.close()
        await asyncio.sleep(0.02)
    raise AssertionError(f"no connection landed on worker {worker}")


async def every_way_serves(port: int, label: str) -> None:
    on_zero = await connect_to_worker(port, 0)
    on_one = await connect_to_worker(port, 1)
    try:
        assert (await on_one.request("echo.x", label.encode(), timeout=10)).data == b"echo:" + label.encode()
        for subscriber, publisher in ((on_zero, on_one), (on_one, on_zero)):
            sub = await subscriber.subscribe(f"{label}.across")
            await flush_after_subs(subscriber)
            await publisher.publish(f"{label}.across", b"m")
            assert (await sub.next_msg(timeout=10)).data == b"m"
    finally:
        await on_zero.close()
        await on_one.close()


def test_failing_requests_over_the_link_cost_only_themselves(start_supervisor: Start) -> None:
    supervisor = start_supervisor(workers=2, target=TARGET, env={"PYTHONPATH": str(WORKERS_DIR)})
    workers = supervisor.wait_ready()

    async def scenario() -> None:
        on_one = await connect_to_worker(supervisor.port, 1)
        for i in range(20):
            await on_one.publish(f"boom.{i}", b"[" * 10_000, reply=on_one.new_inbox())
            assert (await on_one.request(f"echo.{i}", b"still", timeout=10)).data == b"echo:still"
        await on_one.close()
        await every_way_serves(supervisor.port, "after")

    asyncio.run(asyncio.wait_for(scenario(), 90))
    status = supervisor.status()
    assert status["health"] == "ok", status
    assert [w["pid"] for w in status["workers"]] == [w["pid"] for w in workers]  # nobody restarted
    log = supervisor.log()
    assert log.count("RecursionError: maximum recursion depth exceeded (injected)") <= 2, "logged once"
    assert "boom.>" in log


def test_a_worker_that_stops_draining_its_links_is_reported_and_restarted(start_supervisor: Start) -> None:
    supervisor = start_supervisor(workers=2, target=TARGET, env={"PYTHONPATH": str(WORKERS_DIR)},
                                  policy={"heartbeat_dead_s": 4.0, "backoff_initial_s": 0.05})
    workers = supervisor.wait_ready()
    stalled_pid = workers[0]["pid"]

    async def stall() -> None:
        on_one = await connect_to_worker(supervisor.port, 1)
        assert (await on_one.request("stall.links", b"", timeout=10)).data == b"stalled"
        await on_one.subscribe("more.interest")  # frames worker 0 will never take
        await on_one.publish("echo.lost", b"", reply=on_one.new_inbox())
        await on_one.close()  # no flush: its PONG would wait for worker 0's ACK, which never comes

    asyncio.run(asyncio.wait_for(stall(), 30))
    supervisor.wait_log("this worker stops heartbeating", timeout_s=30)
    degraded = supervisor.wait_for(lambda: (s := supervisor.status())["health"] != "ok" and s,
                                   what="status reports the stalled worker", timeout_s=30)
    assert any("worker 0" in reason for reason in degraded["reasons"]), degraded

    def restarted() -> Any:
        status = supervisor.status()
        row = status["workers"][0]
        return status if row["pid"] != stalled_pid and row["state"] == "ready" and status["health"] == "ok" else None

    supervisor.wait_for(restarted, what="worker 0 restarted and healthy", timeout_s=60)
    asyncio.run(asyncio.wait_for(every_way_serves(supervisor.port, "restarted"), 60))
