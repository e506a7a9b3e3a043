"""Cluster benchmark: a two-server appliance cluster next to a two-server nats-server 2.15.1 cluster,
in alternating rounds (A B C A B C ...) on one machine; publisher on n1, subscriber on n2.

    .venv/bin/python benchmarks/cluster.py [--rounds 3] [--msgs N] [--requests N]

Rows (each the median of the rounds): pub n1 -> sub n2 at 128 B and 1 KiB (the subscriber's msgs/s,
one `appliance bench sub` on n2 and one `appliance bench pub` on n1), and request/reply across the
route (a `bench reply` on n2, `bench request` on n1: requests/s, p50 and p99 latency). Servers:
nats-server, appliance with 1 worker and with 2 workers per host (worker 0 holds the routes). Every
server is a real process on 127.0.0.1 with fresh ports. The machine is shared: read the ratios and
the load printed with them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from appliance.testing.natsserver import nats_server_binary
from appliance.testing.process import ApplianceProcess, free_port

SUB_SETTLE_S = 2.0  # the subscriber's interest crosses the route before the publisher starts


def cluster_config(name: str, client: int, cluster: int, peer: int, workers: int | None) -> str:
    text = (f"server_name={name}\nlisten=127.0.0.1:{client}\n"
            f"cluster {{ name: C1\n listen: 127.0.0.1:{cluster}\n routes: [nats-route://127.0.0.1:{peer}] }}\n")
    return text + (f"appliance {{ workers: {workers} }}\n" if workers else "")


class Pair:
    """Two clustered servers; `kind` "go" or "appliance"."""

    def __init__(self, kind: str, workers: int | None, work: Path) -> None:
        self.kind, self.workers, self.work = kind, workers, work
        self.clients = [free_port(), free_port()]
        self.routes = [free_port(), free_port()]
        self.processes: list[ApplianceProcess | subprocess.Popen[bytes]] = []

    def urls(self) -> list[str]:
        return [f"nats://127.0.0.1:{port}" for port in self.clients]

    def __enter__(self) -> Pair:
        for i in (0, 1):
            path = self.work / f"{self.kind}{self.workers}-n{i + 1}.conf"
            path.write_text(cluster_config(f"n{i + 1}", self.clients[i], self.routes[i], self.routes[1 - i],
                                           self.workers))
            if self.kind == "appliance":
                self.processes.append(ApplianceProcess(["-c", str(path)], log_dir=self.work).start())
            else:
                self.processes.append(subprocess.Popen([nats_server_binary(), "-c", str(path)],
                                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        time.sleep(2.0)  # routes up (both sides dial; the loser of the duplicate closes)
        return self

    def __exit__(self, *exc: object) -> None:
        for process in self.processes:
            if isinstance(process, ApplianceProcess):
                process.stop()
            else:
                process.terminate()
                process.wait(10)


def bench(*args: str) -> list[str]:
    return [sys.executable, "-m", "appliance", "bench", *args, "--json", "--no-progress"]


def pub_sub(pair: Pair, size: int, msgs: int) -> float:
    n1, n2 = pair.urls()
    sub = subprocess.Popen(bench("sub", "--url", n2, "--msgs", str(msgs), "--size", str(size), "--timeout", "30"),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(SUB_SETTLE_S)
    subprocess.run(bench("pub", "--url", n1, "--msgs", str(msgs), "--size", str(size)), capture_output=True,
                   check=True, timeout=120)
    out, err = sub.communicate(timeout=120)
    if not out.strip():
        raise RuntimeError(f"subscriber failed: {err[-500:]}")
    return float(json.loads(out)["totals"][0]["msgs_per_s"])


def request_reply(pair: Pair, requests: int) -> tuple[float, float, float]:
    n1, n2 = pair.urls()
    replier = subprocess.Popen(bench("reply", "--url", n2, "--msgs", str(requests), "--timeout", "30"),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(SUB_SETTLE_S)
        done = subprocess.run(bench("request", "--url", n1, "--repliers", "0", "--msgs", str(requests)),
                              capture_output=True, text=True, check=True, timeout=120)
    finally:
        replier.kill()
        replier.wait()
    total = json.loads(done.stdout)["totals"][0]
    return float(total["msgs_per_s"]), float(total["latency"]["p50_us"]), float(total["latency"]["p99_us"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--msgs", type=int, default=400_000)
    parser.add_argument("--requests", type=int, default=20_000)
    options = parser.parse_args()
    kinds = [("nats-server", "go", None), ("appliance 1w", "appliance", 1), ("appliance 2w", "appliance", 2)]
    results: dict[str, dict[str, list[float]]] = {label: {} for label, _, _ in kinds}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(options.rounds):
            for label, kind, workers in kinds:
                with Pair(kind, workers, Path(tmp)) as pair:
                    for size, msgs in ((128, options.msgs), (1024, options.msgs // 2)):
                        results[label].setdefault(f"pub n1 -> sub n2 {size} B (msgs/s)", []).append(
                            pub_sub(pair, size, msgs))
                    rate, p50, p99 = request_reply(pair, options.requests)
                    results[label].setdefault("request/reply (req/s)", []).append(rate)
                    results[label].setdefault("request/reply p50 (us)", []).append(p50)
                    results[label].setdefault("request/reply p99 (us)", []).append(p99)
    print(f"load average {os.getloadavg()[0]:.2f} (2-core machine shared with other work); medians of "
          f"{options.rounds} rounds")
    rows = list(results["nats-server"])
    print(f"{'row':<34} " + " ".join(f"{label:>14}" for label, _, _ in kinds))
    for row in rows:
        print(f"{row:<34} " + " ".join(f"{statistics.median(results[label][row]):>14,.0f}"
                                       for label, _, _ in kinds))


if __name__ == "__main__":
    main()
