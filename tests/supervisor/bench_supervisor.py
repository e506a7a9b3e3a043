"""Supervisor numbers, side by side with nats-server where there is a counterpart. Not a test.

    .venv/bin/python tests/supervisor/bench_supervisor.py [--rounds 5]

- start to "Server is ready": `appliance run` (supervisor + 1 real worker) vs `nats-server`;
- worker restart: SIGKILL of the worker until the supervisor reports it serving again;
- status: one control-socket request in process, and the whole `appliance status` command;
- the supervisor's own RSS and CPU while idle.
Medians over rounds; the machine is shared, so compare ratios, not absolute times.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TypeVar

import psutil  # type: ignore[import-untyped]

from appliance.supervisor.control import request

ROOT = Path(__file__).resolve().parents[2]
NATS_SERVER = ROOT / ".venv" / "bin" / "nats-server"
T = TypeVar("T")


def wait_for(predicate: Callable[[], T | None], timeout_s: float = 60.0) -> T:
    deadline = time.monotonic() + timeout_s
    while (value := predicate()) is None or value is False:
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met")
        time.sleep(0.005)
    return value


def start(argv: list[str], log: Path, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], float]:
    """Start and wait for "Server is ready"; returns the process and the seconds it took."""
    started = time.monotonic()
    with log.open("wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=out, env=env)
    wait_for(lambda: "Server is ready" in log.read_text(errors="replace") or None)
    return process, time.monotonic() - started


def port_of(log: Path) -> int:
    found = re.search(r"Listening for client connections on [\d.]+:(\d+)", log.read_text())
    assert found is not None
    return int(found.group(1))


def stop(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=60)


def bench(rounds: int) -> dict[str, list[float]]:
    results: dict[str, list[float]] = {key: [] for key in (
        "nats-server start s", "appliance start s", "worker restart s", "status request ms", "status command ms",
        "supervisor rss MiB", "supervisor idle cpu %")}
    with tempfile.TemporaryDirectory(prefix="apbench") as scratch:
        env = {**os.environ, "APPLIANCE_RUN_DIR": scratch}
        for round_index in range(rounds):
            log = Path(scratch) / f"nats{round_index}.log"
            process, seconds = start([str(NATS_SERVER), "-a", "127.0.0.1", "-p", "-1"], log, env)
            results["nats-server start s"].append(seconds)
            stop(process)

            log = Path(scratch) / f"appliance{round_index}.log"
            argv = [sys.executable, "-m", "appliance", "run", "-a", "127.0.0.1", "-p", "-1"]
            process, seconds = start(argv, log, env)
            results["appliance start s"].append(seconds)
            socket_path = Path(scratch) / f"appliance-{port_of(log)}.sock"

            began = time.monotonic()
            request(socket_path, {"request": "status"})
            results["status request ms"].append((time.monotonic() - began) * 1000)
            began = time.monotonic()
            subprocess.run([sys.executable, "-m", "appliance", "status", "--socket", str(socket_path)],
                           capture_output=True, env=env, check=False)
            results["status command ms"].append((time.monotonic() - began) * 1000)

            supervisor = psutil.Process(process.pid)
            supervisor.cpu_percent(None)
            time.sleep(2.0)
            results["supervisor idle cpu %"].append(supervisor.cpu_percent(None))
            results["supervisor rss MiB"].append(supervisor.memory_info().rss / 2**20)

            worker = request(socket_path, {"request": "status"})["workers"][0]  # type: ignore[index]
            began = time.monotonic()
            os.kill(worker["pid"], signal.SIGKILL)

            wait_for(partial(serving_again, socket_path, int(worker["pid"])))
            results["worker restart s"].append(time.monotonic() - began)
            stop(process)
    return results


def serving_again(socket_path: Path, old_pid: int) -> bool:
    now = request(socket_path, {"request": "status"})["workers"][0]  # type: ignore[index]
    return bool(now["state"] == "ready" and now["pid"] != old_pid)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    results = bench(parser.parse_args().rounds)
    print(f"{'measure':<24} {'median':>9} {'min':>9} {'max':>9}")
    for name, values in results.items():
        print(f"{name:<24} {statistics.median(values):>9.3f} {min(values):>9.3f} {max(values):>9.3f}")
    ratio = statistics.median(results["appliance start s"]) / statistics.median(results["nats-server start s"])
    print(f"start to ready, appliance / nats-server: {ratio:.1f}x")


if __name__ == "__main__":
    main()
