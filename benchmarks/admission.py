"""What server-wide max_connections costs: the admission gate alone, and connection churn end to end.

    .venv/bin/python benchmarks/admission.py [--rounds 3] [--connections 2000] [--gate-calls 200000]

1. gate: admit + release of supervisor/admission.py on a real status table (fcntl lock, sum of
   the rows), µs per connection, with 2 and with 16 worker rows.
2. churn: connections per second, one after another (connect, INFO, CONNECT + PING, PONG, close),
   against `appliance run` with 2 workers (every admission takes the gate) and with 1 worker (no
   gate), and against nats-server 2.15.1, alternately (A B C A B C ...), medians of the rounds.
The machine is shared: read the ratios, and the load printed with them.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from appliance.supervisor.admission import attach_gate
from appliance.supervisor.status_table import StatusTable

ROOT = Path(__file__).resolve().parent.parent
NATS_SERVER = ROOT / ".venv" / "bin" / "nats-server"
READY_TIMEOUT_S = 30.0


def gate_us(rows: int, calls: int) -> float:
    table = StatusTable.create(rows)
    gate = attach_gate(table.fd, 0, limit=10**9)
    try:
        started = time.perf_counter()
        for cid in range(calls):
            gate.admit(cid)
            gate.release(cid)
        return (time.perf_counter() - started) / calls * 1e6
    finally:
        gate.close()
        table.close()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start(kind: str, port: int, workdir: Path) -> subprocess.Popen[bytes]:
    config = workdir / f"{kind}.conf"
    body = f"listen: 127.0.0.1:{port}\nmax_connections: 1000\n"
    if kind == "nats-server":
        config.write_text(body)
        command = [str(NATS_SERVER), "-c", str(config)]
    else:
        workers = 2 if kind == "appliance-2w" else 1
        config.write_text(body + f"appliance {{ workers: {workers} }}\n")
        command = [sys.executable, "-m", "appliance", "run", "-c", str(config)]
    env = {**os.environ, "APPLIANCE_RUN_DIR": str(workdir)}
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        try:
            if one_connection(port):
                return process
        except OSError:
            pass
        if time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"{kind} did not start")
        time.sleep(0.1)


def one_connection(port: int) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock, sock.makefile("rb") as lines:
        if not lines.readline().startswith(b"INFO "):
            return False
        sock.sendall(b'CONNECT {"verbose":false}\r\nPING\r\n')
        return lines.readline() == b"PONG\r\n"


def churn(port: int, connections: int) -> float:
    started = time.perf_counter()
    for _ in range(connections):
        if not one_connection(port):
            raise RuntimeError("a connection was refused")
    return connections / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=2000)
    parser.add_argument("--gate-calls", type=int, default=200_000)
    args = parser.parse_args()
    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    for rows in (2, 16):
        runs = [gate_us(rows, args.gate_calls) for _ in range(args.rounds)]
        print(f"gate admit+release, {rows:2d} rows: median {statistics.median(runs):.2f} µs "
              f"(runs {', '.join(f'{r:.2f}' for r in runs)})")
    kinds = ["appliance-2w", "appliance-1w", "nats-server"]
    rates: dict[str, list[float]] = {kind: [] for kind in kinds}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.rounds):
            for kind in kinds:
                port = free_port()
                process = start(kind, port, Path(tmp))
                try:
                    rates[kind].append(churn(port, args.connections))
                finally:
                    process.terminate()
                    process.wait(timeout=READY_TIMEOUT_S)
    base = statistics.median(rates["nats-server"])
    for kind in kinds:
        median = statistics.median(rates[kind])
        print(f"churn {kind:13s}: median {median:8.0f} connections/s ({median / base:.2f}x nats-server; "
              f"runs {', '.join(f'{r:.0f}' for r in rates[kind])})")
    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")


if __name__ == "__main__":
    main()
