"""RAFT log sync microbenchmark: the cost of one durable append, as every replica of an R3 stream
pays it on each synchronous publish's path.

    .venv/bin/python benchmarks/raftlog_sync.py [--appends 1000] [--size 250] [--writers 3] [--dir PATH]

Each writer process (three replicas of one group share one disk on a test machine) appends `size`
bytes and makes them durable, `appends` times, alternating in random order between:
- append+fsync         a plain O_APPEND file and os.fsync: what OsLogFiles did before (the file
                       grows with each append, so each fsync also commits a new size and blocks)
- OsLogFiles           appliance.store.raftlog.OsLogFiles: appends into preallocated space and
                       fdatasync (no new size to commit)
Alternating within one process keeps the comparison paired while other work shares the disk.
Prints p50/p90/mean microseconds per durable append for every writer. The machine is shared:
repeat, and read the paired differences rather than absolutes.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import statistics
import tempfile
import time
from multiprocessing.connection import Connection

from appliance.store.raftlog import OsLogFiles

MODES = ("append+fsync", "OsLogFiles")


def writer(directory: str, appends: int, size: int, seed: int, results: Connection) -> None:
    record = b"r" * size
    plain = os.open(os.path.join(directory, "plain.log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    files = OsLogFiles(directory)
    rng = random.Random(seed)
    times: dict[str, list[int]] = {mode: [] for mode in MODES}
    for _ in range(appends):
        modes = list(MODES)
        rng.shuffle(modes)
        for mode in modes:
            start = time.perf_counter_ns()
            if mode == "append+fsync":
                os.write(plain, record)
                os.fsync(plain)
            else:
                files.append("log", record)
                files.sync("log")
            times[mode].append(time.perf_counter_ns() - start)
    os.close(plain)
    files.close()
    results.send(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--appends", type=int, default=1000)
    parser.add_argument("--size", type=int, default=250, help="bytes per append (a 128 B publish's log record)")
    parser.add_argument("--writers", type=int, default=3, help="processes appending at once (replicas on one disk)")
    parser.add_argument("--dir", default=None, help="where the logs go (default: a temporary directory)")
    args = parser.parse_args()
    base = tempfile.mkdtemp(prefix="raftlog-sync-", dir=args.dir)
    pipes, procs = [], []
    for index in range(args.writers):
        directory = os.path.join(base, f"w{index}")
        os.makedirs(directory)
        receive, send = multiprocessing.Pipe(duplex=False)
        proc = multiprocessing.Process(target=writer, args=(directory, args.appends, args.size, index, send))
        proc.start()
        pipes.append(receive)
        procs.append(proc)
    for index, (receive, proc) in enumerate(zip(pipes, procs, strict=True)):
        times = receive.recv()
        proc.join()
        for mode in MODES:
            values = sorted(times[mode])
            print(f"writer {index}  {mode:14s} p50 {values[len(values) // 2] / 1e3:7.0f} us  "
                  f"p90 {values[len(values) * 9 // 10] / 1e3:7.0f} us  mean {statistics.fmean(values) / 1e3:7.0f} us")


if __name__ == "__main__":
    main()
