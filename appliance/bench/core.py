"""Core NATS client loops: publish, subscribe, request, reply.

Each loop runs in its own client process after the start signal and returns a ClientResult.
Publishing writes pre-built batches of about BENCH_WRITE_BATCH_BYTES; receiving reads into one
buffer and counts frames with `scan` (C when built), so Python costs per batch, not per message.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from appliance.bench import wire
from appliance.bench.conn import Connection
from appliance.bench.scan import (
    FLAG_OUT_ECHO,
    FLAG_STOP_ERROR,
    FLAG_STOP_STATUS,
    NATIVE,
    STOP_CLOSED,
    STOP_ERROR,
    STOP_OTHER,
    STOP_STATUS,
    _loadgen,
)
from appliance.bench.spec import ClientResult, ClientSpec
from appliance.bench.stats import LatencyRecorder
from appliance.errors import ClosedError
from appliance.limits import BENCH_WRITE_BATCH_BYTES

Progress = Callable[[int], None]
DRAIN_EVERY_BATCHES = 16  # publish batches between two non-blocking reads (PINGs, -ERR)
REPLY_POLL_S = 0.05  # how often an idle replier looks at its stop signal


def payload_of(size: int) -> bytes:
    return bytes(0x61 + i % 26 for i in range(size))


def note_error(result: ClientResult, text: str) -> None:
    result.errors += 1
    if not result.first_error:
        result.first_error = text


def run_pub(conn: Connection, spec: ClientSpec, progress: Progress) -> ClientResult:
    result = ClientResult(spec.role, spec.index)
    frame = wire.pub(spec.subject.encode(), payload_of(spec.size))
    per_batch = max(1, BENCH_WRITE_BATCH_BYTES // len(frame))
    batch = frame * per_batch
    start = time.perf_counter()
    sent = batches = 0
    while sent < spec.msgs:
        count = min(per_batch, spec.msgs - sent)
        conn.send(batch if count == per_batch else frame * count)
        sent += count
        batches += 1
        if batches % DRAIN_EVERY_BATCHES == 0:
            progress(sent)
            if conn.fill_nowait():
                conn.pump()
    conn.flush()
    result.elapsed_s = time.perf_counter() - start
    result.msgs, result.bytes = sent, sent * spec.size
    progress(sent)
    return result


def setup_sub(conn: Connection, spec: ClientSpec) -> None:
    conn.subscribe(spec.subject.encode())
    conn.flush()


def receive_count(conn: Connection, spec: ClientSpec, progress: Progress, result: ClientResult,
                  flags: int = 0, out: bytearray | None = None,
                  after_batch: Callable[[], None] | None = None) -> float:
    """Count data messages until spec.msgs arrived or the server went idle; returns time of the last.

    Replies the scan wrote to `out` are sent after every read; `after_batch` runs after every read
    that brought messages."""
    start = last = time.perf_counter()
    while result.msgs < spec.msgs:
        if not conn.fill():
            note_error(result, f"idle for {conn.timeout_s:g}s after {result.msgs} of {spec.msgs} messages")
            break
        msgs, _ = conn.pump(flags, out)
        if out:
            conn.send(out)
            out.clear()
        if msgs:
            result.msgs += msgs
            last = time.perf_counter()
            progress(result.msgs)
            if after_batch is not None:
                after_batch()
        conn.specials.clear()
    result.bytes = result.msgs * spec.size
    return last - start


def run_sub(conn: Connection, spec: ClientSpec, progress: Progress) -> ClientResult:
    result = ClientResult(spec.role, spec.index)
    result.elapsed_s = receive_count(conn, spec, progress, result)
    return result


def wait_one_reply(conn: Connection, result: ClientResult) -> bool:
    """Wait for the single reply of a synchronous operation; errors and statuses count as failures."""
    while True:
        msgs, _ = conn.pump(FLAG_STOP_ERROR | FLAG_STOP_STATUS)
        if msgs:
            return True
        if conn.specials:
            msg = conn.specials.pop(0)
            reason = f"status {msg.status} {msg.description}" if msg.status else msg.payload[:200].decode()
            note_error(result, reason)
            return False
        if not conn.fill():
            note_error(result, f"no reply within {conn.timeout_s:g}s")
            return False


def setup_reply(conn: Connection, spec: ClientSpec) -> None:
    conn.subscribe(spec.subject.encode(), queue=b"bench")
    conn.flush()


def run_reply(conn: Connection, spec: ClientSpec, progress: Progress, stopped: Callable[[], bool], *,
              native: bool = NATIVE) -> ClientResult:
    """Echo every request until `stopped()` (the requesters are done) or spec.msgs were served (if > 0)."""
    result = ClientResult(spec.role, spec.index)
    out = bytearray()
    start = last = time.perf_counter()
    while not stopped() and (spec.msgs == 0 or result.msgs < spec.msgs):
        limit = spec.msgs - result.msgs if spec.msgs else -1
        served = _serve_native(conn, out, limit) if native and _loadgen is not None else _serve_python(conn, out)
        if served:
            result.msgs += served
            last = time.perf_counter()
            progress(result.msgs)
    result.elapsed_s = last - start
    result.bytes = result.msgs * spec.size
    return result


def _serve_python(conn: Connection, out: bytearray) -> int:
    if not conn.fill(REPLY_POLL_S):
        return 0
    msgs, _ = conn.pump(FLAG_OUT_ECHO, out)
    if out:
        conn.send(out)
        out.clear()
    return msgs


def _serve_native(conn: Connection, out: bytearray, limit: int) -> int:
    """Answer requests in C until idle for REPLY_POLL_S, `limit` served, or a non-message is next."""
    assert _loadgen is not None
    answer: tuple[int, int, int, int] = _loadgen.serve_replies(
        conn.sock.fileno(), conn.buf, conn.start, conn.end, out, FLAG_OUT_ECHO, limit, int(REPLY_POLL_S * 1000))
    served, conn.start, conn.end, stop = answer
    if stop == STOP_CLOSED:
        raise ClosedError("server closed the connection")
    if stop in (STOP_OTHER, STOP_STATUS, STOP_ERROR):
        more, _ = conn.pump(FLAG_OUT_ECHO, out)  # a PING or the like: the full parser takes it
        if out:
            conn.send(out)
            out.clear()
        served += more
    return served


def keep_latencies(result: ClientResult, recorder: LatencyRecorder) -> None:
    result.latency_samples = recorder.samples
    result.latency_count = recorder.count
    result.latency_max_ns = recorder.max_ns
