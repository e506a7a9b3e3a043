"""Two real workers behind one client port: one server to clients, and a killed worker comes back.

The promise checked at every step is nats-server's: once a client's SUB has been followed by a
PING/PONG round trip, a message any client publishes on any worker reaches it (the SUB must be on the
wire before the PING: see appliance/testing/clients.py for what nats-py's flush() does).
If a message is ever lost, the failure says which one, between which workers, at which step, with
the server's log and status, so a rare loss under load can be read from one failed run.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import nats
import pytest
from nats.aio.subscription import Subscription

from appliance.testing.clients import connect_on, flush_after_subs
from appliance.testing.process import ApplianceProcess, free_port

pytestmark = pytest.mark.integration

MESSAGE_TIMEOUT_S = 10.0  # a message that takes longer is reported lost
WAIT_TIMEOUT_S = 60.0  # restarts and health under heavy load


def status(port: int) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-m", "appliance", "status", "--port", str(port), "--json"],
                          capture_output=True, text=True, timeout=60)
    return json.loads(done.stdout) if done.stdout.strip() else {}


def wait_for(predicate, what: str, timeout_s: float = WAIT_TIMEOUT_S):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)




@dataclass
class Witness:
    """Tells, when a message does not arrive, what was lost and the state of the server."""

    server: ApplianceProcess
    port: int
    steps: list[str]

    async def expect(self, sub: Subscription, data: bytes, route: str) -> None:
        self.steps.append(f"{route}: {data!r}")
        try:
            message = await sub.next_msg(timeout=MESSAGE_TIMEOUT_S)
        except nats.errors.TimeoutError:
            raise AssertionError(self.report(f"LOST {data!r} ({route}): not delivered within "
                                             f"{MESSAGE_TIMEOUT_S}s")) from None
        assert message.data == data, self.report(f"{route}: expected {data!r}, got {message.data!r}")

    def report(self, headline: str) -> str:
        try:
            state = json.dumps(status(self.port).get("workers"), indent=1)
        except (subprocess.SubprocessError, ValueError) as error:
            state = f"(status unavailable: {error})"
        return (f"{headline}\nsteps so far:\n  " + "\n  ".join(self.steps) +
                f"\nload average: {os.getloadavg()}\nworkers: {state}\nserver log:\n{self.server.log()}")


def test_worker_killed_is_restarted_while_the_other_serves(tmp_path: Path) -> None:
    port = free_port()
    url = f"nats://127.0.0.1:{port}"
    config = tmp_path / "two.conf"
    config.write_text(f"listen: 127.0.0.1:{port}\nappliance {{ workers: 2 }}\n")
    with ApplianceProcess(["-c", str(config)], log_dir=tmp_path) as server:
        workers = wait_for(lambda: (s := status(port)) and s["health"] == "ok" and s["workers"], "healthy")
        victim_pid = int(workers[1]["pid"])
        witness = Witness(server, port, [])

        async def scenario() -> None:
            on_zero = await connect_on(url, 0, 2)
            on_one = await connect_on(url, 1, 2)
            sub = await on_zero.subscribe("across")
            await flush_after_subs(on_zero)
            await on_one.publish("across", b"before")
            await witness.expect(sub, b"before", "worker 1 -> subscriber on worker 0, right after its flush")

            os.kill(victim_pid, signal.SIGKILL)
            witness.steps.append(f"worker 1 (pid {victim_pid}) SIGKILLed")
            # the survivor keeps serving its own clients meanwhile
            await on_zero.publish("across", b"during")
            await witness.expect(sub, b"during", "worker 0 -> its own subscriber while worker 1 is down")

            def restarted() -> bool:
                workers = status(port).get("workers")
                return isinstance(workers, list) and workers[1]["pid"] != victim_pid and \
                    workers[1]["state"] == "ready" and workers[1]["restarts"] >= 1

            await asyncio.to_thread(wait_for, restarted, "worker 1 restarted")
            fresh = await connect_on(url, 1, 2)
            witness.steps.append("worker 1 restarted; a client connected to it")
            await fresh.publish("across", b"after")  # the new worker 1 learned worker 0's interest
            await witness.expect(sub, b"after", "restarted worker 1 -> subscriber on worker 0 (subscribed before)")
            back = await fresh.subscribe("back")
            await flush_after_subs(fresh)
            await on_zero.publish("back", b"to the new worker")
            await witness.expect(back, b"to the new worker", "worker 0 -> subscriber on the restarted worker 1")
            for nc in (on_zero, fresh):
                await nc.close()
            await on_one.close()

        asyncio.run(asyncio.wait_for(scenario(), 240))
