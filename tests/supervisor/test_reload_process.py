"""Config reload of a real `appliance run` (SIGHUP, `appliance reload`), as nats-server: users added by
reload connect, removed ones are disconnected, a bad file or an unsupported change changes nothing."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nats
import pytest
from click.testing import CliRunner
from nats.aio.client import Client as NATS

from appliance.cli.main import main
from appliance.testing.natsserver import NatsServer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
Start = Callable[..., Any]
HEAD = "host: 127.0.0.1\nport: -1\nappliance { workers: 2, cpu_pinning: false }\n"


def users_config(*users: tuple[str, str], extra: str = "") -> str:
    listed = ", ".join(f"{{user: {name}, password: {password}}}" for name, password in users)
    return f"{HEAD}authorization {{ users: [ {listed} ] }}\n{extra}"


async def connect(port: int, user: str, password: str) -> NATS:
    return await nats.connect(f"nats://127.0.0.1:{port}", user=user, password=password, connect_timeout=5,
                              allow_reconnect=False, max_reconnect_attempts=0)


async def can_connect(port: int, user: str, password: str) -> bool:
    """CONNECT + PING on a raw connection: PONG when let in, -ERR 'Authorization Violation' when not."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        await reader.readline()  # INFO
        connect_fields = json.dumps({"user": user, "pass": password, "verbose": False, "pedantic": False})
        writer.write(f"CONNECT {connect_fields}\r\nPING\r\n".encode())
        answer = await asyncio.wait_for(reader.readline(), timeout=10)
        return answer == b"PONG\r\n"
    finally:
        writer.close()


def count(log: str, text: str) -> int:
    return log.count(text)


def test_a_user_added_by_reload_connects_and_a_removed_one_is_disconnected(
    start_supervisor: Start, tmp_path: Path
) -> None:
    config = tmp_path / "server.conf"
    config.write_text(users_config(("alice", "pa")))
    server = start_supervisor(command=[sys.executable, "-m", "appliance", "run", "-c", str(config)])
    server.wait_ready()
    port = server.port

    async def scenario() -> None:
        alices = [await connect(port, "alice", "pa") for _ in range(4)]  # on both workers
        assert not await can_connect(port, "bob", "pb")
        config.write_text(users_config(("bob", "pb")))
        server.signal(signal.SIGHUP)
        deadline = time.monotonic() + 30
        while not await can_connect(port, "bob", "pb"):
            assert time.monotonic() < deadline, "bob was never let in"
            await asyncio.sleep(0.05)
        while not all(client.is_closed for client in alices):
            assert time.monotonic() < deadline, "alice's connections stayed open"
            await asyncio.sleep(0.05)
        assert not await can_connect(port, "alice", "pa")

    asyncio.run(scenario())
    log = server.wait_log("Reloaded server configuration (sha256:")
    assert "Reloaded: authorization users" in log
    assert 'Trapped "hangup" signal' in log


def test_a_syntax_error_is_logged_and_changes_nothing(start_supervisor: Start, tmp_path: Path) -> None:
    config = tmp_path / "server.conf"
    config.write_text(users_config(("alice", "pa")))
    server = start_supervisor(command=[sys.executable, "-m", "appliance", "run", "-c", str(config)])
    server.wait_ready()
    config.write_text(users_config(("bob", "pb")) + "max_payload: {\n")
    server.signal(signal.SIGHUP)
    server.wait_log("Failed to reload server configuration: ")
    assert asyncio.run(can_connect(server.port, "alice", "pa"))
    assert not asyncio.run(can_connect(server.port, "bob", "pb"))
    assert server.process.poll() is None
    assert "Reloaded server configuration" not in server.log()


def test_an_unsupported_change_is_refused_with_nats_server_text(start_supervisor: Start, tmp_path: Path) -> None:
    """The same edit (server_name) on nats-server 2.15.1 and on appliance: the same error line."""
    texts = []
    for run in ("nats-server", "appliance"):
        config = tmp_path / f"{run}.conf"
        base = users_config(("alice", "pa"))
        base = base.replace(HEAD, "") if run == "nats-server" else base
        config.write_text("server_name: first\n" + base)
        log_path = tmp_path / f"{run}.log"
        if run == "nats-server":
            with NatsServer(["-c", str(config)], log_path=log_path) as real:
                assert real.process is not None
                config.write_text("server_name: second\n" + base)
                real.process.send_signal(signal.SIGHUP)
                texts.append(_wait_error(lambda: log_path.read_text()))
        else:
            server = start_supervisor(command=[sys.executable, "-m", "appliance", "run", "-c", str(config)])
            server.wait_ready()
            config.write_text("server_name: second\n" + base)
            server.signal(signal.SIGHUP)
            texts.append(_wait_error(server.log))
            assert asyncio.run(can_connect(server.port, "alice", "pa"))
    assert texts[0] == texts[1] == ("Failed to reload server configuration: config reload not supported for "
                                    "ServerName: old=first, new=second")


def _wait_error(read: Callable[[], str]) -> str:
    deadline = time.monotonic() + 30
    while True:
        found = re.search(r"\[ERR\] (Failed to reload server configuration: .*)", read())
        if found:
            return found.group(1)
        assert time.monotonic() < deadline, read()
        time.sleep(0.05)


def test_appliance_reload_answers_with_what_changed(
    start_supervisor: Start, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "server.conf"
    config.write_text(users_config(("alice", "pa")))
    server = start_supervisor(command=[sys.executable, "-m", "appliance", "run", "-c", str(config)])
    server.wait_ready()
    monkeypatch.setenv("APPLIANCE_RUN_DIR", str(server.run_dir))
    config.write_text(users_config(("alice", "pa"), extra="max_payload: 2MB\n"))
    result = CliRunner().invoke(main, ["reload", "-p", str(server.port)])
    assert result.exit_code == 0, result.output
    assert "Reloaded: max_payload = 2097152" in result.output
    config.write_text(users_config(("alice", "pa"), extra="max_payload: 2MB\nlame_duck_duration: \"45s\"\n"))
    refused = CliRunner().invoke(main, ["reload", "-p", str(server.port)])
    assert refused.exit_code == 1
    assert "config reload not supported for LameDuckDuration: old=2m0s, new=45s" in refused.output


def test_lowering_max_connections_closes_the_newest_clients(start_supervisor: Start, tmp_path: Path) -> None:
    config = tmp_path / "server.conf"
    config.write_text(HEAD.replace("workers: 2", "workers: 1"))
    server = start_supervisor(command=[sys.executable, "-m", "appliance", "run", "-c", str(config)])
    server.wait_ready()

    async def scenario() -> list[bool]:
        clients = []
        for _ in range(4):
            clients.append(await nats.connect(f"nats://127.0.0.1:{server.port}", connect_timeout=5,
                                              allow_reconnect=False))
        config.write_text(HEAD.replace("workers: 2", "workers: 1") + "max_connections: 2\n")
        server.signal(signal.SIGHUP)
        deadline = time.monotonic() + 30
        while sum(client.is_closed for client in clients) < 2:
            assert time.monotonic() < deadline, "no client was closed"
            await asyncio.sleep(0.05)
        closed = [client.is_closed for client in clients]
        for client in clients:
            if not client.is_closed:
                await client.close()
        return closed

    assert asyncio.run(scenario()) == [False, False, True, True]  # the newest go, as nats-server
    log = server.wait_log("Closed 2 connections to fall within max_connections")
    assert "Reloaded: max_connections = 2" in log


def test_reloaded_lines_are_nats_server_lines(start_supervisor: Start, tmp_path: Path) -> None:
    """The same edit (a user replaced, max_payload and debug set) on nats-server 2.15.1 and on appliance."""
    reported = []
    for run in ("nats-server", "appliance"):
        config = tmp_path / f"{run}.conf"
        head = "" if run == "nats-server" else HEAD
        config.write_text(head + users_config(("alice", "pa")).replace(HEAD, ""))
        edited = head + users_config(("bob", "pb")).replace(HEAD, "") + "max_payload: 2MB\ndebug: true\n"
        log_path = tmp_path / f"{run}.log"
        if run == "nats-server":
            with NatsServer(["-c", str(config)], log_path=log_path) as real:
                assert real.process is not None
                config.write_text(edited)
                real.process.send_signal(signal.SIGHUP)
                reported.append(_reloaded_lines(log_path.read_text))
        else:
            server = start_supervisor(command=[sys.executable, "-m", "appliance", "run", "-c", str(config)])
            server.wait_ready()
            config.write_text(edited)
            server.signal(signal.SIGHUP)
            reported.append(_reloaded_lines(server.log))
    assert reported[0] == reported[1] == ["Reloaded: debug = true", "Reloaded: authorization users",
                                          "Reloaded: accounts", "Reloaded: max_payload = 2097152"]


def _reloaded_lines(read: Callable[[], str]) -> list[str]:
    deadline = time.monotonic() + 30
    while "Reloaded server configuration" not in read():
        assert time.monotonic() < deadline, read()
        time.sleep(0.05)
    return re.findall(r"\[INF\] (Reloaded: .*)", read())


@pytest.mark.parametrize(("before", "after"), [
    ("domain: a", "domain: b"),
    ('sync_interval: "2m"', 'sync_interval: "90s"'),
])
def test_refused_jetstream_edits_log_nats_server_text(start_supervisor: Start, tmp_path: Path, before: str,
                                                      after: str) -> None:
    """The same JetStream edit on nats-server 2.15.1 and on appliance: the same refusal line, and the
    server keeps serving with its old config."""
    texts = []
    for run in ("nats-server", "appliance"):
        store = tmp_path / f"{run}-store"
        head = "host: 127.0.0.1\nport: -1\n" if run == "nats-server" else HEAD
        config = tmp_path / f"{run}-js.conf"
        config.write_text(f"{head}jetstream {{ store_dir: {store}, {before} }}\n")
        log_path = tmp_path / f"{run}-js.log"
        if run == "nats-server":
            with NatsServer(["-c", str(config)], log_path=log_path) as real:
                assert real.process is not None
                config.write_text(f"{head}jetstream {{ store_dir: {store}, {after} }}\n")
                real.process.send_signal(signal.SIGHUP)
                texts.append(_wait_error(lambda: log_path.read_text()))
        else:
            server = start_supervisor(command=[sys.executable, "-m", "appliance", "run", "-c", str(config)])
            server.wait_ready()
            config.write_text(f"{head}jetstream {{ store_dir: {store}, {after} }}\n")
            server.signal(signal.SIGHUP)
            texts.append(_wait_error(server.log))
            assert asyncio.run(can_connect(server.port, "", ""))
    assert texts[0] == texts[1], texts
    assert texts[0].startswith("Failed to reload server configuration: config reload not supported for ")
