"""Catch-up of new replicas, measured: bytes, seconds, MB/s, the peak RSS of every server process,
and the lag seen over time.

    python -m appliance.bench.catchup --gb 1

Theory of operation: a 3-node appliance cluster (servers.py, 127.0.0.1, temp dirs) gets an R1 file
stream, filled with `--gb` GiB of incompressible messages (os.urandom payloads of --msg-kib, so
neither the store's zstd nor the routes shrink them), published with PubAcks and at most
PUBLISH_WINDOW unacknowledged. Then STREAM.UPDATE sets num_replicas 3: the stream's server converts
it into a replicated group whose first entry is a snapshot of its store's position, and the two
joiners fetch every stored message from it (cluster/catch_up.py: one bounded batch in flight per
group). The clock runs from the update request until STREAM.INFO lists both joiners current and each
joiner's stream directory holds at least the stream's payload bytes (a lower bound of a complete
copy: records are payload plus framing and random bytes do not compress). The bytes on disk are the
joiners' progress in bytes; `cluster.replicas[].lag` counts RAFT entries, not messages. Each poll
also publishes one small message to the stream (PROBE_TIMEOUT_S): whether the stream took writes
while its replicas caught up.

A sampler thread reads the RSS of every process of every node (the supervisor and its workers,
psutil) every SAMPLE_S: the peak before the catch-up (start and fill) and during it are printed per
process. No assertion on any number: this is a measurement to report.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from appliance import limits
from appliance.bench import jsapi, replicas, wire
from appliance.bench.conn import Connection, Endpoint
from appliance.bench.servers import APPLIANCE, RunningServer, ServerStartFailed, start

STREAM = "benchcatchup"
SUBJECT = "bench.catchup"
SAMPLE_S = 0.1  # RSS sampling period
INFO_POLL_S = 0.5  # STREAM.INFO + store size during the catch-up
PUBLISH_WINDOW = 32  # unacknowledged publishes while filling
CATCHUP_TIMEOUT_S = 900.0  # the joiners current within this, or the run failed
PROBE_TIMEOUT_S = 1.0  # one small publish per poll during the catch-up: acknowledged within this?
PROGRESS_LOG_S = 5.0  # a progress line this often during the catch-up
LAG_ROWS = 8  # lag samples printed (evenly spread over the catch-up)
MIB = 1024 * 1024
Log = Callable[[str], None]


class CatchUpFailed(Exception):
    """The fill or the catch-up did not finish in time; says what was seen last."""


@dataclass(slots=True)
class LagSample:
    at_s: float  # since the STREAM.UPDATE request
    leader: str  # cluster.leader of the STREAM.INFO answer ("" for none)
    replicas: list[tuple[str, bool, int]]  # (name, current, lag) from STREAM.INFO
    joiner_bytes: dict[str, int]  # node name -> bytes under its store dir


@dataclass(slots=True)
class CatchUpResult:
    stream_bytes: int = 0  # payload bytes stored (messages x payload size)
    msgs: int = 0
    fill_s: float = 0.0
    catch_up_s: float = 0.0
    leader: str = ""
    joiners: list[str] = field(default_factory=list)
    rss_idle: dict[str, int] = field(default_factory=dict)  # process label -> peak bytes before the fill
    rss_fill: dict[str, int] = field(default_factory=dict)  # ... while filling (publishing)
    rss_during: dict[str, int] = field(default_factory=dict)  # ... from the update until caught up
    lag: list[LagSample] = field(default_factory=list)
    probes: list[tuple[float, float | None]] = field(default_factory=list)  # (at, PubAck seconds or None)
    info_errors: int = 0  # STREAM.INFO polls that timed out or answered an error during the catch-up

    def mb_per_s(self) -> float:
        return self.stream_bytes / MIB / self.catch_up_s if self.catch_up_s > 0 else 0.0


class RssSampler:
    """Peak RSS per process of the cluster, per phase, sampled on a thread every SAMPLE_S."""

    def __init__(self, server: RunningServer, period_s: float = SAMPLE_S) -> None:
        self.server = server
        self.period_s = period_s
        self.phase = "idle"
        self.peaks: dict[str, dict[str, int]] = {"idle": {}, "fill": {}, "during": {}}
        self.samples = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def switch(self, phase: str) -> None:
        with self._lock:
            self.sample_once()
            self.phase = phase

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            with self._lock:
                self.sample_once()

    def sample_once(self) -> None:
        peaks = self.peaks[self.phase]
        for label, rss in process_rss(self.server).items():
            peaks[label] = max(peaks.get(label, 0), rss)
        self.samples += 1


def process_rss(server: RunningServer) -> dict[str, int]:
    """label -> RSS bytes of every live process of every node: `n1 supervisor`, `n1 worker 1`, ...
    (workers numbered in pid order; a process gone between listing and reading is left out)."""
    out: dict[str, int] = {}
    for node in server.nodes:
        try:
            top = psutil.Process(node.proc.pid)
            children = sorted(top.children(recursive=True), key=lambda p: p.pid)
            out[f"{node.name} supervisor"] = top.memory_info().rss
        except psutil.Error:
            continue
        for number, child in enumerate(children, 1):
            try:
                out[f"{node.name} worker {number}"] = child.memory_info().rss
            except psutil.Error:
                pass
    return out


def dir_bytes(path: Path) -> int:
    """Bytes of the regular files under `path` (their sizes, not the blocks they use)."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name)).st_size
            except OSError:
                pass  # sealed and removed between listing and stat
    return total


def stream_dir(server: RunningServer, index: int) -> Path:
    """Where node `index` stores STREAM's messages (the global account's, as `appliance run` lays out)."""
    return server.workdir / f"store-n{index + 1}" / "jetstream" / "$G" / "streams" / STREAM


def fill(conn: Connection, total_bytes: int, msg_bytes: int, *, window: int = PUBLISH_WINDOW) -> int:
    """Publish ceil(total_bytes / msg_bytes) random payloads to SUBJECT with at most `window`
    without a PubAck; the count once every one is acknowledged (an error ack raises ApiError)."""
    count = max(1, -(-total_bytes // msg_bytes))
    conn.ensure_inbox()
    prefix = conn.inbox_prefix + b".p"
    sent = acked = 0
    while acked < count:
        while sent < count and sent - acked < window:
            sent += 1
            conn.send(wire.pub(SUBJECT.encode(), os.urandom(msg_bytes), prefix + b"%d" % sent))
        msg = conn.next_msg()
        if msg.subject.startswith(prefix):
            jsapi.parse_pub_ack(msg.payload)
            acked += 1
    return count


def leader_of(info: dict[str, object]) -> str:
    cluster = info.get("cluster")
    leader = cluster.get("leader") if isinstance(cluster, dict) else None
    return leader if isinstance(leader, str) else ""


def probe_publish(conn: Connection, timeout_s: float = PROBE_TIMEOUT_S) -> float | None:
    """Seconds until one small publish to the stream is acknowledged; None when it is refused or
    not acknowledged within timeout_s (a late PubAck is ignored: its reply subject is not waited on)."""
    started = time.monotonic()
    try:
        msg = conn.request(SUBJECT.encode(), b"probe", timeout_s)
        if msg.status is not None:
            return None
        jsapi.parse_pub_ack(msg.payload)
    except (TimeoutError, jsapi.ApiError):
        return None
    return time.monotonic() - started


def lag_of(info: dict[str, object]) -> list[tuple[str, bool, int]]:
    cluster = info.get("cluster")
    peers = cluster.get("replicas") if isinstance(cluster, dict) else None
    out = []
    for peer in peers if isinstance(peers, list) else []:
        if isinstance(peer, dict):
            lag = peer.get("lag", 0)
            out.append((str(peer.get("name", "?")), peer.get("current") is True, lag if isinstance(lag, int) else 0))
    return out


def run_catch_up(server: RunningServer, total_bytes: int, msg_bytes: int, *, log: Log = print,
                 timeout_s: float = CATCHUP_TIMEOUT_S) -> CatchUpResult:
    """Fill an R1 stream, raise it to R3 and time the joiners' catch-up (see the module doc)."""
    result = CatchUpResult()
    names = [node.name for node in server.nodes]
    setup = Connection(Endpoint.parse(server.url), name="bench-catchup-setup", timeout_s=30.0)
    try:
        jsapi.delete_stream(setup, STREAM)
        info = jsapi.create_stream(setup, jsapi.stream_config(STREAM, [SUBJECT], storage="file", replicas=1))
        group = replicas.group_of(info)
        leader_index = replicas.node_for(names, group, "leader")
    finally:
        setup.close()
    result.leader = names[leader_index]
    result.joiners = [name for name in names if name != result.leader]
    conn = Connection(Endpoint.parse(server.urls[leader_index]), name="bench-catchup", timeout_s=60.0)
    try:
        with RssSampler(server) as sampler:
            time.sleep(SAMPLE_S * 3)  # a few samples of the idle cluster
            sampler.switch("fill")
            log(f"filling {STREAM} on {result.leader}: {total_bytes / MIB:,.0f} MiB in "
                f"{msg_bytes // 1024} KiB messages")
            started = time.monotonic()
            result.msgs = fill(conn, total_bytes, msg_bytes)
            result.fill_s = time.monotonic() - started
            result.stream_bytes = result.msgs * msg_bytes
            info = jsapi.stream_info(conn, STREAM)
            leader_bytes = dir_bytes(stream_dir(server, leader_index))
            log(f"filled: {result.msgs:,} msgs in {result.fill_s:.1f}s; leader store {leader_bytes / MIB:,.0f} MiB "
                f"on disk; raising to R3")
            config = info.get("config")
            if not isinstance(config, dict):
                raise CatchUpFailed(f"STREAM.INFO without its config: {info!r:.200}")
            sampler.switch("during")
            started = time.monotonic()
            jsapi.until_available(lambda: jsapi.call(conn, f"$JS.API.STREAM.UPDATE.{STREAM}",
                                                     {**config, "num_replicas": 3}))  # idempotent
            _wait_caught_up(server, conn, result, started, timeout_s, log)
            result.catch_up_s = time.monotonic() - started
        result.rss_idle = sampler.peaks["idle"]
        result.rss_fill = sampler.peaks["fill"]
        result.rss_during = sampler.peaks["during"]
    finally:  # the stream stays: the caller stops the cluster (main removes its stores)
        conn.close()
    return result


def _wait_caught_up(server: RunningServer, conn: Connection, result: CatchUpResult, started: float,
                    timeout_s: float, log: Log) -> None:
    """Poll STREAM.INFO and the joiners' stream directories every INFO_POLL_S (module doc)."""
    joiner_index = {name: server.index_of(name) for name in result.joiners}
    last = "no answer"
    logged_at = -PROGRESS_LOG_S
    while True:
        at = time.monotonic() - started
        on_disk = {name: dir_bytes(stream_dir(server, index)) for name, index in joiner_index.items()
                   if index is not None}
        try:  # each refusal counted: not waited out as stream_info does
            info = jsapi.call(conn, f"$JS.API.STREAM.INFO.{STREAM}", None)
        except (jsapi.ApiError, TimeoutError) as exc:
            last = f"{type(exc).__name__}: {exc}"
            log(f"  {at:5.1f}s STREAM.INFO: {last}")
            result.info_errors += 1
        else:
            sample = LagSample(at, leader_of(info), lag_of(info), on_disk)
            if at >= logged_at + PROGRESS_LOG_S:
                logged_at = at
                log(f"  {at:5.1f}s " + _sample_text(sample))
            result.lag.append(sample)
            _, missing = replicas.health(info, 3)
            behind = [name for name, size in on_disk.items() if size < result.stream_bytes]
            if not missing and not behind:
                return
            last = missing or f"stores still filling: {', '.join(behind)}"
        result.probes.append((time.monotonic() - started, probe_publish(conn)))
        if at > timeout_s:
            raise CatchUpFailed(f"not caught up after {timeout_s:g}s: {last}")
        time.sleep(INFO_POLL_S)


def table(result: CatchUpResult) -> list[str]:
    lines = [
        f"stream: {result.msgs:,} msgs, {result.stream_bytes / MIB:,.0f} MiB (leader {result.leader}, "
        f"joiners {', '.join(result.joiners)}); filled in {result.fill_s:.1f}s",
        f"catch-up: {result.catch_up_s:.1f}s for both joiners, {result.mb_per_s():.1f} MiB/s "
        f"({2 * result.mb_per_s():.1f} MiB/s copied); STREAM.INFO failed {result.info_errors} times meanwhile",
        "",
        f"RSS bound stated for a catch-up (limits.JS_CATCHUP_RSS_BYTES_BOUND): "
        f"{limits.JS_CATCHUP_RSS_BYTES_BOUND / MIB:,.0f} MiB per process; peak during the catch-up: "
        f"{_mib(max(result.rss_during.values(), default=None))} MiB ({_verdict(result)})",
        "",
        "| process | peak RSS idle (MiB) | peak RSS filling (MiB) | peak RSS during catch-up (MiB) "
        "| rise over idle (MiB) |",
        "|---|---:|---:|---:|---:|",
    ]
    for label in sorted(set(result.rss_idle) | set(result.rss_fill) | set(result.rss_during)):
        idle, filling, during = (r.get(label) for r in (result.rss_idle, result.rss_fill, result.rss_during))
        rise = during - idle if during is not None and idle is not None else None
        lines.append(f"| {label} | {_mib(idle)} | {_mib(filling)} | {_mib(during)} | {_mib(rise)} |")
    lines.append(f"(a joiner's rise is expected within limits.JS_CATCHUP_RSS_RISE_BYTES = "
                 f"{limits.JS_CATCHUP_RSS_RISE_BYTES / MIB:,.0f} MiB; the leader's includes what the fill left)")
    acked = [latency for _, latency in result.probes if latency is not None]
    refused = [at for at, latency in result.probes if latency is None]
    gap = f"; not acknowledged from {refused[0]:.1f}s to {refused[-1]:.1f}s" if refused else ""
    slowest = f"; slowest PubAck {max(acked):.2f}s" if acked else ""
    lines += ["", f"publishes during the catch-up (one per poll, {PROBE_TIMEOUT_S:g}s timeout): "
              f"{len(acked)} of {len(result.probes)} acknowledged{gap}{slowest}",
              f"publishes refused for {refused_s(result.probes):.1f}s in all (from each refused probe's "
              f"send to the next acknowledged one's)"]
    lines += ["", "| t (s) | leader | replicas (current, lag) | joiner stores on disk (MiB) |", "|---:|---|---|---|"]
    for sample in _spread(result.lag, LAG_ROWS):
        peers, disk = _sample_cells(sample)
        lines.append(f"| {sample.at_s:.1f} | {sample.leader or '(none)'} | {peers} | {disk} |")
    return lines


def refused_s(probes: list[tuple[float, float | None]]) -> float:
    """Seconds during which the stream refused publishes: each run of refused probes counts from
    its first probe's send to the send of the next acknowledged probe (or the last probe)."""
    total, since = 0.0, None
    for sent, latency in probes:  # (when the probe was sent, its PubAck's seconds or None)
        if latency is None and since is None:
            since = sent
        elif latency is not None and since is not None:
            total, since = total + sent - since, None
    if since is not None:
        total += probes[-1][0] + PROBE_TIMEOUT_S - since
    return total


def _sample_cells(sample: LagSample) -> tuple[str, str]:
    peers = ", ".join(f"{name} {'current' if current else 'behind'} lag {lag}"
                      for name, current, lag in sample.replicas) or "(none listed)"
    disk = ", ".join(f"{name} {size / MIB:,.0f}" for name, size in sorted(sample.joiner_bytes.items()))
    return peers, disk


def _sample_text(sample: LagSample) -> str:
    peers, disk = _sample_cells(sample)
    return f"leader {sample.leader or '(none)'}; replicas: {peers}; joiner stores (MiB): {disk}"


def _verdict(result: CatchUpResult) -> str:
    over = sorted(label for label, rss in result.rss_during.items() if rss > limits.JS_CATCHUP_RSS_BYTES_BOUND)
    return f"OVER the bound: {', '.join(over)}" if over else "every process within the bound"


def _mib(value: int | None) -> str:
    return "–" if value is None else f"{value / MIB:,.0f}"


def _spread(samples: list[LagSample], rows: int) -> list[LagSample]:
    if len(samples) <= rows:
        return samples
    step = (len(samples) - 1) / (rows - 1)
    return [samples[round(i * step)] for i in range(rows)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m appliance.bench.catchup", description=__doc__.split("\n")[0])
    parser.add_argument("--gb", type=float, default=1.0, help="stream size in GiB (e.g. 0.25)")
    parser.add_argument("--mb", type=float, default=0.0, help="stream size in MiB (overrides --gb)")
    parser.add_argument("--msg-kib", type=int, default=256, help="payload of one message in KiB (<= 1024)")
    parser.add_argument("--timeout", type=float, default=CATCHUP_TIMEOUT_S, help="catch-up deadline in seconds")
    parser.add_argument("--keep", action="store_true", help="keep the nodes' stores and logs (path printed)")
    args = parser.parse_args(argv)
    total = int((args.mb or args.gb * 1024) * MIB)
    msg_bytes = args.msg_kib * 1024
    if total <= 0 or not 0 < msg_bytes <= MIB:
        parser.error("the stream size must be > 0 and --msg-kib in 1..1024")
    try:
        server = start(APPLIANCE, nodes=3)
    except ServerStartFailed as exc:
        print(f"cluster did not start: {exc}", file=sys.stderr)
        return 2
    try:
        result = run_catch_up(server, total, msg_bytes, log=lambda line: print(line, flush=True),
                              timeout_s=args.timeout)
    except (CatchUpFailed, replicas.NotHealthy, jsapi.ApiError, OSError, TimeoutError) as exc:
        print(f"catch-up failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    finally:
        if args.keep:
            server.stop_nodes()
            print(f"stores and logs kept in {server.workdir}", file=sys.stderr)
        else:
            server.stop()
    print("\n".join(table(result)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
