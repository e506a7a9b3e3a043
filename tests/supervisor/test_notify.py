"""sd_notify: datagrams to $NOTIFY_SOCKET, nothing without it."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.supervisor.notify import Notifier


@pytest.fixture
def systemd(tmp_path: Path) -> Iterator[tuple[socket.socket, str]]:
    path = str(tmp_path / "notify")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(path)
    listener.settimeout(5.0)
    yield listener, path
    listener.close()


def test_without_notify_socket_nothing_is_sent() -> None:
    notifier = Notifier({})
    assert not notifier.enabled
    assert not notifier.send("READY=1")
    notifier.ready("x")
    notifier.close()


def test_ready_watchdog_stopping_and_status_reach_systemd(systemd: tuple[socket.socket, str]) -> None:
    listener, path = systemd
    notifier = Notifier({"NOTIFY_SOCKET": path})
    notifier.ready("2 worker(s) serving")
    notifier.watchdog()
    notifier.status("worker 1 restarting")
    notifier.stopping("stopping workers")
    notifier.close()
    received = [listener.recv(4096).decode() for _ in range(4)]
    assert received == ["READY=1\nSTATUS=2 worker(s) serving", "WATCHDOG=1", "STATUS=worker 1 restarting",
                        "STOPPING=1\nSTATUS=stopping workers"]


def test_abstract_socket_address() -> None:
    name = f"appliance-test-notify-{os.getpid()}"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind("\0" + name)
    listener.settimeout(5.0)
    try:
        notifier = Notifier({"NOTIFY_SOCKET": "@" + name})
        assert notifier.send("READY=1")
        assert listener.recv(64) == b"READY=1"
        notifier.close()
    finally:
        listener.close()


def test_systemd_gone_is_not_an_error(tmp_path: Path) -> None:
    notifier = Notifier({"NOTIFY_SOCKET": str(tmp_path / "nobody")})
    assert not notifier.send("READY=1")
    notifier.close()


@pytest.mark.parametrize(("env", "interval_s"), [
    ({}, None),
    ({"WATCHDOG_USEC": "0"}, None),
    ({"WATCHDOG_USEC": "10000000"}, 5.0),
    ({"WATCHDOG_USEC": "10000000", "WATCHDOG_PID": "1"}, None),  # meant for another process
    ({"WATCHDOG_USEC": "4000000", "WATCHDOG_PID": str(os.getpid())}, 2.0),
    ({"WATCHDOG_USEC": "soon"}, None),
])
def test_watchdog_interval_is_half_of_watchdog_usec(env: dict[str, str], interval_s: float | None) -> None:
    assert Notifier(env).watchdog_interval_s == interval_s


def test_extend_timeout_and_reloading_messages(systemd: tuple[socket.socket, str]) -> None:
    listener, path = systemd
    notifier = Notifier({"NOTIFY_SOCKET": path})
    notifier.extend_timeout(20.0, "starting: 0/2 worker(s) serving")
    notifier.reloading(123456)
    notifier.close()
    assert listener.recv(4096) == b"EXTEND_TIMEOUT_USEC=20000000\nSTATUS=starting: 0/2 worker(s) serving"
    assert listener.recv(4096) == b"RELOADING=1\nMONOTONIC_USEC=123456\nSTATUS=reloading configuration"
