"""Core NATS over TLS, side by side with nats-server over TLS (a benchmark, not a test).

    .venv/bin/python benchmarks/tls.py [--msgs N] [--rounds R] [--workers W] [--handshake-s S] [--each]

Both servers get the same `tls {}` block (a trustme CA and server certificate made for the run).
Rows, medians over the rounds, targets alternating every round:
  - pub 128 B: one publisher (raw TLS socket, its own process) writes `msgs` PUBs then PING,
    until PONG; msgs/s.
  - pub+sub 128 B: the same with one subscriber (its own process) counting the exact bytes of
    every MSG; a run counts only when every message arrived.
  - handshake rate: new connections per second (TCP connect, plain INFO, TLS handshake, CONNECT,
    PING/PONG, close) from 4 client processes for `--handshake-s` seconds.
  - server CPU per handshake: what the server's processes ran (scheduler time of every thread,
    the workers' too) during the handshake runs, per connection made. On a loaded machine the
    rates measure how soon each server gets a core back as much as its work; this row does not.
The clients are Python (ssl module): what they can push bounds both servers alike.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from appliance.testing.certs import TestCerts
from appliance.testing.natsserver import NatsServer
from appliance.testing.process import ApplianceProcess

SIZE = 128
# the last row: lower is better (its ratio is appliance/nats-server all the same)
ROWS = ("pub 128 B msgs/s", "pub+sub 128 B msgs/s", "TLS handshakes/s", "server CPU us/handshake")
CONNECT = b'CONNECT {"verbose":false,"pedantic":false}\r\n'


def _open(port: int, ca_file: str) -> ssl.SSLSocket:
    raw = socket.create_connection(("127.0.0.1", port))
    raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    line = b""
    while not line.endswith(b"\r\n"):
        line += raw.recv(1)
    context = ssl.create_default_context(cafile=ca_file)
    return context.wrap_socket(raw, server_hostname="127.0.0.1")


def _until(sock: ssl.SSLSocket, marker: bytes) -> None:
    seen = b""
    while marker not in seen:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed")
        seen = seen[-16:] + chunk


def _publisher(port: int, ca_file: str, msgs: int, ready: mp.Event, go: mp.Event, out: mp.Queue) -> None:
    sock = _open(port, ca_file)
    sock.sendall(CONNECT + b"PING\r\n")
    _until(sock, b"PONG\r\n")
    one = b"PUB bench.tls %d\r\n%s\r\n" % (SIZE, b"x" * SIZE)
    batch = one * 1000
    ready.set()
    go.wait()
    start = time.perf_counter()
    for _ in range(msgs // 1000):
        sock.sendall(batch)
    sock.sendall(b"PING\r\n")
    _until(sock, b"PONG\r\n")
    out.put(("pub", time.perf_counter() - start))
    sock.close()


def _subscriber(port: int, ca_file: str, msgs: int, ready: mp.Event, out: mp.Queue) -> None:
    sock = _open(port, ca_file)
    sock.sendall(CONNECT + b"SUB bench.tls 1\r\nPING\r\n")
    _until(sock, b"PONG\r\n")
    expected = len(b"MSG bench.tls 1 %d\r\n%s\r\n" % (SIZE, b"x" * SIZE)) * msgs
    ready.set()
    got = 0
    sock.settimeout(30)
    start = 0.0
    while got < expected:
        chunk = sock.recv(1 << 20)
        if not chunk:
            break
        if not start:
            start = time.perf_counter()
        got += len(chunk)
    out.put(("sub", got == expected, time.perf_counter() - start))
    sock.close()


def run_pub(port: int, ca_file: str, msgs: int, with_sub: bool) -> float | None:
    """msgs/s, or None when the subscriber did not get every message (a server that cut it off as
    a slow consumer: the run is reported as missed, not counted)."""
    ctx = mp.get_context("fork")
    out: mp.Queue = ctx.Queue()
    go = ctx.Event()
    pub_ready, sub_ready = ctx.Event(), ctx.Event()
    procs = [ctx.Process(target=_publisher, args=(port, ca_file, msgs, pub_ready, go, out))]
    if with_sub:
        procs.append(ctx.Process(target=_subscriber, args=(port, ca_file, msgs, sub_ready, out)))
    else:
        sub_ready.set()
    for proc in procs:
        proc.start()
    pub_ready.wait(30)
    sub_ready.wait(30)
    go.set()
    results = [out.get(timeout=120) for _ in procs]
    for proc in procs:
        proc.join(30)
    pub_s = next(r[1] for r in results if r[0] == "pub")
    if with_sub:
        sub = next(r for r in results if r[0] == "sub")
        if not sub[1]:
            print(f"port {port}: the subscriber missed messages (closed as a slow consumer?)", file=sys.stderr)
            return None
        return msgs / max(pub_s, sub[2])
    return msgs / pub_s


def _handshaker(port: int, ca_file: str, seconds: float, out: mp.Queue) -> None:
    context = ssl.create_default_context(cafile=ca_file)
    done = 0
    failed: list[str] = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        raw = socket.create_connection(("127.0.0.1", port))
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # else Nagle + delayed ACK: 40 ms a round
        line = b""
        while not line.endswith(b"\r\n"):
            line += raw.recv(4096)
        try:
            with context.wrap_socket(raw, server_hostname="127.0.0.1") as sock:
                sock.sendall(CONNECT + b"PING\r\n")
                _until(sock, b"PONG\r\n")
        except (ssl.SSLError, OSError) as error:  # e.g. a refused admission: INFO + -ERR in plain text
            failed.append(str(error))
            raw.close()
            continue
        done += 1
    out.put((done, failed))


def server_cpu_s(pid: int) -> float:
    """CPU seconds the server process and its children (appliance's workers) have run: the
    scheduler's nanosecond count per thread where Linux gives it, else psutil's tick-based times.
    A load-independent companion of the rates, which on a busy machine measure scheduling too."""
    total = 0.0
    for proc in [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]:
        try:
            tasks = Path(f"/proc/{proc.pid}/task")
            if tasks.is_dir():
                total += sum(int((task / "schedstat").read_text().split()[0]) for task in tasks.iterdir()) / 1e9
            else:
                times = proc.cpu_times()
                total += times.user + times.system
        except (OSError, psutil.Error):
            continue  # a thread or process that ended meanwhile
    return total


def run_handshakes(port: int, ca_file: str, seconds: float, clients: int = 4) -> float:
    ctx = mp.get_context("fork")
    out: mp.Queue = ctx.Queue()
    procs = [ctx.Process(target=_handshaker, args=(port, ca_file, seconds, out)) for _ in range(clients)]
    for proc in procs:
        proc.start()
    results = [out.get(timeout=seconds + 60) for _ in procs]
    for proc in procs:
        proc.join(30)
    failed = [text for _, errors in results for text in errors]
    if failed:
        print(f"port {port}: {len(failed)} connections failed, first: {failed[0]}", file=sys.stderr)
    return sum(done for done, _ in results) / seconds


def _figure(value: float | None) -> str:
    return "missed" if value is None else f"{value:,.0f}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--msgs", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=0, help="appliance workers (0: one per core)")
    parser.add_argument("--handshake-s", type=float, default=3.0)
    parser.add_argument("--each", action="store_true", help="print every round's figures too")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        certs = TestCerts(directory)
        conf = directory / "tls.conf"
        conf.write_text(f'tls {{ cert_file: "{certs.server.cert}", key_file: "{certs.server.key}" }}\n'
                        f"appliance {{ workers: {args.workers} }}\n")
        real_conf = directory / "real.conf"
        real_conf.write_text(f'tls {{ cert_file: "{certs.server.cert}", key_file: "{certs.server.key}" }}\n')
        rows: dict[tuple[str, str], list[float | None]] = {}
        with NatsServer(["-c", str(real_conf)]) as real, \
                ApplianceProcess(["-c", str(conf), "-a", "127.0.0.1", "-p", "-1"], log_dir=directory) as ours:
            targets = {"appliance": ours.client_port, "nats-server": real.port}
            assert ours.process is not None and real.process is not None
            pids = {"appliance": ours.process.pid, "nats-server": real.process.pid}
            for _ in range(args.rounds):
                for name, port in targets.items():
                    rows.setdefault(("pub 128 B msgs/s", name), []).append(
                        run_pub(port, certs.ca_file, args.msgs, with_sub=False))
                    rows.setdefault(("pub+sub 128 B msgs/s", name), []).append(
                        run_pub(port, certs.ca_file, args.msgs, with_sub=True))
                    pid = pids[name]
                    cpu_before = server_cpu_s(pid)
                    rate = run_handshakes(port, certs.ca_file, args.handshake_s)
                    rows.setdefault(("TLS handshakes/s", name), []).append(rate)
                    done = rate * args.handshake_s
                    rows.setdefault(("server CPU us/handshake", name), []).append(
                        (server_cpu_s(pid) - cpu_before) / done * 1e6 if done else None)
        print(f"{'row':<24}{'appliance':>14}{'nats-server':>14}{'ratio':>8}")
        for row in ROWS:
            counted = {name: [v for v in rows[(row, name)] if v is not None] for name in targets}
            if not all(counted.values()):
                print(f"{row:<24}{'(no complete run)':>36}")
                continue
            ours_v = statistics.median(counted["appliance"])
            real_v = statistics.median(counted["nats-server"])
            print(f"{row:<24}{ours_v:>14,.0f}{real_v:>14,.0f}{ours_v / real_v:>8.2f}")
        if args.each:
            print("each round (appliance / nats-server):")
            for row in ROWS:
                pairs = zip(rows[(row, "appliance")], rows[(row, "nats-server")], strict=True)
                print(f"  {row:<25}" + "  ".join(f"{_figure(a)}/{_figure(b)}" for a, b in pairs))


if __name__ == "__main__":
    sys.exit(main())
