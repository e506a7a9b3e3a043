"""The Spark data source's throughput: `make bench-spark` (ARGS="--messages 1000000" is the default).

    .venv/bin/python benchmarks/spark.py [--messages 1000000] [--size 200]

Against one `appliance run` (JetStream, a temp store dir) holding N messages of `size` bytes on
100 subjects (bench.0 .. bench.99):
1. Spark batch read of the whole stream (sum of data lengths, so every row is built) with 1, 2
   and 4 partitions, local[4];
2. the same with a pushed-down `subject = 'bench.7'` (1% of the messages): only those cross the
   wire, reported as stream messages covered per second and as matching rows;
3. the offline `jetstream-store` reader on the same stream directory;
4. a batch write of 100k rows (PubAck checked, window 256) into a second stream;
5. the baseline: one plain nats-py process reading the stream with batch Direct Get.
The machine is shared with other work: the load average is printed with the table.
`--rows offline,baseline` runs only some rows (read, pushdown, offline, write, baseline);
`--repeat N` times each Spark read N times and prints every run (the table shows the median).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import nats
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import appliance.spark
from appliance.spark.source_store import StoreReader
from appliance.testing.process import ApplianceProcess, free_port

SUBJECTS = 100


async def fill(url: str, n: int, size: int) -> None:
    nc = await nats.connect(url, pending_size=64 * 1024 * 1024)
    js = nc.jetstream(timeout=30)
    await js.add_stream(name="BENCH", subjects=["bench.>"], allow_direct=True)
    await js.add_stream(name="BOUT", subjects=["bout.>"], allow_direct=True)
    payload = b"x" * size
    sent = 0
    while sent < n:
        chunk = min(10_000, n - sent)
        for i in range(sent, sent + chunk):
            await nc.publish(f"bench.{i % SUBJECTS}", payload)
        await nc.flush(timeout=60)
        sent += chunk
        while (await js.stream_info("BENCH")).state.messages < sent - 20_000:
            await asyncio.sleep(0.05)
    deadline = time.monotonic() + 300
    while (await js.stream_info("BENCH")).state.messages < n:
        if time.monotonic() > deadline:
            raise SystemExit("the stream did not reach the message count (messages dropped?)")
        await asyncio.sleep(0.1)
    await nc.close()


async def nats_py_baseline(url: str, last_seq: int) -> float:
    """Batch Direct Get in one nats-py process: requests of 1024, the next after the EOB."""
    nc = await nats.connect(url, pending_size=256 * 1024 * 1024)
    queue: asyncio.Queue[object] = asyncio.Queue()
    inbox = nc.new_inbox()

    async def got(msg: object) -> None:
        queue.put_nowait(msg)

    await nc.subscribe(inbox, cb=got)
    start = time.perf_counter()
    seq, count = 1, 0
    while seq <= last_seq:
        await nc.publish("$JS.API.DIRECT.GET.BENCH", json.dumps({"seq": seq, "batch": 1024}).encode(), reply=inbox)
        while True:
            msg = await queue.get()
            headers = msg.headers or {}  # type: ignore[attr-defined]
            status = headers.get("Status")
            if status in ("204", "404"):
                break
            count += 1
            seq = int(headers["Nats-Sequence"]) + 1
        if status == "404":
            break
    elapsed = time.perf_counter() - start
    await nc.close()
    return count / elapsed


def offline_in_process(path: str) -> int:
    """The jetstream-store reader without Spark: its driver-side plan and every partition read
    here, one after the other (what the Python side of a Spark read costs in all)."""
    reader = StoreReader({"path": path, "numpartitions": "4"})
    return sum(batch.num_rows for partition in reader.partitions() for batch in reader.read(partition))


def timed(action) -> float:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--write-rows", type=int, default=100_000)
    parser.add_argument("--rows", default="read,pushdown,offline,write,baseline",
                        help="which rows to run, comma-separated")
    parser.add_argument("--repeat", type=int, default=1, help="runs per Spark read row (median shown)")
    args = parser.parse_args()
    wanted = set(args.rows.split(","))
    unknown = wanted - {"read", "pushdown", "offline", "write", "baseline"}
    if unknown:
        parser.error(f"unknown rows {sorted(unknown)}")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    n = args.messages
    rows: list[tuple[str, str, str]] = []
    with tempfile.TemporaryDirectory(prefix="appliance-bench-spark-") as tmp:
        base = Path(tmp)
        config = base / "bench.conf"
        config.write_text(f"listen: 127.0.0.1:{free_port()}\njetstream {{ store_dir: {base / 'store'} }}\n")
        with ApplianceProcess(["-c", str(config)], log_dir=base) as server:
            url = f"nats://127.0.0.1:{server.client_port}"
            print(f"filling BENCH with {n} messages of {args.size} B ...", flush=True)
            asyncio.run(fill(url, n, args.size))
            spark = (SparkSession.builder.master("local[4]").appName("appliance-bench")
                     .config("spark.ui.enabled", "false").config("spark.driver.host", "127.0.0.1")
                     .config("spark.sql.python.filterPushdown.enabled", "true").getOrCreate())
            spark.sparkContext.setLogLevel("ERROR")
            appliance.spark.register(spark)

            def load(**options: str):  # type: ignore[no-untyped-def]
                reader = spark.read.format("jetstream").option("url", url).option("stream", "BENCH")
                for key, value in options.items():
                    reader = reader.option(key, value)
                return reader.load()

            def total(df) -> int:  # type: ignore[no-untyped-def]
                return int(df.agg(F.sum(F.length("data"))).collect()[0][0] or 0)

            # warm-up: the first jobs pay for starting (up to 4) Python workers and their imports,
            # which Spark then reuses; warm both formats so the table shows steady-state reads
            store = next((base / "store").rglob("BENCH"))
            total(load(endSeq="4000", numPartitions="4"))
            total(spark.read.format("jetstream-store").option("numPartitions", "4").option("endSeq", "4000").load(str(store)))
            def runs(action) -> float:  # type: ignore[no-untyped-def]
                """The median of --repeat timed runs of `action`; every run printed."""
                times = sorted(timed(action) for _ in range(args.repeat))
                if args.repeat > 1:
                    print("  runs: " + ", ".join(f"{n / t:,.0f} msgs/s ({t:.2f} s)" for t in times), flush=True)
                return times[len(times) // 2]

            if "read" in wanted:
                for parts in (1, 2, 4):
                    seconds = runs(lambda: total(load(numPartitions=str(parts))))
                    rows.append((f"Spark batch read, {parts} partition(s)", f"{n / seconds:,.0f} msgs/s", f"{seconds:.1f} s"))
            if "pushdown" in wanted:
                matched = [0]
                seconds = runs(lambda: matched.__setitem__(0, load(numPartitions="4").where("subject = 'bench.7'").count()))
                rows.append(("Spark read, pushdown subject = 1%, 4 partitions",
                             f"{n / seconds:,.0f} stream msgs/s", f"{seconds:.1f} s, {matched[0]} rows"))
            if "offline" in wanted:
                seconds = runs(lambda: total(spark.read.format("jetstream-store").option("numPartitions", "4").load(str(store))))
                rows.append(("Spark offline jetstream-store read, 4 partitions", f"{n / seconds:,.0f} msgs/s", f"{seconds:.1f} s"))
                cpu = [0.0]

                def alone() -> None:
                    start = time.process_time()
                    offline_in_process(str(store))
                    cpu[0] = time.process_time() - start

                seconds = runs(alone)
                rows.append(("offline reader alone (plan + every partition read, one process)",
                             f"{n / seconds:,.0f} msgs/s", f"{seconds:.2f} s wall; {n / cpu[0]:,.0f} msgs per CPU-s (last run)"))
            if "write" in wanted:
                w = args.write_rows
                out = spark.range(w).select(
                    F.concat(F.lit("bout."), (F.col("id") % SUBJECTS).cast("string")).alias("subject"),
                    F.expr(f"cast(repeat('y', {args.size}) as binary)").alias("data")).repartition(2)
                seconds = timed(lambda: out.write.format("jetstream").option("url", url).mode("append").save())
                rows.append((f"Spark batch write, {w} rows, 2 partitions", f"{w / seconds:,.0f} msgs/s", f"{seconds:.1f} s"))
            spark.stop()
            if "baseline" in wanted:
                rate = asyncio.run(nats_py_baseline(url, n))
                rows.append(("nats-py, batch Direct Get, one process", f"{rate:,.0f} msgs/s", ""))
    print(f"\nload average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; {n} messages of {args.size} B\n")
    print("| what | rate | notes |\n|---|---|---|")
    for what, rate, notes in rows:
        print(f"| {what} | {rate} | {notes} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
