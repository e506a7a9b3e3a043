"""Segment store benchmark: append, read and compression, next to this disk's own limits.

    .venv/bin/python benchmarks/store.py [--dir DIR] [--seconds S] [--repeat N]

Prints a Markdown table. Every row is measured `--repeat` times and the best and median are
shown (the machine is shared: report ratios, not single numbers). Durability is never skipped:
"sync always" counts a message only once an fsync that started after its write has returned
(group commit through GroupCommitter, the fsync on a helper thread while the next batch is
encoded), exactly what a PubAck waits for.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable

import lz4.frame  # type: ignore[import-untyped]

from appliance import limits
from appliance.store import segment, speedups
from appliance.store.commit import GroupCommitter
from appliance.store.filestore import FileStoreConfig, FileStreamStore
from appliance.store.layout import SealedSegment, SealJob, SyncJob

T0 = 1_700_000_000_000_000_000


# --- the disk's own limits ------------------------------------------------------------------------


def disk_fdatasync_rate(directory: str, seconds: float) -> float:
    """Serial 4 KiB append + fdatasync per second (the ceiling without group commit)."""
    path = os.path.join(directory, "fsync.probe")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    block = b"\x5a" * 4096
    count = 0
    start = time.perf_counter()
    try:
        while time.perf_counter() - start < seconds:
            os.write(fd, block)
            os.fdatasync(fd)
            count += 1
    finally:
        os.close(fd)
        os.remove(path)
    return count / (time.perf_counter() - start)


def disk_sequential_mb_s(directory: str, total_mb: int = 512) -> float:
    """Sequential 1 MiB writes of total_mb, fdatasync at the end, in MB/s."""
    path = os.path.join(directory, "seq.probe")
    chunk = os.urandom(1 << 20)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    start = time.perf_counter()
    try:
        for _ in range(total_mb):
            os.write(fd, chunk)
        os.fdatasync(fd)
    finally:
        os.close(fd)
    elapsed = time.perf_counter() - start
    os.remove(path)
    return total_mb * (1 << 20) / elapsed / 1e6


# --- appends --------------------------------------------------------------------------------------


def batches(payload_bytes: int, batch_msgs: int) -> Callable[[int], list[tuple[str, bytes, bytes, int]]]:
    payload = random.Random(1).randbytes(payload_bytes)

    def make(n: int) -> list[tuple[str, bytes, bytes, int]]:
        return [("bench.orders.created", b"", payload, T0 + n + i) for i in range(batch_msgs)]

    return make


def append_sync_always(
    directory: str, payload_bytes: int, seconds: float, batch_msgs: int, *, background_seal: bool = False
) -> tuple[float, float, float]:
    """Group commit: submit batches; one fsync in flight on a helper thread covers all that arrived.

    With background_seal, full segments are compressed on a second helper thread (SealJob).
    """
    store = FileStreamStore(FileStoreConfig(directory, sync_always=True, seal_inline=not background_seal))
    committer = GroupCommitter(store, sync_always=True)
    make = batches(payload_bytes, batch_msgs)
    durable = 0
    in_flight: tuple[concurrent.futures.Future[None], SyncJob] | None = None
    sealing: tuple[concurrent.futures.Future[None], SealJob] | None = None
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        start = time.perf_counter()
        cpu_start = time.process_time()
        n = 0
        while time.perf_counter() - start < seconds:
            committer.submit(make(n))
            n += batch_msgs
            if sealing is not None and sealing[0].done():
                sealing[0].result()
                store.finish_seal(sealing[1])
                sealing = None
            if background_seal and sealing is None:
                seal = store.begin_seal()
                if seal is not None:
                    sealing = (pool.submit(seal.run), seal)
            if in_flight is not None and in_flight[0].done():
                in_flight[0].result()
                durable += sum(len(t.seqs) for t in committer.complete(in_flight[1]))
                in_flight = None
            if in_flight is None:
                job = committer.next_job(0.0)
                if job is not None:
                    in_flight = (pool.submit(job.run), job)
        while in_flight is not None:
            in_flight[0].result()
            durable += sum(len(t.seqs) for t in committer.complete(in_flight[1]))
            job = committer.next_job(0.0)
            in_flight = (pool.submit(job.run), job) if job is not None else None
        elapsed = time.perf_counter() - start
        if sealing is not None:
            sealing[0].result()
            store.finish_seal(sealing[1])
        cpu = time.process_time() - cpu_start
    store.close()
    rate = durable / elapsed
    return rate, rate * payload_bytes / 1e6, cpu / durable * 1e6


def append_sync_interval(
    directory: str, payload_bytes: int, seconds: float, batch_msgs: int
) -> tuple[float, float, float]:
    """sync_interval 2m: writes complete when handed to the OS (nats-server's default)."""
    store = FileStreamStore(FileStoreConfig(directory, sync_always=False))
    committer = GroupCommitter(store, sync_always=False, sync_interval_s=120.0, now_s=time.monotonic())
    make = batches(payload_bytes, batch_msgs)
    start = time.perf_counter()
    cpu_start = time.process_time()
    n = 0
    while time.perf_counter() - start < seconds:
        committer.submit(make(n))
        n += batch_msgs
        job = committer.next_job(time.monotonic())
        if job is not None:
            job.run()
            committer.complete(job)
    elapsed = time.perf_counter() - start
    cpu = time.process_time() - cpu_start
    store.close()
    return n / elapsed, n * payload_bytes / elapsed / 1e6, cpu / n * 1e6


# --- reads ----------------------------------------------------------------------------------------


def fill(directory: str, payload_bytes: int, count: int) -> None:
    store = FileStreamStore(FileStoreConfig(directory, sync_always=False))
    make = batches(payload_bytes, 1000)
    for n in range(0, count, 1000):
        store.append_batch(make(n))
    store.close()


def sequential_read(directory: str, payload_bytes: int) -> tuple[float, float, float]:
    store = FileStreamStore(FileStoreConfig(directory))
    start = time.perf_counter()
    cpu_start = time.process_time()
    count = sum(1 for _ in store.scan())
    elapsed = time.perf_counter() - start
    cpu = time.process_time() - cpu_start
    store.close()
    return count / elapsed, count * payload_bytes / elapsed / 1e6, cpu / count * 1e6


def random_read(directory: str, payload_bytes: int, seconds: float) -> tuple[float, float, float]:
    store = FileStreamStore(FileStoreConfig(directory))
    rng = random.Random(7)
    last = store.state().last_seq
    count = 0
    start = time.perf_counter()
    cpu_start = time.process_time()
    while time.perf_counter() - start < seconds:
        for _ in range(200):
            assert store.load(rng.randint(1, last)) is not None
        count += 200
    elapsed = time.perf_counter() - start
    cpu = time.process_time() - cpu_start
    store.close()
    return count / elapsed, count * payload_bytes / elapsed / 1e6, cpu / count * 1e6


# --- compression ----------------------------------------------------------------------------------


def json_events(n: int) -> list[bytes]:
    rng = random.Random(3)
    pages = ["/", "/products", "/products/%d", "/cart", "/checkout", "/search?q=%s", "/account/orders"]
    agents = ["Mozilla/5.0 (X11; Linux x86_64) Firefox/131.0", "Mozilla/5.0 (Macintosh) Safari/605.1.15",
              "Mozilla/5.0 (Windows NT 10.0) Chrome/130.0.0.0"]
    out = []
    for i in range(n):
        page = rng.choice(pages)
        if "%d" in page:
            page = page % rng.randint(1, 5000)
        elif "%s" in page:
            page = page % rng.choice(["shoes", "laptop", "coffee", "tent"])
        event = {
            "ts": f"2026-11-21T01:{(i // 600) % 60:02d}:{(i // 10) % 60:02d}.{i % 1000:03d}Z",
            "event": rng.choice(["page_view", "click", "add_to_cart", "purchase"]),
            "user_id": f"u-{rng.randint(1, 20000):06d}",
            "session": f"{rng.getrandbits(64):016x}",
            "page": page,
            "country": rng.choice(["DE", "FR", "US", "GB", "NL", "SE"]),
            "ua": rng.choice(agents),
            "amount_cents": rng.randint(0, 25000),
        }
        out.append(json.dumps(event, separators=(",", ":")).encode())
    return out


def log_lines(n: int) -> list[bytes]:
    rng = random.Random(4)
    paths = ["/api/v1/orders", "/api/v1/orders/%d", "/api/v1/users/%d", "/healthz", "/metrics"]
    out = []
    for i in range(n):
        path = rng.choice(paths)
        if "%d" in path:
            path = path % rng.randint(1, 99999)
        status = rng.choice([200, 200, 200, 201, 204, 404, 500])
        out.append(
            b"2026-11-21T01:02:%02d.%03dZ INF [%d] worker %d: request %s %s %d in %.1fms"
            % (i % 60, i % 1000, 4000 + i % 7, i % 4, rng.choice([b"GET", b"POST"]), path.encode(), status,
               rng.random() * 20)
        )
    return out


def random_payloads(n: int) -> list[bytes]:
    rng = random.Random(5)
    return [rng.randbytes(200) for _ in range(n)]


def compression_ratios(
    directory: str, payloads: list[bytes], *, use_dictionary: bool, level: int = limits.STORE_ZSTD_LEVEL
) -> tuple[float, float]:
    """(zstd ratio of the store's sealed segments, lz4 ratio of the same raw blocks)."""
    config = FileStoreConfig(
        directory, sync_always=False, segment_bytes=4 << 20, use_dictionary=use_dictionary, zstd_level=level
    )
    store = FileStreamStore(config)
    for i in range(0, len(payloads), 1000):
        store.append_batch([("events", b"", p, T0 + i + k) for k, p in enumerate(payloads[i : i + 1000])])
    sealed = [s for s in store.segments() if isinstance(s, SealedSegment)]
    assert sealed, "not enough data to seal a segment"
    raw_total = zstd_total = lz4_total = 0
    for seg in sealed:
        data = store.ops.read_all(seg.path)
        blocks, _ = segment.read_footer(data, seg.path)
        for k in range(len(seg.blocks)):
            raw = store.block(seg, k)
            raw_total += len(raw)
            lz4_total += len(lz4.frame.compress(raw))
        zstd_total += len(data)
        assert len(blocks) >= len(seg.blocks)
    if use_dictionary and store.ops.exists(os.path.join(directory, "stream.zdict")):
        zstd_total += store.ops.size(os.path.join(directory, "stream.zdict"))
    store.close()
    return raw_total / zstd_total, raw_total / lz4_total


# --- driver ---------------------------------------------------------------------------------------


Measured = tuple[float, float, float]  # msgs/s, MB/s, CPU µs per message (all threads)


def repeat(times: int, measure: Callable[[], Measured]) -> tuple[Measured, Measured]:
    results = [measure() for _ in range(times)]
    best = max(results)
    median = (
        statistics.median(r[0] for r in results),
        statistics.median(r[1] for r in results),
        statistics.median(r[2] for r in results),
    )
    return best, median


def row(label: str, best: Measured, median: Measured) -> str:
    return (
        f"| {label} | {best[0]:,.0f} | {best[1]:,.1f} | {median[0]:,.0f} | {median[1]:,.1f} | {median[2]:.2f} "
        f"| {1e6 / median[2]:,.0f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir", default=None, help="scratch directory on the disk to measure (default: a temp dir)")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="store-bench-", dir=args.dir)
    counter = iter(range(1_000_000))

    def fresh() -> str:
        path = os.path.join(root, f"s{next(counter)}")
        return path

    try:
        print(f"native store speedups: {speedups.ENABLED}; zstd level {limits.STORE_ZSTD_LEVEL}, "
              f"block {limits.STORE_BLOCK_RAW_BYTES // 1024} KiB, segment {limits.STORE_SEGMENT_BYTES >> 20} MiB; "
              f"{os.cpu_count()} CPUs, load average at start {os.getloadavg()[0]:.1f}\n")
        fsyncs = [disk_fdatasync_rate(root, args.seconds) for _ in range(args.repeat)]
        seq_mb = [disk_sequential_mb_s(root) for _ in range(args.repeat)]
        print("| disk limit | best | median |\n|---|---|---|")
        print(f"| fdatasync of 4 KiB appends /s (serial) | {max(fsyncs):,.0f} | {statistics.median(fsyncs):,.0f} |")
        print(f"| sequential write MB/s (1 MiB writes + fdatasync) | {max(seq_mb):,.0f} | {statistics.median(seq_mb):,.0f} |")
        print("\n| store | msgs/s best | MB/s best | msgs/s median | MB/s median | CPU µs/msg median "
              "| msgs per CPU-second |\n|---|---|---|---|---|---|---|")
        modes: list[tuple[str, Callable[[str, int, float, int], Measured]]] = [
            ("sync always (group commit)", append_sync_always),
            ("sync always (group commit, background seal)",
             lambda d, p, s, b: append_sync_always(d, p, s, b, background_seal=True)),
            ("sync_interval 2m", append_sync_interval),
        ]
        for size in (128, 1024):
            for label, fn in modes:
                best, median = repeat(args.repeat, lambda: fn(fresh(), size, args.seconds, 1000))
                print(row(f"append {size} B, {label}", best, median))
        for size, count in ((128, 2_000_000), (1024, 400_000)):
            directory = fresh()
            fill(directory, size, count)
            best, median = repeat(args.repeat, lambda: sequential_read(directory, size))
            print(row(f"sequential read {size} B ({count:,} msgs)", best, median))
            best, median = repeat(args.repeat, lambda: random_read(directory, size, args.seconds))
            print(row(f"random read {size} B", best, median))
        print("\n| data | zstd level | zstd ratio | zstd + dictionary ratio | lz4 ratio | zstd / lz4 |")
        print("|---|---|---|---|---|---|")
        for name, payloads in (
            ("JSON events", json_events(60_000)),
            ("random bytes", random_payloads(40_000)),
            ("repetitive log lines", log_lines(80_000)),
        ):
            for level in (limits.STORE_ZSTD_LEVEL, 19):
                plain, lz4_ratio = compression_ratios(fresh(), payloads, use_dictionary=False, level=level)
                with_dict, _ = compression_ratios(fresh(), payloads, use_dictionary=True, level=level)
                top = max(plain, with_dict)
                print(f"| {name} | {level} | {plain:.2f} | {with_dict:.2f} | {lz4_ratio:.2f} | {top / lz4_ratio:.2f} |")
        print("\nRatios count everything on disk for zstd (headers, block headers, footer, record framing,"
              " dictionary) and only the lz4 frames for lz4, over the same raw record blocks.")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
