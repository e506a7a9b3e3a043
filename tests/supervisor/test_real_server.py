"""`appliance run` end to end: the real worker (appliance.worker.main) under the supervisor, a nats-py client."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

import nats
import pytest
from click.testing import CliRunner
from nats.aio.client import Client as NATS

from appliance.cli.main import main

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]
Start = Callable[..., Any]  # the start_supervisor fixture of conftest.py; returns a RunningSupervisor


async def round_trip(port: int, subject: str) -> bytes:
    client = await nats.connect(f"nats://127.0.0.1:{port}", connect_timeout=5, allow_reconnect=False)
    try:
        subscription = await client.subscribe(subject)
        await client.publish(subject, b"hello")
        message = await subscription.next_msg(timeout=5)
        return bytes(message.data)
    finally:
        await client.close()


def test_appliance_run_serves_nats_clients_and_stops_on_sigterm(
    start_supervisor: Start, monkeypatch: pytest.MonkeyPatch
) -> None:
    supervisor = start_supervisor(command=[sys.executable, "-m", "appliance", "run", "-a", "127.0.0.1", "-p", "-1"])
    supervisor.wait_ready()
    assert asyncio.run(round_trip(supervisor.port, "before")) == b"hello"

    monkeypatch.setenv("APPLIANCE_RUN_DIR", str(supervisor.run_dir))
    result = CliRunner().invoke(main, ["status", "--port", str(supervisor.port)])
    assert result.exit_code == 0, result.output
    assert "Health: OK" in result.output

    supervisor.signal(signal.SIGTERM)
    assert supervisor.wait_exit() == 0
    assert "Server Exiting.." in supervisor.log()
    assert supervisor.shm_names() == []


async def connect_to_worker(port: int, worker_index: int, *, workers: int = 2, attempts_max: int = 100) -> NATS:
    """A client the kernel handed to this worker (worker k hands out client ids k+1, k+1+n, ... for n
    workers: appliance/worker/main.py)."""
    for _ in range(attempts_max):
        client = await nats.connect(f"nats://127.0.0.1:{port}", connect_timeout=5, allow_reconnect=False)
        if client.client_id is not None and (client.client_id - 1) % workers == worker_index:
            return client
        await client.close()
    raise AssertionError(f"no connection landed on worker {worker_index}")


async def across_workers(port: int) -> bytes:
    subscriber = await connect_to_worker(port, 0)
    publisher = await connect_to_worker(port, 1)
    try:
        subscription = await subscriber.subscribe("across.workers")
        await subscriber.flush()
        deadline = asyncio.get_running_loop().time() + 20
        while True:  # interest reaches the sibling worker over the fabric asynchronously
            await publisher.publish("across.workers", b"over the ring")
            await publisher.flush()
            try:
                message = await subscription.next_msg(timeout=0.2)
                return bytes(message.data)
            except nats.errors.TimeoutError:
                assert asyncio.get_running_loop().time() < deadline, "no message crossed the workers"
    finally:
        await publisher.close()
        await subscriber.close()


def test_two_real_workers_pass_messages_between_them_also_after_one_was_killed(start_supervisor: Start) -> None:
    supervisor = start_supervisor(workers=2, target="appliance.worker.main:serve_worker")
    _, victim = supervisor.wait_ready()
    assert asyncio.run(across_workers(supervisor.port)) == b"over the ring"

    os.kill(victim["pid"], signal.SIGKILL)
    supervisor.wait_for(lambda: (w := supervisor.workers()[1])["state"] == "ready" and w["restarts"] == 1,
                        what="worker 1 restarted")
    assert asyncio.run(across_workers(supervisor.port)) == b"over the ring"  # the new worker rejoined the mesh
    supervisor.signal(signal.SIGTERM)
    assert supervisor.wait_exit() == 0
    assert supervisor.shm_names() == []
