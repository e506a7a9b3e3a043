"""`appliance status`: what it shows and how it exits (0 ok, 1 degraded, 2 down/unreachable)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from appliance.cli.main import main
from appliance.testing.process import ApplianceProcess, free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]
Start = Callable[..., Any]  # the start_supervisor fixture of conftest.py; returns a RunningSupervisor
WORKER_KEYS = {"index", "pid", "state", "core", "numa_node", "cpu_percent", "rss_bytes", "connections", "msgs_in",
               "msgs_out", "bytes_in", "bytes_out", "heartbeat_age_s", "ring_fill", "restarts", "uptime_s"}
TOP_KEYS = {"server_name", "server_id", "version", "appliance_version", "client_url", "http_url", "control_socket",
            "start", "uptime_s", "health", "reasons", "supervisor", "workers", "routes", "jetstream"}


def status(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["status", *args])
    return result.exit_code, result.output


def test_healthy_server_json_and_human_output_exit_zero(
    start_supervisor: Start, fake_sysfs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    supervisor = start_supervisor(workers=2, sysfs=fake_sysfs, server_name="n1-c1")
    workers = supervisor.wait_ready()
    client = supervisor.client()
    client.ask("one")
    client.ask("two")
    supervisor.wait_for(lambda: sum(w["msgs_in"] for w in supervisor.workers()) == 2, what="counters published")

    code, output = status("--socket", str(supervisor.socket_path), "--json")

    assert code == 0, output
    answer = json.loads(output)
    assert set(answer) == TOP_KEYS
    assert answer["health"] == "ok" and answer["reasons"] == []
    assert answer["server_name"] == "n1-c1"
    assert answer["server_id"].startswith("N") and len(answer["server_id"]) == 56
    assert answer["client_url"] == f"127.0.0.1:{supervisor.port}"
    assert answer["supervisor"]["pid"] == supervisor.pid
    assert answer["supervisor"]["rss_bytes"] > 0
    assert [set(w) for w in answer["workers"]] == [WORKER_KEYS, WORKER_KEYS]
    assert [w["numa_node"] for w in answer["workers"]] == [0, 1]
    assert sum(w["connections"] for w in answer["workers"]) == 1
    assert sum(w["msgs_out"] for w in answer["workers"]) == 2
    assert all(w["heartbeat_age_s"] < 2.0 and w["rss_bytes"] > 0 for w in answer["workers"])

    monkeypatch.setenv("APPLIANCE_RUN_DIR", str(supervisor.run_dir))
    code, output = status("--port", str(supervisor.port))  # the path rule finds the socket from the port

    assert code == 0, output
    assert "Server:     n1-c1" in output
    assert f"Supervisor: pid {supervisor.pid}, running" in output
    header = next(line for line in output.splitlines() if line.startswith("#"))
    assert header.split() == ["#", "PID", "STATE", "CORE", "NODE", "CPU%", "RSS", "CONNS", "MSGS", "IN", "MSGS",
                              "OUT", "HEARTBEAT", "RING", "RESTARTS"]
    for worker in workers:
        assert any(line.split()[:5] == [str(worker["index"]), str(worker["pid"]), "ready", str(worker["core"]),
                                        str(worker["numa_node"])] for line in output.splitlines())
    assert output.rstrip().endswith("Health: OK")


def test_a_wedged_worker_is_degraded_then_replaced_and_a_wedged_supervisor_is_down(start_supervisor: Start) -> None:
    supervisor = start_supervisor(workers=2, policy={"heartbeat_late_s": 0.75, "heartbeat_dead_s": 4.0,
                                                     "backoff_initial_s": 0.05})
    wedged, _ = supervisor.wait_ready()
    os.kill(wedged["pid"], signal.SIGSTOP)
    try:
        supervisor.wait_for(lambda: supervisor.workers()[0]["heartbeat_age_s"] > 1.0, what="heartbeat late")
        # the real command line, in a process of its own, as a health check would run it
        result = subprocess.run([sys.executable, "-m", "appliance", "status", "--socket", str(supervisor.socket_path)],
                                capture_output=True, text=True, timeout=30, check=False)
        assert result.returncode == 1, result.stdout + result.stderr
        assert "Health: DEGRADED" in result.stdout
        assert f"worker 0 (pid {wedged['pid']}) heartbeat late" in result.stdout
    finally:
        os.kill(wedged["pid"], signal.SIGCONT)
    # nothing resumes a wedged worker's heartbeat in real life; here SIGCONT did, so wedge it again for good
    os.kill(wedged["pid"], signal.SIGSTOP)
    replaced = supervisor.wait_for(lambda: (w := supervisor.workers()[0])["restarts"] == 1 and w["state"] == "ready"
                                   and w, what="wedged worker replaced")
    assert replaced["pid"] != wedged["pid"]
    assert f"Worker 0 (pid {wedged['pid']}) has not heartbeat for" in supervisor.log()
    assert status("--socket", str(supervisor.socket_path))[0] == 0

    supervisor.signal(signal.SIGSTOP)  # now the supervisor itself is wedged
    try:  # returns at all only because the client's timeout bounds the wait
        code, output = status("--socket", str(supervisor.socket_path), "--timeout", "0.5")
    finally:
        supervisor.signal(signal.SIGCONT)
    assert code == 2, output
    assert "supervisor unreachable" in output
    supervisor.signal(signal.SIGTERM)
    assert supervisor.wait_exit() == 0


def test_no_supervisor_is_down_with_exit_two(tmp_path: Path) -> None:
    code, output = status("--socket", str(tmp_path / "appliance-4222.sock"), "--json")
    assert code == 2
    answer = json.loads(output)
    assert answer["health"] == "down"
    assert "supervisor unreachable" in answer["reasons"][0]


def test_config_file_port_names_the_socket(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("APPLIANCE_RUN_DIR", str(tmp_path))
    config = tmp_path / "server.conf"
    config.write_text("server_name: n1-c1\nport: 14222\n")
    code, output = status("-c", str(config), "--json")
    assert code == 2
    assert json.loads(output)["control_socket"] == str(tmp_path / "appliance-14222.sock")


def test_config_file_with_a_random_port_cannot_name_a_socket(tmp_path: Path) -> None:
    config = tmp_path / "server.conf"
    config.write_text("port: -1\n")
    result = CliRunner().invoke(main, ["status", "-c", str(config)])
    assert result.exit_code == 2
    assert "random client port; pass --socket" in result.output


def test_a_missing_config_file_is_down(tmp_path: Path) -> None:
    assert status("-c", str(tmp_path / "missing.conf"))[0] == 2


def run_dir() -> Path:
    """A short private run dir (unix socket paths are limited to 107 bytes)."""
    return Path(tempfile.mkdtemp(prefix="ar-"))


def bare_status(directory: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["status", *args], env={"APPLIANCE_RUN_DIR": str(directory)})
    return result.exit_code, result.output


def test_a_bare_status_finds_the_one_server_started_with_a_config(tmp_path: Path) -> None:
    directory = run_dir()
    port = free_port()
    config = tmp_path / "my.conf"
    config.write_text(f"server_name: ops-1\nlisten: 127.0.0.1:{port}\nappliance {{ workers: 1 }}\n")
    with ApplianceProcess(["-c", str(config)], log_dir=tmp_path, env={"APPLIANCE_RUN_DIR": str(directory)}) as server:
        code, output = bare_status(directory)
        assert code == 0, output
        assert "Server:     ops-1" in output and f"Clients:    127.0.0.1:{port}" in output
        entry = json.loads((directory / f"appliance-{port}.json").read_text())
        assert entry["server_name"] == "ops-1" and entry["client_port"] == port
        assert entry["pid"] == server.process.pid and entry["config_file"] == str(config.resolve())
        code, output = bare_status(directory, "-c", str(config))  # the old ways keep working
        assert code == 0, output
        assert bare_status(directory, "-p", str(port))[0] == 0
    assert not (directory / f"appliance-{port}.json").exists()  # a clean stop unregisters
    code, output = bare_status(directory)
    assert code == 2
    assert f"no appliance server runs on this host (no live registration in {directory})" in output


def test_several_servers_are_listed_and_a_dead_ones_entry_is_cleaned(tmp_path: Path) -> None:
    directory = run_dir()
    env = {"APPLIANCE_RUN_DIR": str(directory)}
    ports = [free_port(), free_port()]
    configs = []
    for name, port in zip(("one", "two"), ports, strict=True):
        configs.append(tmp_path / f"{name}.conf")
        configs[-1].write_text(f"server_name: {name}\nlisten: 127.0.0.1:{port}\nappliance {{ workers: 1 }}\n")
    with ApplianceProcess(["-c", str(configs[0])], log_dir=tmp_path, env=env), \
            ApplianceProcess(["-c", str(configs[1])], log_dir=tmp_path, env=env) as two:
        code, output = bare_status(directory)
        assert code == 2, output
        assert "2 appliance servers run on this host; choose one with -p PORT" in output
        for name, port in zip(("one", "two"), ports, strict=True):
            assert f"{name}: clients 127.0.0.1:{port}" in output and f"(appliance status -p {port})" in output
        code, output = bare_status(directory, "--json")
        assert code == 2 and [s["server_name"] for s in json.loads(output)["servers"]] == ["one", "two"][
            :: 1 if ports[0] < ports[1] else -1]

        assert two.process is not None
        os.killpg(two.process.pid, signal.SIGKILL)  # its group: the supervisor and its worker, ours
        two.process.wait(10)
        assert (directory / f"appliance-{ports[1]}.json").exists()  # left behind by the dead supervisor
        code, output = bare_status(directory)
        assert code == 0, output
        assert "Server:     one" in output
        assert not (directory / f"appliance-{ports[1]}.json").exists()
        assert not (directory / f"appliance-{ports[1]}.sock").exists()
