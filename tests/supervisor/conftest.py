"""A harness for process-level supervisor tests: a real supervisor with echo workers on 127.0.0.1."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import psutil  # type: ignore[import-untyped]
import pytest

from appliance.supervisor.control import request

ECHO_TARGET = "appliance.testing.echo_worker:serve_echo"
DEADLINE_S = 60.0  # startups and restarts of Python workers on a loaded 2-core machine
T = TypeVar("T")

LAUNCHER = '''
import json, sys
from pathlib import Path
from appliance.config.options import ServerOptions
from appliance.supervisor.restart import RestartPolicy
from appliance.supervisor.supervisor import run_supervisor

spec = json.loads(sys.argv[1])
options = ServerOptions(host="127.0.0.1", port=spec["port"], http_host="127.0.0.1", http_port=spec["http_port"],
                        pid_file=spec["pid_file"], server_name=spec["server_name"])
options.appliance.workers = spec["workers"]
options.appliance.cpu_pinning = spec["cpu_pinning"]
options.appliance.numa_store_dirs = {int(node): path for node, path in spec["numa_store_dirs"].items()}
sys.exit(run_supervisor(options, worker_target=spec["target"], restart_policy=RestartPolicy(**spec["policy"]),
                        sysfs_node_root=Path(spec["sysfs"])))
'''


def wait_for(predicate: Callable[[], T | None], *, what: str, timeout_s: float = DEADLINE_S) -> T:
    """Poll `predicate` until it returns something truthy; fail with `what` after the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.02)


def shm_names_of(pid: int) -> list[str]:
    """Names the supervisor `pid` could have left: its status table and its fabric mesh of rings."""
    prefixes = (f"appliance-status-{pid}-", f"appliance-{pid}-")
    return [name for name in os.listdir("/dev/shm") if name.startswith(prefixes)]


class EchoClient:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5.0)
        self.file = self.sock.makefile("rb")

    def ask(self, text: str) -> str:
        self.sock.sendall(text.encode() + b"\n")
        return self.file.readline().decode().rstrip("\n")

    def worker_pid(self) -> int:
        match = re.match(r"worker \d+ pid (\d+): ", self.ask("who"))
        assert match is not None
        return int(match.group(1))

    def close(self) -> None:
        self.file.close()
        self.sock.close()


@dataclass
class RunningSupervisor:
    process: subprocess.Popen[bytes]
    log_path: Path
    run_dir: Path
    pid_file: Path
    seen_worker_pids: set[int] = field(default_factory=set)
    clients: list[EchoClient] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.process.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_log(self, text: str, *, timeout_s: float = DEADLINE_S) -> str:
        def logged() -> str | None:
            log = self.log()
            return log if text in log else None

        return wait_for(logged, what=f"log line {text!r}", timeout_s=timeout_s)

    @property
    def port(self) -> int:
        found = re.search(r"Listening for client connections on 127\.0\.0\.1:(\d+)", self.wait_log("Listening for"))
        assert found is not None
        return int(found.group(1))

    @property
    def socket_path(self) -> Path:
        return self.run_dir / f"appliance-{self.port}.sock"

    def status(self) -> Any:
        """The supervisor's status answer (JSON: see appliance/supervisor/report.py)."""
        answer: Any = request(self.socket_path, {"request": "status"}, timeout_s=5.0)
        for worker in answer["workers"]:
            if worker["pid"]:
                self.seen_worker_pids.add(worker["pid"])
        return answer

    def workers(self) -> Any:
        return self.status()["workers"]

    def wait_ready(self) -> Any:
        self.wait_log("Server is ready")

        def all_ready() -> Any:
            workers = self.workers()
            return workers if all(worker["state"] == "ready" for worker in workers) else None

        return wait_for(all_ready, what="all workers ready")

    def client(self) -> EchoClient:
        client = EchoClient(self.port)
        self.clients.append(client)
        return client

    def client_on(self, worker_pid: int, *, attempts_max: int = 200) -> EchoClient:
        """A connection the kernel handed to the worker with this pid (new connections until one is)."""
        for _ in range(attempts_max):
            client = self.client()
            if client.worker_pid() == worker_pid:
                return client
        raise AssertionError(f"no connection landed on worker pid {worker_pid}")

    wait_for = staticmethod(wait_for)

    def shm_names(self) -> list[str]:
        """Shared-memory names this supervisor could have left in /dev/shm."""
        return shm_names_of(self.pid)

    @staticmethod
    def gone(pid: int) -> bool:
        try:
            return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
        except psutil.NoSuchProcess:
            return True

    def signal(self, signum: int) -> None:
        os.kill(self.pid, signum)

    def wait_exit(self, *, timeout_s: float = DEADLINE_S) -> int:
        return self.process.wait(timeout=timeout_s)

    def cleanup(self) -> None:
        for client in self.clients:
            client.close()
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=DEADLINE_S)
        for pid in self.seen_worker_pids:  # workers die with the supervisor; make sure of it
            try:
                worker = psutil.Process(pid)
                if "appliance.worker" in " ".join(worker.cmdline()):
                    os.kill(pid, signal.SIGCONT)
                    worker.wait(timeout=DEADLINE_S)
            except (psutil.Error, ProcessLookupError):
                pass


@pytest.fixture
def fake_sysfs(tmp_path: Path) -> Path:
    """Two NUMA nodes: CPU 0 on node 0, CPU 1 on node 1 (this machine has CPUs 0 and 1)."""
    root = tmp_path / "sys-node"
    for node, cpulist in ((0, "0\n"), (1, "1\n")):
        (root / f"node{node}").mkdir(parents=True)
        (root / f"node{node}" / "cpulist").write_text(cpulist)
    (root / "online").write_text("0-1\n")
    return root


@pytest.fixture
def start_supervisor(tmp_path: Path) -> Iterator[Callable[..., RunningSupervisor]]:
    started: list[RunningSupervisor] = []

    def start(*, workers: int = 2, target: str = ECHO_TARGET, policy: dict[str, float] | None = None,
              env: dict[str, str] | None = None, sysfs: Path | None = None, port: int = -1,
              http_port: int = 0, cpu_pinning: bool = False, server_name: str = "",
              command: list[str] | None = None, numa_store_dirs: dict[int, str] | None = None) -> RunningSupervisor:
        """A supervisor through the test launcher (run_supervisor with these options), or `command`."""
        index = len(started)
        run_dir = tmp_path / f"run{index}"
        run_dir.mkdir()
        log_path = tmp_path / f"supervisor{index}.log"
        pid_file = tmp_path / f"supervisor{index}.pid"
        spec = {"workers": workers, "target": target, "policy": policy or {}, "port": port,
                "http_port": http_port, "pid_file": str(pid_file), "sysfs": str(sysfs or tmp_path / "no-sysfs"),
                "cpu_pinning": cpu_pinning, "server_name": server_name, "numa_store_dirs": numa_store_dirs or {}}
        launcher = tmp_path / "launch.py"
        launcher.write_text(LAUNCHER)
        inherited = {key: value for key, value in os.environ.items() if not key.startswith(("NOTIFY_", "WATCHDOG_"))}
        environment = {**inherited, "APPLIANCE_RUN_DIR": str(run_dir), **(env or {})}
        with log_path.open("wb") as log:
            argv = command or [sys.executable, str(launcher), json.dumps(spec)]
            process = subprocess.Popen(argv, stdout=log, stderr=log,
                                       stdin=subprocess.DEVNULL, env=environment)
        running = RunningSupervisor(process=process, log_path=log_path, run_dir=run_dir, pid_file=pid_file)
        started.append(running)
        return running

    yield start
    for running in started:
        running.cleanup()
