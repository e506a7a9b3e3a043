"""sd_notify end to end: `appliance run` with the test's own NOTIFY_SOCKET, as systemd (Type=notify) starts it.

READY=1 comes once every worker serves and JetStream has recovered a store with data (STATUS= and
EXTEND_TIMEOUT_USEC= before it), WATCHDOG=1 only while every worker heartbeats (a SIGSTOPped worker
starves it), STOPPING=1 at the stop.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import nats
import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]
Start = Callable[..., Any]
MESSAGES = 200
HEARTBEAT_LATE_S = 2.0  # limits.WORKER_HEARTBEAT_LATE_S


class FakeSystemd:
    """The receiving end of NOTIFY_SOCKET: every datagram with its arrival time."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.settimeout(0.2)
        self.received: list[tuple[float, str]] = []
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._receive, daemon=True)
        self.thread.start()

    def _receive(self) -> None:
        while not self.done.is_set():
            try:
                data = self.sock.recv(4096)
            except TimeoutError:
                continue
            with self.lock:
                self.received.append((time.monotonic(), data.decode()))

    def messages(self) -> list[str]:
        with self.lock:
            return [text for _, text in self.received]

    def since(self, start: float) -> list[str]:
        with self.lock:
            return [text for when, text in self.received if when >= start]

    def wait(self, predicate: Callable[[str], bool], *, after: float = 0.0, timeout_s: float = 60.0) -> float:
        """Arrival time of the first message after `after` that matches."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self.lock:
                for when, text in self.received:
                    if when >= after and predicate(text):
                        return when
            time.sleep(0.02)
        raise AssertionError(f"no matching sd_notify message in {timeout_s}s; got {self.messages()}")

    def close(self) -> None:
        self.done.set()
        self.thread.join(timeout=5)
        self.sock.close()


@pytest.fixture
def fake_systemd(tmp_path: Path) -> Iterator[FakeSystemd]:
    systemd = FakeSystemd(tmp_path / "notify.sock")
    yield systemd
    systemd.close()


async def fill_stream(port: int) -> None:
    client = await nats.connect(f"nats://127.0.0.1:{port}", connect_timeout=5, allow_reconnect=False)
    try:
        js = client.jetstream()
        await js.add_stream(name="KEPT", subjects=["kept.>"])
        for index in range(MESSAGES):
            await js.publish(f"kept.{index % 7}", b"x" * 100)
    finally:
        await client.close()


async def stream_messages(port: int) -> int:
    client = await nats.connect(f"nats://127.0.0.1:{port}", connect_timeout=5, allow_reconnect=False)
    try:
        info = await client.jetstream().stream_info("KEPT")
        return int(info.state.messages)
    finally:
        await client.close()


def test_ready_after_jetstream_recovered_watchdog_only_while_workers_heartbeat_and_stopping(
    start_supervisor: Start, fake_systemd: FakeSystemd, tmp_path: Path
) -> None:
    config = tmp_path / "server.conf"
    config.write_text(f'host: 127.0.0.1\nport: -1\njetstream {{ store_dir: "{tmp_path / "store"}" }}\n'
                      "appliance { workers: 2, cpu_pinning: false }\n")
    command = [sys.executable, "-m", "appliance", "run", "-c", str(config)]
    first = start_supervisor(command=command)
    first.wait_ready()
    asyncio.run(fill_stream(first.port))
    first.signal(signal.SIGTERM)
    assert first.wait_exit() == 0

    second = start_supervisor(command=command, env={"NOTIFY_SOCKET": str(fake_systemd.path),
                                                    "WATCHDOG_USEC": "1000000"})
    ready_at = fake_systemd.wait(lambda m: m.startswith("READY=1"))
    # READY=1 means served and recovered: the stream is there at once, with all its messages
    assert asyncio.run(stream_messages(second.port)) == MESSAGES
    starting = [m for m in fake_systemd.messages() if m.startswith("EXTEND_TIMEOUT_USEC=")]
    assert starting, fake_systemd.messages()
    # the first extension goes out while a worker still starts: with none serving, worker 0 is still
    # recovering JetStream and says so; one of them may already serve (which one is the scheduler's)
    recovering = f"; JetStream recovering its store in {tmp_path / 'store' / 'jetstream'}"
    assert starting[0] in (f"EXTEND_TIMEOUT_USEC=20000000\nSTATUS=starting: 0/2 worker(s) serving{recovering}",
                           f"EXTEND_TIMEOUT_USEC=20000000\nSTATUS=starting: 1/2 worker(s) serving{recovering}",
                           "EXTEND_TIMEOUT_USEC=20000000\nSTATUS=starting: 1/2 worker(s) serving"), starting[0]
    messages = fake_systemd.messages()
    ready_index = next(i for i, m in enumerate(messages) if m.startswith("READY=1"))
    assert messages[ready_index] == "READY=1\nSTATUS=2 worker(s) serving"
    assert all(not m.startswith("WATCHDOG=1") for m in messages[:ready_index])  # no watchdog before READY
    assert all(m.startswith(("STATUS=starting", "EXTEND_TIMEOUT_USEC=")) for m in messages[:ready_index])

    fake_systemd.wait(lambda m: m == "WATCHDOG=1", after=ready_at)
    wedged = second.workers()[1]["pid"]
    os.kill(wedged, signal.SIGSTOP)
    try:
        stopped_at = time.monotonic()
        # the supervisor notices a late heartbeat within heartbeat_late + a tick: from then on, silence
        quiet_from = stopped_at + HEARTBEAT_LATE_S + 1.5
        # absence is observed over a window (3 s: six watchdog intervals of WATCHDOG_USEC/2)
        second.wait_for(lambda: time.monotonic() > quiet_from + 3.0, what="the end of the quiet window")
        assert [m for m in fake_systemd.since(quiet_from) if m == "WATCHDOG=1"] == []
    finally:
        os.kill(wedged, signal.SIGCONT)
    resumed_from = time.monotonic()
    fake_systemd.wait(lambda m: m == "WATCHDOG=1", after=resumed_from)  # heartbeats again: fed again

    second.signal(signal.SIGTERM)
    assert second.wait_exit() == 0
    assert fake_systemd.wait(lambda m: m.startswith("STOPPING=1"), after=resumed_from)


def test_lame_duck_stop_tells_systemd_stopping_and_exits_cleanly(
    start_supervisor: Start, fake_systemd: FakeSystemd, tmp_path: Path
) -> None:
    """`systemctl stop` sends SIGUSR2 (KillSignal=): STOPPING=1 at once, exit 0 when lame duck mode ends."""
    config = tmp_path / "server.conf"
    config.write_text('host: 127.0.0.1\nport: -1\nlame_duck_duration: "30s"\nlame_duck_grace_period: "1s"\n'
                      "appliance { workers: 2, cpu_pinning: false }\n")
    server = start_supervisor(command=[sys.executable, "-m", "appliance", "run", "-c", str(config)],
                              env={"NOTIFY_SOCKET": str(fake_systemd.path)})
    ready_at = fake_systemd.wait(lambda m: m.startswith("READY=1"))
    server.signal(signal.SIGUSR2)
    stopping_at = fake_systemd.wait(
        lambda m: m == "STOPPING=1\nSTATUS=lame duck mode: moving clients off, then stopping", after=ready_at)
    # the stop timeout follows the configured lame duck: 30 s + 1 s grace + 10 s stop grace + 10 s margin
    fake_systemd.wait(lambda m: m == "EXTEND_TIMEOUT_USEC=51000000\nSTATUS=lame duck mode for 30s", after=stopping_at)
    assert server.wait_exit() == 0
    assert "Initiating Shutdown..." in server.log()
