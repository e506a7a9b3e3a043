"""The socketpair fallback under the real supervisor: three real workers without the native module;
two are killed at once, both come back over fresh socketpairs, and every ordered pair of workers
passes messages again. The supervisor's fds stay flat across restarts (nothing of a dead worker's
links is kept)."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable
from typing import Any

import nats
import psutil  # type: ignore[import-untyped]
import pytest
from nats.aio.client import Client as NATS

from appliance.testing.clients import flush_after_subs

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
Start = Callable[..., Any]
WORKERS = 3


async def connect_to_worker(port: int, worker: int) -> NATS:
    for _ in range(300):
        client = await nats.connect(f"nats://127.0.0.1:{port}", connect_timeout=5, allow_reconnect=False)
        if client.client_id is not None and (client.client_id - 1) % WORKERS == worker:
            return client
        await client.close()
    raise AssertionError(f"no connection landed on worker {worker}")


async def every_pair_passes_messages(port: int, round_name: str) -> None:
    clients = [await connect_to_worker(port, worker) for worker in range(WORKERS)]
    try:
        inboxes = []
        for worker, client in enumerate(clients):
            inboxes.append(await client.subscribe(f"to.{worker}"))
            await flush_after_subs(client)  # the PONG waits until the siblings applied the interest
        for sender, client in enumerate(clients):
            for receiver in range(WORKERS):
                for i in range(20):
                    await client.publish(f"to.{receiver}", f"{round_name} {sender} {i}".encode())
            await client.flush()
        for receiver, inbox in enumerate(inboxes):
            got = [bytes((await inbox.next_msg(timeout=10)).data).decode() for _ in range(WORKERS * 20)]
            for sender in range(WORKERS):  # in order per publisher
                assert [m for m in got if m.startswith(f"{round_name} {sender} ")] == [
                    f"{round_name} {sender} {i}" for i in range(20)], (receiver, sender, got)
            with pytest.raises(nats.errors.TimeoutError):
                await inbox.next_msg(timeout=0.1)  # nothing twice, nothing stale
    finally:
        for client in clients:
            await client.close()


def test_two_workers_killed_at_once_rejoin_over_fresh_socketpairs(start_supervisor: Start) -> None:
    supervisor = start_supervisor(workers=WORKERS, target="appliance.worker.main:serve_worker",
                                  env={"APPLIANCE_NO_NATIVE": "1"}, policy={"backoff_initial_s": 0.05})
    workers = supervisor.wait_ready()
    asyncio.run(asyncio.wait_for(every_pair_passes_messages(supervisor.port, "first"), 60))
    fds_before = psutil.Process(supervisor.pid).num_fds()

    survivor_sockets = []
    for round_name in ("second", "third"):
        victims = {index: workers[index]["pid"] for index in (1, 2)}
        for pid in victims.values():
            os.kill(pid, signal.SIGKILL)

        def all_back(victims: dict[int, int] = victims) -> Any:
            rows = supervisor.workers()
            back = all(rows[i]["pid"] != pid and rows[i]["state"] == "ready" for i, pid in victims.items())
            return rows if back and rows[0]["state"] == "ready" else None

        workers = supervisor.wait_for(all_back, what="both killed workers restarted")
        asyncio.run(asyncio.wait_for(every_pair_passes_messages(supervisor.port, round_name), 60))
        assert psutil.Process(supervisor.pid).num_fds() == fds_before
        survivor = psutil.Process(workers[0]["pid"])
        survivor_sockets.append(len(survivor.net_connections(kind="unix")))  # links, rejoin channel, loop's self-pipe
    assert survivor_sockets[0] == survivor_sockets[1], "worker 0 closes the sockets it replaced"

    supervisor.signal(signal.SIGTERM)
    assert supervisor.wait_exit() == 0
