"""Two real workers behind one client port: one server to clients, and a killed worker comes back."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import nats
import pytest

from appliance.testing.process import ApplianceProcess, free_port

pytestmark = pytest.mark.integration


def status(port: int) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-m", "appliance", "status", "--port", str(port), "--json"],
                          capture_output=True, text=True, timeout=30)
    return json.loads(done.stdout)


def wait_for(predicate, what: str, timeout_s: float = 30.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


async def connect_on(url: str, worker: int, workers: int) -> nats.NATS:
    """A connection that landed on `worker` (client ids are k+1, k+1+n, ... on worker k of n)."""
    for _ in range(200):
        nc = await nats.connect(url)
        assert nc._client_id is not None
        if (int(nc._client_id) - 1) % workers == worker:
            return nc
        await nc.close()
    raise AssertionError(f"no connection landed on worker {worker}")


def test_worker_killed_is_restarted_while_the_other_serves(tmp_path: Path) -> None:
    port = free_port()
    url = f"nats://127.0.0.1:{port}"
    config = tmp_path / "two.conf"
    config.write_text(f"listen: 127.0.0.1:{port}\nappliance {{ workers: 2 }}\n")
    with ApplianceProcess(["-c", str(config)], log_dir=tmp_path):
        workers = wait_for(lambda: (s := status(port)) and s["health"] == "ok" and s["workers"], "healthy")
        victim_pid = int(workers[1]["pid"])

        async def scenario() -> None:
            on_zero = await connect_on(url, 0, 2)
            on_one = await connect_on(url, 1, 2)
            sub = await on_zero.subscribe("across")
            await on_zero.flush()
            await on_one.publish("across", b"before")
            assert (await sub.next_msg(timeout=5)).data == b"before"

            os.kill(victim_pid, signal.SIGKILL)
            # the survivor keeps serving its own clients meanwhile
            await on_zero.publish("across", b"during")
            assert (await sub.next_msg(timeout=5)).data == b"during"

            def restarted() -> bool:
                workers = status(port)["workers"]
                assert isinstance(workers, list)
                return workers[1]["pid"] != victim_pid and workers[1]["state"] == "ready" and workers[1]["restarts"] >= 1

            await asyncio.to_thread(wait_for, restarted, "worker 1 restarted")
            fresh = await connect_on(url, 1, 2)
            await fresh.publish("across", b"after")  # the new worker 1 learned worker 0's interest
            assert (await sub.next_msg(timeout=5)).data == b"after"
            back = await fresh.subscribe("back")
            await fresh.flush()
            await on_zero.publish("back", b"to the new worker")
            assert (await back.next_msg(timeout=5)).data == b"to the new worker"
            for nc in (on_zero, fresh):
                await nc.close()
            await on_one.close()

        asyncio.run(asyncio.wait_for(scenario(), 90))
