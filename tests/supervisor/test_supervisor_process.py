"""The supervisor as a process: start, serve, stop, restart, budget, signals, and no leftovers."""

from __future__ import annotations

import json
import os
import signal
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped]
import pytest
from click.testing import CliRunner

from appliance import NATS_VERSION, __version__
from appliance.cli.main import main

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]
Start = Callable[..., Any]  # the start_supervisor fixture of conftest.py; returns a RunningSupervisor


def test_starts_logs_like_nats_server_serves_on_every_worker_and_stops_clean_on_sigterm(
    start_supervisor: Start, fake_sysfs: Path
) -> None:
    supervisor = start_supervisor(workers=2, sysfs=fake_sysfs, http_port=-1, cpu_pinning=True, server_name="n1-c1",
                                  numa_store_dirs={0: "/nvme0/js", 1: "/nvme1/js", 5: "/nvme5/js"})
    workers = supervisor.wait_ready()
    log = supervisor.log()
    assert "appliance.numa_store_dirs names NUMA node 5, which this host does not have" in log
    first = log.splitlines()[0]
    assert first.endswith(f"Starting appliance {__version__} (nats-server {NATS_VERSION} protocol)"), first
    assert "Starting nats-server" not in log
    assert "  Name:     n1-c1" in log
    assert f"Listening for client connections on 127.0.0.1:{supervisor.port}" in log
    assert "Starting http monitor on 127.0.0.1:" in log
    assert log.index("Listening for client connections") < log.index("Server is ready")
    assert supervisor.pid_file.read_text() == str(supervisor.pid)
    assert [(w["index"], w["core"], w["numa_node"]) for w in workers] == [(0, 0, 0), (1, 1, 1)]
    for worker in workers:
        assert psutil.Process(int(worker["pid"])).cpu_affinity() == [worker["core"]]
        assert supervisor.client_on(int(worker["pid"])).ask("hello").endswith(": hello")
    supervisor.signal(signal.SIGHUP)  # no config file: nats-server's refusal, and the server carries on
    supervisor.wait_log("Failed to reload server configuration: can only reload config when a file is provided "
                        "using -c or --config")
    assert [w["pid"] for w in supervisor.workers()] == [w["pid"] for w in workers]

    supervisor.signal(signal.SIGTERM)

    assert supervisor.wait_exit() == 0
    log = supervisor.log()
    assert 'Trapped "terminated" signal' in log
    assert "Server Exiting.." in log
    assert all(supervisor.gone(int(w["pid"])) for w in workers)
    assert not supervisor.socket_path.exists()
    assert not supervisor.pid_file.exists()
    assert supervisor.shm_names() == []


def test_a_worker_killed_with_sigkill_is_restarted_while_the_other_keeps_serving(start_supervisor: Start) -> None:
    supervisor = start_supervisor(workers=2, policy={"backoff_initial_s": 1.5})
    victim, survivor = supervisor.wait_ready()
    survivor_client = supervisor.client_on(int(survivor["pid"]))

    os.kill(int(victim["pid"]), signal.SIGKILL)

    supervisor.wait_log(f"Worker 0 (pid {victim['pid']}) was killed by SIGKILL")
    assert survivor_client.ask("still there?").endswith(": still there?")  # during the backoff
    status = CliRunner().invoke(main, ["status", "--socket", str(supervisor.socket_path), "--json"])
    if json.loads(status.output)["workers"][0]["state"] == "backoff":  # not yet restarted on a slow machine
        assert status.exit_code == 1
        assert json.loads(status.output)["reasons"] == ["worker 0 restarting (restarts: 0)"]
    restarted = supervisor.wait_for(lambda: (w := supervisor.workers()[0])["state"] == "ready" and w, what="worker 0 back")
    assert restarted["restarts"] == 1
    assert restarted["pid"] not in (victim["pid"], 0)
    assert "Restarting worker 0 in 1.50s" in supervisor.log()
    assert survivor_client.ask("and now?").endswith(": and now?")
    assert supervisor.client_on(int(restarted["pid"])).ask("new").endswith(": new")
    assert supervisor.workers()[1]["restarts"] == 0


def test_over_the_restart_budget_the_supervisor_stops_and_exits_non_zero(start_supervisor: Start) -> None:
    supervisor = start_supervisor(workers=2, env={"APPLIANCE_ECHO_EXIT_CODE": "7"},
                                  policy={"backoff_initial_s": 0.05, "budget_count": 3, "budget_window_s": 60})
    assert supervisor.wait_exit() == 1
    log = supervisor.log()
    assert "exited with code 7" in log
    assert "Worker restart budget exhausted (3 restarts in 60s)" in log
    assert log.count("Restarting worker") == 3
    assert "Server is ready" not in log
    assert supervisor.shm_names() == []


def test_sigusr2_is_forwarded_for_lame_duck_mode_and_drained_workers_are_not_restarted(
    start_supervisor: Start,
) -> None:
    supervisor = start_supervisor(workers=2)
    workers = supervisor.wait_ready()

    supervisor.signal(signal.SIGUSR2)

    assert supervisor.wait_exit() == 0
    log = supervisor.log()
    assert 'Trapped "user defined signal 2" signal' in log
    for worker in workers:
        assert any(line.startswith(f"[{worker['pid']}]") and "Entering lame duck mode" in line
                   for line in log.splitlines())
    assert "Restarting worker" not in log
    assert log.index("Entering lame duck mode") < log.index("Initiating Shutdown...") < log.index("Server Exiting..")
    assert supervisor.shm_names() == []


def test_supervisor_killed_with_sigkill_takes_its_workers_and_leaves_no_shared_memory(
    start_supervisor: Start,
) -> None:
    supervisor = start_supervisor(workers=2)
    workers = supervisor.wait_ready()
    supervisor.process.kill()
    supervisor.wait_exit()
    pids = [int(worker["pid"]) for worker in workers]
    supervisor.wait_for(lambda: all(supervisor.gone(pid) for pid in pids), what=f"workers {pids} gone")
    assert supervisor.shm_names() == []
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", supervisor.port), timeout=2.0)
    assert supervisor.socket_path.exists()  # stale: nobody could remove it
    status = CliRunner().invoke(main, ["status", "--socket", str(supervisor.socket_path)])
    assert status.exit_code == 2
    assert status.output.startswith("Health: DOWN")


def test_a_port_in_use_fails_like_nats_server(start_supervisor: Start) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        supervisor = start_supervisor(workers=1, port=port)
        assert supervisor.wait_exit() == 1
    assert f'[FTL] Error listening on port: 127.0.0.1:{port}, "listen tcp 127.0.0.1:{port}: bind: address already' \
        in supervisor.log()
    assert supervisor.shm_names() == []


def test_a_worker_target_that_cannot_load_counts_against_the_budget(start_supervisor: Start) -> None:
    supervisor = start_supervisor(workers=1, target="appliance.testing.echo_worker:no_such_function",
                                  policy={"backoff_initial_s": 0.05, "budget_count": 1})
    assert supervisor.wait_exit() == 1
    log = supervisor.log()
    assert "cannot load worker target 'appliance.testing.echo_worker:no_such_function'" in log
    assert "exited with code 3" in log


def test_systemd_hears_ready_once_all_workers_serve_the_watchdog_and_stopping(
    start_supervisor: Start, tmp_path: Path
) -> None:
    path = tmp_path / "notify.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as systemd:
        systemd.bind(str(path))
        systemd.settimeout(20.0)
        supervisor = start_supervisor(workers=2, env={"NOTIFY_SOCKET": str(path), "WATCHDOG_USEC": "1000000"})
        messages = [systemd.recv(4096).decode() for _ in range(3)]
        supervisor.signal(signal.SIGTERM)
        while not (message := systemd.recv(4096).decode()).startswith("STOPPING=1"):
            messages.append(message)
        assert supervisor.wait_exit() == 0
    ready = [m for m in messages if m.startswith("READY=1")]
    assert ready == ["READY=1\nSTATUS=2 worker(s) serving"]
    assert "WATCHDOG=1" in messages
    assert messages.index(ready[0]) <= messages.index("WATCHDOG=1")  # no watchdog before every worker serves
    assert "Server is ready" in supervisor.log()


def test_sigint_stops_cleanly_even_with_a_wedged_worker(start_supervisor: Start) -> None:
    supervisor = start_supervisor(workers=2)
    wedged, other = supervisor.wait_ready()
    os.kill(wedged["pid"], signal.SIGSTOP)
    supervisor.signal(signal.SIGINT)
    assert supervisor.wait_exit() == 0
    assert 'Trapped "interrupt" signal' in supervisor.log()
    assert supervisor.gone(wedged["pid"]) and supervisor.gone(other["pid"])
    assert "did not stop" not in supervisor.log()  # SIGCONT after SIGTERM let it stop gracefully
    assert supervisor.shm_names() == []
