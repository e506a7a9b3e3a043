"""The worker process entry: context rebuilt from inherited fds, ready over a pipe, pinned, exit codes."""

from __future__ import annotations

import os
import select
import signal
import socket
import time
from collections.abc import Iterator

import psutil  # type: ignore[import-untyped]
import pytest

from appliance.config.options import ServerOptions
from appliance.errors import StartupError
from appliance.supervisor.spawn import SpawnedWorker, spawn_worker
from appliance.supervisor.status_table import StatusTable
from appliance.worker.process import (
    WorkerBootstrap,
    build_context,
    encode_bootstrap,
    load_target,
    read_bootstrap,
)

ECHO_TARGET = "appliance.testing.echo_worker:serve_echo"
DEADLINE_S = 20.0


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    sock = socket.create_server(("127.0.0.1", 0))
    yield sock
    sock.close()


@pytest.fixture
def table() -> Iterator[StatusTable]:
    created = StatusTable.create(2)
    yield created
    created.close()


def bootstrap_for(listener: socket.socket, table: StatusTable, **changes: object) -> WorkerBootstrap:
    options = ServerOptions(host="127.0.0.1", server_name="w-test")
    options.appliance.cpu_pinning = True
    fields: dict[str, object] = {
        "options": options, "target": ECHO_TARGET, "worker_index": 1, "worker_count": 2, "server_id": "NTEST",
        "start_wall_s": 123.0, "supervisor_pid": os.getpid(), "client_fd": listener.fileno(), "ready_fd": -1,
        "status_fd": table.fd, "core": max(os.sched_getaffinity(0)), "numa_node": 0,
    }
    fields.update(changes)
    return WorkerBootstrap(**fields)  # type: ignore[arg-type]


def wait_ready(worker: SpawnedWorker) -> bytes:
    readable, _, _ = select.select([worker.ready_fd], [], [], DEADLINE_S)
    assert readable, "worker did not report ready"
    return os.read(worker.ready_fd, 16)


def stop(worker: SpawnedWorker) -> int:
    if worker.process.poll() is None:
        worker.process.send_signal(signal.SIGTERM)
    code = worker.process.wait(timeout=DEADLINE_S)
    worker.close_fds()
    return code


def test_bootstrap_round_trips_through_a_pipe(listener: socket.socket, table: StatusTable) -> None:
    bootstrap = bootstrap_for(listener, table)
    read, write = os.pipe()
    os.write(write, encode_bootstrap(bootstrap))
    os.close(write)
    assert read_bootstrap(read) == bootstrap


def test_a_bootstrap_that_is_not_one_is_refused() -> None:
    read, write = os.pipe()
    os.write(write, b"\x80\x05N.")  # pickle of None
    os.close(write)
    with pytest.raises(StartupError):
        read_bootstrap(read)


@pytest.mark.parametrize("spec", ["no_colon", "appliance.testing.echo_worker:missing", "no.such.module:run",
                                  "appliance.testing.echo_worker:HEARTBEAT_INTERVAL_S"])
def test_bad_targets_are_startup_errors(spec: str) -> None:
    with pytest.raises(StartupError):
        load_target(spec)


def test_context_carries_identity_placement_and_a_once_only_ready(listener: socket.socket, table: StatusTable) -> None:
    read, write = os.pipe()
    bootstrap = bootstrap_for(listener, table, client_fd=os.dup(listener.fileno()), status_fd=os.dup(table.fd),
                              ready_fd=write, extra={"store_dir": "/nvme1/js"})
    ctx = build_context(bootstrap)
    try:
        assert (ctx.worker_index, ctx.worker_count, ctx.server_id, ctx.start_wall_s) == (1, 2, "NTEST", 123.0)
        assert ctx.options.server_name == "w-test"
        assert ctx.client_listener.getsockname() == listener.getsockname()
        assert ctx.extra["store_dir"] == "/nvme1/js" and ctx.extra["numa_node"] == 0
        ctx.on_ready()
        ctx.on_ready()
        os.close(write)
        assert os.read(read, 16) == b"R"
        assert ctx.status is not None
        ctx.status.set_counters(connections=1, msgs_in=2, msgs_out=3, bytes_in=4, bytes_out=5)
        assert table.snapshot(1).msgs_out == 3
    finally:
        ctx.client_listener.close()
        os.close(read)


@pytest.mark.integration
def test_a_spawned_worker_serves_heartbeats_is_pinned_and_stops_on_sigterm(
    listener: socket.socket, table: StatusTable
) -> None:
    bootstrap = bootstrap_for(listener, table)
    worker = spawn_worker(bootstrap)
    try:
        assert wait_ready(worker) == b"R"
        assert psutil.Process(worker.pid).cpu_affinity() == [bootstrap.core]
        with socket.create_connection(listener.getsockname(), timeout=5.0) as client:
            client.sendall(b"ping\n")
            assert client.makefile("rb").readline() == f"worker 1 pid {worker.pid}: ping\n".encode()
        deadline = time.monotonic() + DEADLINE_S
        while table.snapshot(1).heartbeats < 2 or table.snapshot(1).msgs_in < 1:
            assert time.monotonic() < deadline, "no heartbeat in the status table"
            time.sleep(0.02)
    finally:
        code = stop(worker)
    assert code == 0


@pytest.mark.integration
def test_a_target_that_cannot_load_exits_with_startup_failure(listener: socket.socket, table: StatusTable) -> None:
    worker = spawn_worker(bootstrap_for(listener, table, target="appliance.testing.echo_worker:missing"))
    assert worker.process.wait(timeout=DEADLINE_S) == 3
    assert os.read(worker.ready_fd, 16) == b""  # never reported ready
    worker.close_fds()


@pytest.mark.integration
def test_a_worker_whose_supervisor_is_already_gone_does_not_serve(listener: socket.socket, table: StatusTable) -> None:
    worker = spawn_worker(bootstrap_for(listener, table, supervisor_pid=1))
    assert worker.process.wait(timeout=DEADLINE_S) == 3
    worker.close_fds()


@pytest.mark.integration
def test_the_target_exit_code_is_the_process_exit_code(
    listener: socket.socket, table: StatusTable, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("APPLIANCE_ECHO_EXIT_CODE", "5")
    worker = spawn_worker(bootstrap_for(listener, table))
    assert worker.process.wait(timeout=DEADLINE_S) == 5
    worker.close_fds()


@pytest.mark.integration
def test_a_target_that_raises_is_logged_and_exits_one(listener: socket.socket, table: StatusTable) -> None:
    read, write = os.pipe()
    try:
        bootstrap = bootstrap_for(listener, table, target="appliance.testing.echo_worker:serve_crash")
        worker = spawn_worker_with_stderr(bootstrap, write)
        os.close(write)
        assert worker.process.wait(timeout=DEADLINE_S) == 1
        with os.fdopen(read, "rb") as stderr:
            log = stderr.read().decode()
        read = -1
    finally:
        if read >= 0:
            os.close(read)
    assert "[ERR] worker 1 crashed" in log
    assert "RuntimeError: echo worker 1 crashed on purpose" in log
    worker.close_fds()


def spawn_worker_with_stderr(bootstrap: WorkerBootstrap, stderr_fd: int) -> SpawnedWorker:
    """spawn_worker with the child's stderr on `stderr_fd` (the worker logs there)."""
    saved = os.dup(2)
    os.dup2(stderr_fd, 2)
    try:
        return spawn_worker(bootstrap)
    finally:
        os.dup2(saved, 2)
        os.close(saved)
