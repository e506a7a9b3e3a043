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


def test_appliance_run_serves_nats_clients_restarts_a_killed_worker_and_stops_on_sigterm(
    start_supervisor: Start, monkeypatch: pytest.MonkeyPatch
) -> None:
    supervisor = start_supervisor(command=[sys.executable, "-m", "appliance", "run", "-a", "127.0.0.1", "-p", "-1"])
    (worker,) = supervisor.wait_ready()
    assert asyncio.run(round_trip(supervisor.port, "before")) == b"hello"

    monkeypatch.setenv("APPLIANCE_RUN_DIR", str(supervisor.run_dir))
    result = CliRunner().invoke(main, ["status", "--port", str(supervisor.port)])
    assert result.exit_code == 0, result.output
    assert "Health: OK" in result.output

    os.kill(worker["pid"], signal.SIGKILL)
    supervisor.wait_for(lambda: (w := supervisor.workers()[0])["state"] == "ready" and w["restarts"] == 1,
                        what="worker restarted")
    assert asyncio.run(round_trip(supervisor.port, "after")) == b"hello"

    supervisor.signal(signal.SIGTERM)
    assert supervisor.wait_exit() == 0
    assert "Server Exiting.." in supervisor.log()
    assert supervisor.shm_names() == []
