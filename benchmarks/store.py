"""Segment store benchmark: append, read and compression, next to this disk's own limits.

    .venv/bin/python benchmarks/store.py [--dir DIR] [--seconds S] [--repeat N]
        [--only disk|fsync|append|read|compression]

Prints a Markdown table. Every row is measured `--repeat` times and the best and median are
shown (the machine is shared: report ratios, not single numbers). Durability is never skipped:
"sync always" counts a message only once an fsync that started after its write has returned
(group commit through GroupCommitter, the fsync on a helper thread while the next batch is
encoded), exactly what a PubAck waits for.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import json
import os
import random
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import lz4.frame  # type: ignore[import-untyped]
import zstandard

from appliance import limits
from appliance.store import segment, speedups
from appliance.store.commit import GroupCommitter
from appliance.store.fileops import OsFileOps
from appliance.store.filestore import FileStoreConfig, FileStreamStore
from appliance.store.layout import SealedSegment, SyncJob
from appliance.store.sealer import BackgroundSealer

T0 = 1_700_000_000_000_000_000
# (payload bytes, sealed by the sealer thread, seals at the fast level, rolls sealed inline)
SEAL_NOTES: list[tuple[int, int, int, int]] = []


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

    With background_seal, full segments are compressed by a BackgroundSealer (its own thread),
    whose completions this loop runs, as a worker's asyncio loop would; else inline on append.
    """
    posted: collections.deque[Callable[[], None]] = collections.deque()
    sealer = BackgroundSealer(posted.append) if background_seal else None
    store = FileStreamStore(FileStoreConfig(directory, sync_always=True), sealer=sealer)
    committer = GroupCommitter(store, sync_always=True)
    make = batches(payload_bytes, batch_msgs)
    durable = 0
    in_flight: tuple[concurrent.futures.Future[None], SyncJob] | None = None
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        start = time.perf_counter()
        cpu_start = time.process_time()
        n = 0
        while time.perf_counter() - start < seconds:
            committer.submit(make(n))
            n += batch_msgs
            while posted:
                posted.popleft()()
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
        cpu = time.process_time() - cpu_start
    if sealer is not None:
        SEAL_NOTES.append((payload_bytes, sealer.sealed, store.fast_seals, store.backpressure_seals))
        sealer.close()
    store.close()
    rate = durable / elapsed
    return rate, rate * payload_bytes / 1e6, cpu / durable * 1e6


def append_sync_interval(
    directory: str, payload_bytes: int, seconds: float, batch_msgs: int, *, background_seal: bool = False
) -> tuple[float, float, float]:
    """sync_interval 2m: writes complete when handed to the OS (nats-server's default)."""
    posted: collections.deque[Callable[[], None]] = collections.deque()
    sealer = BackgroundSealer(posted.append) if background_seal else None
    store = FileStreamStore(FileStoreConfig(directory, sync_always=False), sealer=sealer)
    committer = GroupCommitter(store, sync_always=False, sync_interval_s=120.0, now_s=time.monotonic())
    make = batches(payload_bytes, batch_msgs)
    start = time.perf_counter()
    cpu_start = time.process_time()
    n = 0
    while time.perf_counter() - start < seconds:
        committer.submit(make(n))
        n += batch_msgs
        while posted:
            posted.popleft()()
        job = committer.next_job(time.monotonic())
        if job is not None:
            job.run()
            committer.complete(job)
    elapsed = time.perf_counter() - start
    cpu = time.process_time() - cpu_start
    if sealer is not None:
        SEAL_NOTES.append((payload_bytes, sealer.sealed, store.fast_seals, store.backpressure_seals))
        sealer.close()
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


def sequential_load(directory: str, payload_bytes: int, seconds: float) -> tuple[float, float, float]:
    """load(seq) for seq = 1, 2, ... (a consumer's path): each block is decoded once, then cached."""
    store = FileStreamStore(FileStoreConfig(directory))
    last = store.state().last_seq
    count = 0
    start = time.perf_counter()
    cpu_start = time.process_time()
    load = store.load
    while time.perf_counter() - start < seconds and count < last:
        for seq in range(count + 1, min(count + 1000, last) + 1):
            load(seq)
        count = min(count + 1000, last)
    elapsed = time.perf_counter() - start
    cpu = time.process_time() - cpu_start
    store.close()
    return count / elapsed, count * payload_bytes / elapsed / 1e6, cpu / count * 1e6


def random_read(directory: str, payload_bytes: int, seconds: float, span: int = 0) -> tuple[float, float, float]:
    """Loads of uniformly random sequences among the first `span` (0: the whole stream)."""
    store = FileStreamStore(FileStoreConfig(directory))
    rng = random.Random(7)
    last = span or store.state().last_seq
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


def json_events_nested(n: int) -> list[bytes]:
    """Events as analytics pipelines emit them: a UUID per event, sessions of ~20 events sharing
    user, IP, geo and client context (500 sessions open at a time, new ones keep starting),
    millisecond timestamps, nested objects and event-type-specific properties (cart items,
    order ids, click coordinates, search terms)."""
    rng = random.Random(3)
    pages = ["/", "/products", "/products/%d", "/cart", "/checkout", "/search", "/account/orders", "/blog/%s"]
    browsers = [("Firefox", "131.0"), ("Chrome", "130.0.6723.91"), ("Safari", "18.1"), ("Edge", "130.0.2849.68")]
    systems = [("Linux", "x86_64"), ("macOS", "15.1"), ("Windows", "11"), ("iOS", "18.1"), ("Android", "15")]
    cities = {"DE": ["Berlin", "Munich", "Hamburg"], "FR": ["Paris", "Lyon"], "US": ["New York", "Austin", "Seattle"],
              "GB": ["London", "Leeds"], "NL": ["Amsterdam", "Utrecht"], "SE": ["Stockholm"]}
    terms = ["shoes", "laptop", "coffee", "tent", "running shoes", "usb-c cable", "desk lamp", "rain jacket"]
    sessions: list[dict[str, object]] = []
    out = []
    t_ms = 1_763_686_800_000
    for _ in range(n):
        t_ms += rng.randint(0, 40)
        if not sessions or rng.random() < 0.05:
            country = rng.choice(list(cities))
            sessions.append({
                "id": str(uuid.UUID(int=rng.getrandbits(128), version=4)), "user": f"u-{rng.randint(1, 200000):07d}",
                "geo": {"country": country, "city": rng.choice(cities[country])},
                "browser": rng.choice(browsers), "os": rng.choice(systems),
                "ip": f"{rng.randint(1, 223)}.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}",
            })
            sessions = sessions[-500:]
        s = rng.choice(sessions)
        kind = rng.choices(["page_view", "click", "add_to_cart", "purchase", "search"], [50, 25, 10, 3, 12])[0]
        page = rng.choice(pages)
        if "%d" in page:
            page = page % rng.randint(1, 50000)
        elif "%s" in page:
            page = page % rng.choice(terms).replace(" ", "-")
        props: dict[str, object]
        if kind == "click":
            props = {"element": rng.choice(["button", "link", "image"]), "target_id": f"el-{rng.getrandbits(24):06x}",
                     "x": rng.randint(0, 1920), "y": rng.randint(0, 1080)}
        elif kind in ("add_to_cart", "purchase"):
            items = [{"sku": f"SKU-{rng.randint(10000, 99999)}", "qty": rng.randint(1, 3),
                      "price_cents": rng.randint(199, 49999)} for _ in range(rng.randint(1, 3))]
            props = {"items": items, "currency": rng.choice(["EUR", "USD", "GBP"]),
                     "total_cents": sum(int(it["qty"]) * int(it["price_cents"]) for it in items)}
            if kind == "purchase":
                props["order_id"] = f"ord_{rng.getrandbits(48):012x}"
        elif kind == "search":
            props = {"query": rng.choice(terms), "results": rng.randint(0, 500)}
        else:
            props = {"referrer": rng.choice(["", "https://www.google.com/", "https://news.ycombinator.com/"]),
                     "load_ms": rng.randint(80, 3000)}
        browser, system = s["browser"], s["os"]
        assert isinstance(browser, tuple) and isinstance(system, tuple)
        event = {
            "event_id": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t_ms // 1000)) + f".{t_ms % 1000:03d}Z",
            "type": kind, "user_id": s["user"], "session_id": s["id"],
            "page": {"path": page, "title": page.strip("/").split("/")[0].title() or "Home"},
            "context": {"ip": s["ip"], "geo": s["geo"], "browser": {"name": browser[0], "version": browser[1]},
                        "os": {"name": system[0], "version": system[1]}},
            "properties": props,
        }
        out.append(json.dumps(event, separators=(",", ":")).encode())
    return out


@dataclass
class Compression:
    ratio: float  # raw record bytes / every byte on disk (headers, footer, dictionary included)
    zstd_mb_s: float  # compress, MB of raw per second, one thread
    unzstd_mb_s: float
    seal_mb_s: float  # SealJob.run (read, plan, compress, write + fsync the file) over raw segment bytes, wall
    seal_cpu_mb_s: float  # the same per CPU-second of the sealing thread
    lz4_ratio: float  # same raw blocks, lz4 frames only
    lz4_mb_s: float
    unlz4_mb_s: float


def compression(
    directory: str, payloads: list[bytes], *, use_dictionary: bool, block_bytes: int, level: int
) -> Compression:
    """Seal the payloads as the store does, then time both codecs over the very same raw blocks."""
    config = FileStoreConfig(
        directory, sync_always=False, use_dictionary=use_dictionary, zstd_level=level, block_raw_bytes=block_bytes,
        seal_inline=False,
    )
    store = FileStreamStore(config)
    seal_raw = 0
    seal_s = seal_cpu_s = 0.0
    for i in range(0, len(payloads), 1000):
        store.append_batch([("events", b"", p, T0 + i + k) for k, p in enumerate(payloads[i : i + 1000])])
        while (job := store.begin_seal()) is not None:  # each segment as it closes: no backlog
            start, cpu_start = time.perf_counter(), time.thread_time()
            job.run()
            seal_s += time.perf_counter() - start
            seal_cpu_s += time.thread_time() - cpu_start
            seal_raw += job.raw_bytes
            store.finish_seal(job)
    assert store.fast_seals == 0
    sealed = [s for s in store.segments() if isinstance(s, SealedSegment)]
    assert sealed, "not enough data to seal a segment"
    raws = [store.block(seg, k) for seg in sealed for k in range(len(seg.blocks))]
    raw_total = sum(len(r) for r in raws)
    disk_total = sum(store.ops.size(seg.path) for seg in sealed)
    dict_path = os.path.join(directory, "stream.zdict")
    zdict = None
    if use_dictionary and store.ops.exists(dict_path):
        disk_total += store.ops.size(dict_path)
        zdict = zstandard.ZstdCompressionDict(store.ops.read_all(dict_path))
    store.close()
    compressor = zstandard.ZstdCompressor(level=level, dict_data=zdict, write_content_size=True, write_dict_id=False)
    decompressor = zstandard.ZstdDecompressor(dict_data=zdict) if zdict else zstandard.ZstdDecompressor()
    zstd_s, zstd_frames = timed(lambda: [compressor.compress(r) for r in raws])
    unzstd_s, _ = timed(lambda: [decompressor.decompress(f) for f in zstd_frames])
    lz4_s, lz4_frames = timed(lambda: [lz4.frame.compress(r) for r in raws])
    unlz4_s, _ = timed(lambda: [lz4.frame.decompress(f) for f in lz4_frames])
    lz4_total = sum(len(f) for f in lz4_frames)
    mb = raw_total / 1e6
    return Compression(
        raw_total / disk_total, mb / zstd_s, mb / unzstd_s, seal_raw / 1e6 / seal_s, seal_raw / 1e6 / seal_cpu_s,
        raw_total / lz4_total, mb / lz4_s, mb / unlz4_s,
    )


def timed(fn: Callable[[], list[bytes]]) -> tuple[float, list[bytes]]:
    """CPU seconds of this thread (the machine is shared: wall time would measure the neighbours)."""
    start = time.thread_time()
    out = fn()
    return time.thread_time() - start, out


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
    parser.add_argument(
        "--only", choices=("disk", "fsync", "append", "read", "compression"), action="append",
        help="run only these sections (repeatable; default: all)",
    )
    args = parser.parse_args()
    sections = set(args.only or ("disk", "fsync", "append", "read", "compression"))
    root = tempfile.mkdtemp(prefix="store-bench-", dir=args.dir)
    counter = iter(range(1_000_000))

    def fresh() -> str:
        path = os.path.join(root, f"s{next(counter)}")
        return path

    try:
        print(f"native store speedups: {speedups.ENABLED}; seal zstd level {limits.STORE_SEAL_ZSTD_LEVEL}, "
              f"block {limits.STORE_BLOCK_RAW_BYTES // 1024} KiB, segment {limits.STORE_SEGMENT_BYTES >> 20} MiB; "
              f"{os.cpu_count()} CPUs, load average at start {os.getloadavg()[0]:.1f}\n")
        if "disk" in sections:
            disk_limits(root, args.seconds, args.repeat)
        if "fsync" in sections:
            lone_fsyncs(fresh, args.repeat)
        if "append" in sections:
            appends(fresh, args.seconds, args.repeat)
        if "read" in sections:
            reads(fresh, args.seconds, args.repeat)
        if "compression" in sections:
            compression_table(fresh)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def disk_limits(root: str, seconds: float, times: int) -> None:
    fsyncs = [disk_fdatasync_rate(root, seconds) for _ in range(times)]
    seq_mb = [disk_sequential_mb_s(root) for _ in range(times)]
    print("| disk limit | best | median |\n|---|---|---|")
    print(f"| fdatasync of 4 KiB appends /s (serial) | {max(fsyncs):,.0f} | {statistics.median(fsyncs):,.0f} |")
    print(f"| sequential write MB/s (1 MiB writes + fdatasync) | {max(seq_mb):,.0f} | {statistics.median(seq_mb):,.0f} |")


LONE_SYNCS = 400  # one-message appends each made durable, per measurement


def lone_store_syncs(directory: str, *, preallocate: bool) -> tuple[float, float, float]:
    """A sync publisher's store work: one 128 B message appended, then FileStreamStore.sync()
    (fdatasync), LONE_SYNCS times. Returns latency p10 and p50 µs and CPU µs per message."""
    ops = OsFileOps(preallocate_bytes=limits.STORE_PREALLOCATE_BYTES if preallocate else 0)
    store = FileStreamStore(FileStoreConfig(directory, sync_always=False), ops=ops)
    payload = b"p" * 128
    samples = []
    cpu_start = time.process_time()
    try:
        for i in range(LONE_SYNCS):
            start = time.perf_counter_ns()
            store.append_batch([("lone.sync", b"", payload, i)])
            store.sync()
            samples.append(time.perf_counter_ns() - start)
        cpu_us = (time.process_time() - cpu_start) * 1e6 / LONE_SYNCS
    finally:
        store.close()
    samples.sort()
    return samples[len(samples) // 10] / 1000, samples[len(samples) // 2] / 1000, cpu_us


def lone_fsyncs(fresh: Callable[[], str], times: int) -> None:
    """The sync publish path's fsync with and without preallocated segments, alternating."""
    rows: dict[bool, list[tuple[float, float, float]]] = {True: [], False: []}
    for _ in range(times):
        for preallocate in (False, True):
            rows[preallocate].append(lone_store_syncs(fresh(), preallocate=preallocate))
    print("\n| one 128 B message + sync (a sync publish's store work) | p10 µs | p50 µs | CPU µs/msg |"
          "\n|---|---|---|---|")
    for preallocate, label in ((False, "plain appends"), (True, "preallocated segment (default)")):
        got = rows[preallocate]
        p10, p50, cpu = (statistics.median(r[k] for r in got) for k in range(3))
        print(f"| {label} | {p10:,.0f} | {p50:,.0f} | {cpu:,.0f} |")


def appends(fresh: Callable[[], str], seconds: float, times: int) -> None:
    print("\n| store | msgs/s best | MB/s best | msgs/s median | MB/s median | CPU µs/msg median "
          "| msgs per CPU-second |\n|---|---|---|---|---|---|---|")
    modes: list[tuple[str, Callable[[str, int, float, int], Measured]]] = [
        ("sync always (group commit)", append_sync_always),
        ("sync always (group commit, background seal)",
         lambda d, p, s, b: append_sync_always(d, p, s, b, background_seal=True)),
        ("sync_interval 2m", append_sync_interval),
        ("sync_interval 2m, background seal",
         lambda d, p, s, b: append_sync_interval(d, p, s, b, background_seal=True)),
    ]
    for size in (128, 1024):
        for label, fn in modes:
            best, median = repeat(times, lambda: fn(fresh(), size, seconds, 1000))
            print(row(f"append {size} B, {label}", best, median))
    for size in (128, 1024):
        background = sum(n[1] for n in SEAL_NOTES if n[0] == size)
        fast = sum(n[2] for n in SEAL_NOTES if n[0] == size)
        inline = sum(n[3] for n in SEAL_NOTES if n[0] == size)
        print(f"\nbackground-seal runs, {size} B: {background} segments sealed by the sealer thread, {fast} seals "
              f"at the fast level {limits.STORE_SEAL_FAST_ZSTD_LEVEL} (backlog), {inline} rolls sealed inline by "
              f"backpressure (backlog > {limits.STORE_UNSEALED_SEGMENTS_MAX})")


def reads(fresh: Callable[[], str], seconds: float, times: int) -> None:
    print("\n| store | msgs/s best | MB/s best | msgs/s median | MB/s median | CPU µs/msg median "
          "| msgs per CPU-second |\n|---|---|---|---|---|---|---|")
    cache_mib = limits.STORE_BLOCK_CACHE_BYTES >> 20
    for size, count in ((128, 2_000_000), (1024, 400_000)):
        directory = fresh()
        fill(directory, size, count)
        best, median = repeat(times, lambda: sequential_read(directory, size))
        print(row(f"sequential read {size} B ({count:,} msgs)", best, median))
        best, median = repeat(times, lambda: sequential_load(directory, size, seconds))
        print(row(f"sequential load(seq) {size} B (consumer path)", best, median))
        record = size + 35 + len("bench.orders.created")
        inside = (limits.STORE_BLOCK_CACHE_BYTES // 2) // record
        best, median = repeat(times, lambda: random_read(directory, size, seconds, inside))
        print(row(f"random read {size} B, working set {inside * record >> 20} MiB < cache {cache_mib} MiB", best, median))
        best, median = repeat(times, lambda: random_read(directory, size, seconds))
        print(row(f"random read {size} B, working set {count * record >> 20} MiB > cache {cache_mib} MiB", best, median))


def compression_table(fresh: Callable[[], str]) -> None:
    print("\n| data | block | level | zstd ratio | zstd + dict ratio | lz4 ratio | zstd / lz4 | zstd+dict / lz4 "
          "| zstd MB/CPU-s c / d | seal MB/s wall / CPU | lz4 MB/CPU-s c / d |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, payloads in (
        ("JSON events, nested (sessions, UUIDs)", json_events_nested(60_000)),
        ("JSON events, flat (first generator)", json_events(60_000)),
        ("random bytes", random_payloads(40_000)),
        ("repetitive log lines", log_lines(80_000)),
    ):
        for block_bytes, level in (
            (128 << 10, 3),
            (limits.STORE_BLOCK_RAW_BYTES, limits.STORE_SEAL_FAST_ZSTD_LEVEL),
            (limits.STORE_BLOCK_RAW_BYTES, limits.STORE_SEAL_ZSTD_LEVEL),
        ):
            plain = compression(fresh(), payloads, use_dictionary=False, block_bytes=block_bytes, level=level)
            with_dict = compression(fresh(), payloads, use_dictionary=True, block_bytes=block_bytes, level=level)
            print(
                f"| {name} | {block_bytes >> 10} KiB | {level} | {plain.ratio:.2f} | {with_dict.ratio:.2f} "
                f"| {plain.lz4_ratio:.2f} | {plain.ratio / plain.lz4_ratio:.2f} "
                f"| {with_dict.ratio / plain.lz4_ratio:.2f} | {plain.zstd_mb_s:,.0f} / {plain.unzstd_mb_s:,.0f} "
                f"| {plain.seal_mb_s:,.0f} / {plain.seal_cpu_mb_s:,.0f} | {plain.lz4_mb_s:,.0f} / {plain.unlz4_mb_s:,.0f} |"
            )
    print("\nzstd ratios count every byte on disk (segment header, block headers, footer index, trailer,"
          " dictionary file); lz4 counts only its frames, over the same raw record blocks. Codec speeds are MB"
          " of raw bytes per CPU-second of one thread; seal MB/s is SealJob.run (read, check, plan, compress,"
          " write and fsync the sealed file), wall clock and per CPU-second.")


if __name__ == "__main__":
    main()
