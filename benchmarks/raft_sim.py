"""Benchmark the RAFT simulator: seeds per second and simulated commits per CPU-second.

    .venv/bin/python benchmarks/raft_sim.py [--seeds 20] [--ticks 1500] [--repeat 3]
    .venv/bin/python benchmarks/raft_sim.py --bugs [--budget 1000]   # planted-bug table

Three workloads: the default faulty swarm (what `make test` and soaks run), a calm cluster with
no faults (the upper bound of commits/CPU-s through core + driver + durable log + checkers), and
the bare core (three RaftCores over MemoryStorage, no driver or checkers).
The machine is shared and noisy: every figure is the median of --repeat runs.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from appliance.raft.core import RaftCore
from appliance.raft.storage import MemoryStorage
from appliance.raft.types import BUG_NAMES, ConfState, RaftConfig
from appliance.testing.sim.planted import hunt
from appliance.testing.sim.simulator import SimOptions, run_seed


def swarm(seeds: int, ticks: int) -> tuple[float, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    commits = sum(run_seed(SimOptions(seed=seed, ticks=ticks)).commits for seed in range(seeds))
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return seeds / wall, commits / cpu


def calm(ticks: int) -> float:
    cpu = time.process_time()
    result = run_seed(SimOptions(seed=1, ticks=ticks, faults=frozenset()))
    return result.commits / (time.process_time() - cpu)


def bare_core(entries: int, batch: int) -> float:
    voters = ("1", "2", "3")
    stores = {i: MemoryStorage(ConfState(voters)) for i in voters}
    cores = {i: RaftCore(RaftConfig(id=i), stores[i], random.Random(int(i))) for i in voters}

    def settle() -> None:
        busy = True
        while busy:
            busy = False
            for node_id, core in cores.items():
                if core.has_ready():
                    busy = True
                    ready = core.ready()
                    stores[node_id].save(ready.hard_state, ready.entries, sync=ready.must_sync)
                    core.advance(ready)
                    for message in ready.messages:
                        cores[message.to].step(message)

    cores["1"].campaign()
    settle()
    cpu = time.process_time()
    for _ in range(entries // batch):
        cores["1"].propose_many([b"x" * 64] * batch)
        settle()
    return entries / (time.process_time() - cpu)


def bug_table(budget: int) -> None:
    """For each planted bug: the first seed (0, 1, 2, ...) whose run fails, i.e. seeds needed."""
    print(f"planted bug -> seeds needed (first failing seed + 1; budget {budget}; fault mix of planted.HUNTS)")
    for name in BUG_NAMES:
        cpu = time.process_time()
        result = hunt(name, seeds=budget)
        spent = time.process_time() - cpu
        if result is None:
            print(f"  {name:26} not caught in {budget} seeds ({spent:.1f} CPU-s)")
        else:
            print(f"  {name:26} {result.seed + 1:5} seeds  {spent:6.1f} CPU-s  {result.failure[:100]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--ticks", type=int, default=1500)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--bugs", action="store_true", help="print the planted-bug table instead")
    parser.add_argument("--budget", type=int, default=1000)
    args = parser.parse_args()
    if args.bugs:
        bug_table(args.budget)
        return
    runs = [swarm(args.seeds, args.ticks) for _ in range(args.repeat)]
    print(f"swarm ({args.seeds} seeds x {args.ticks} ticks, 3 nodes x 2 groups): "
          f"{statistics.median(r[0] for r in runs):.2f} seeds/s, "
          f"{statistics.median(r[1] for r in runs):.0f} simulated commits per CPU-second")
    print(f"calm cluster (no faults, 3000 ticks): "
          f"{statistics.median(calm(3000) for _ in range(args.repeat)):.0f} commits per CPU-second")
    for batch in (1, 64):
        rate = statistics.median(bare_core(20_000, batch) for _ in range(args.repeat))
        print(f"bare core, 3 replicas in memory, batch {batch}: {rate:.0f} commits per CPU-second")


if __name__ == "__main__":
    main()
