"""Cluster benchmark: the cluster rows of `make bench` (appliance/bench/compare.py, CLUSTER_SCENARIOS)
against a two-node nats-server 2.15.1 cluster and two-node appliance clusters with 1 worker and with
the default workers per host, in alternating rounds (A B C A B C ...) on one machine.

    .venv/bin/python benchmarks/cluster.py [--rounds 3] [--scale 1.0]

Rows (each the median of the rounds): pub n1 -> sub n2 at 128 B and 1 KiB (the subscriber's
msgs/s), and request/reply across the route (requester on n1, responder on n2: requests/s, p50 and
p99 latency). The publisher starts once the subscriber's interest has reached its node (an
interest probe, appliance/bench/probe.py). Every server is a real process on 127.0.0.1 with fresh
ports. The machine is shared: read the ratios and the load printed with them.
"""

from __future__ import annotations

import argparse
import os

from appliance.bench import compare, servers
from appliance.bench.stats import median

TARGETS = (servers.NATS_DEFAULT, servers.APPLIANCE_ONE_WORKER, servers.APPLIANCE)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every row's message count")
    options = parser.parse_args()
    cells = compare.run_all(compare.CLUSTER_SCENARIOS, TARGETS, rounds=options.rounds, scale=options.scale)
    print(f"load average {os.getloadavg()[0]:.2f}; medians of {options.rounds} rounds")
    print(f"{'row':<52} " + " ".join(f"{t.name:>20}" for t in TARGETS))
    for scenario in compare.CLUSTER_SCENARIOS:
        row = cells[scenario.key]
        figures = [(f"{median(c.msgs_per_s):,.0f}" if c.msgs_per_s else c.failure[:20]) for c in
                   (row[t.name] for t in TARGETS)]
        print(f"{scenario.title + ' msgs/s':<52} " + " ".join(f"{f:>20}" for f in figures))
        if any(row[t.name].p50_us for t in TARGETS):
            for label, values in (("p50 (µs)", "p50_us"), ("p99 (µs)", "p99_us")):
                figures = [f"{median(getattr(row[t.name], values)):,.0f}" if getattr(row[t.name], values) else "-"
                           for t in TARGETS]
                print(f"{'  ' + label:<52} " + " ".join(f"{f:>20}" for f in figures))


if __name__ == "__main__":
    main()
