"""kill -9 of the worker process that runs JetStream under a real `appliance run -js`: the
supervisor restarts it and acknowledged publishes and AckSync'd acks are all there."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import time
from pathlib import Path

import nats
import pytest
from nats.js.api import AckPolicy, ConsumerConfig

from appliance.testing.process import ApplianceProcess, free_port

pytestmark = pytest.mark.integration

MESSAGES = 200


def _start(store: Path, port: int, log_dir: Path) -> ApplianceProcess:
    return ApplianceProcess(["-js", "-sd", str(store), "-a", "127.0.0.1", "-p", str(port)], log_dir=log_dir)


def test_acknowledged_state_survives_sigkill(tmp_path: Path) -> None:
    store, port = tmp_path / "store", free_port()

    async def before() -> None:
        nc = await nats.connect(f"nats://127.0.0.1:{port}", allow_reconnect=False)
        js = nc.jetstream(timeout=5)
        await js.add_stream(name="K", subjects=["k.>"])
        acks = await asyncio.gather(
            *(
                js.publish(f"k.{i % 7}", str(i).encode(), headers={"Nats-Msg-Id": str(i)})
                for i in range(MESSAGES)
            )
        )
        assert sorted(a.seq for a in acks) == list(range(1, MESSAGES + 1))
        await js.add_consumer("K", ConsumerConfig(durable_name="C", ack_policy=AckPolicy.EXPLICIT))
        sub = await js.pull_subscribe_bind("C", "K")
        for msg in await sub.fetch(10, timeout=5):
            await msg.ack_sync()
        await nc.close()

    async def after() -> None:
        nc = await nats.connect(f"nats://127.0.0.1:{port}", allow_reconnect=False)
        js = nc.jetstream(timeout=5)
        state = (await js.stream_info("K")).state
        assert (state.messages, state.last_seq) == (MESSAGES, MESSAGES)
        dup = await js.publish("k.1", b"again", headers={"Nats-Msg-Id": "5"})
        assert dup.duplicate and dup.seq == 6
        info = await js.consumer_info("K", "C")
        assert info.ack_floor.stream_seq == 10 and info.num_ack_pending == 0
        sub = await js.pull_subscribe_bind("C", "K")
        assert (await sub.fetch(1, timeout=5))[0].metadata.sequence.stream == 11
        await nc.close()

    with _start(store, port, tmp_path) as app:
        asyncio.run(asyncio.wait_for(before(), 30))
        assert app.process is not None
        worker = _jetstream_worker(app.log())
        os.kill(worker, signal.SIGKILL)
        _wait_for_restart(app)
        _wait_until_serving(port)
        asyncio.run(asyncio.wait_for(after(), 30))


def _jetstream_worker(log: str) -> int:
    """The pid of the worker that runs JetStream (it logs "[pid] ... Starting JetStream")."""
    found = re.search(r"\[(\d+)\] [^\n]* Starting JetStream", log)
    assert found is not None, log
    return int(found.group(1))


def _wait_for_restart(app: ApplianceProcess) -> None:
    """Poll (deadline) until the supervisor's new worker has started JetStream again."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if app.log().count("Starting JetStream") >= 2:
            return
        time.sleep(0.05)
    raise AssertionError(f"the killed JetStream worker was not restarted:\n{app.log()}")


def _wait_until_serving(port: int) -> None:
    """Poll (deadline) until a worker accepts on the port again and sends its INFO."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                if sock.recv(5) == b"INFO ":
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise AssertionError("the restarted worker did not serve")
