"""Core NATS client loops: publish, subscribe, request, reply.

Each loop runs in its own client process after the start signal and returns a ClientResult.
Publishing writes pre-built batches of about BENCH_WRITE_BATCH_BYTES; receiving reads into one
buffer and counts frames with `scan`. With the C module built, the publisher's write loop and the
plain subscriber's read-and-count loop run entirely in C (`publish`, `receive_msgs`) and come
back to Python only for progress and for anything that is not a plain message.
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
    STOP_NEED_MORE,
    STOP_OTHER,
    STOP_STATUS,
    STOP_TIMEOUT,
    _loadgen,
)
from appliance.bench.spec import ClientResult, ClientSpec
from appliance.bench.stats import LatencyRecorder
from appliance.errors import BrokenError, ClosedError
from appliance.limits import BENCH_WRITE_BATCH_BYTES

Progress = Callable[[int], None]
DRAIN_EVERY_BATCHES = 16  # publish batches between two non-blocking reads (PINGs, -ERR)
PROGRESS_EVERY_MS = 50  # the C loops come back this often, so progress is drawn while they run
REPLY_POLL_S = 0.05  # how often an idle replier looks at its stop signal


def payload_of(size: int) -> bytes:
    return bytes(0x61 + i % 26 for i in range(size))


def note_error(result: ClientResult, text: str) -> None:
    result.errors += 1
    if not result.first_error:
        result.first_error = text


def run_pub(conn: Connection, spec: ClientSpec, progress: Progress, *, native: bool = NATIVE) -> ClientResult:
    """Publish spec.msgs frames in batches of about BENCH_WRITE_BATCH_BYTES, then flush (PING/PONG)."""
    result = ClientResult(spec.role, spec.index)
    frame = wire.pub(spec.subject.encode(), payload_of(spec.size))
    per_batch = max(1, BENCH_WRITE_BATCH_BYTES // len(frame))
    batch = frame * per_batch
    start = time.perf_counter()
    if native and _loadgen is not None:
        sent = _publish_native(conn, batch, len(frame), spec.msgs, progress)
    else:
        sent = _publish_python(conn, batch, frame, spec.msgs, progress)
    conn.flush()
    result.elapsed_s = time.perf_counter() - start
    result.msgs, result.bytes = sent, sent * spec.size
    progress(sent)
    return result


def _publish_python(conn: Connection, batch: bytes, frame: bytes, count: int, progress: Progress) -> int:
    per_batch = len(batch) // len(frame)
    sent = batches = 0
    while sent < count:
        frames = min(per_batch, count - sent)
        conn.send(batch if frames == per_batch else frame * frames)
        sent += frames
        batches += 1
        if batches % DRAIN_EVERY_BATCHES == 0:
            progress(sent)
            if conn.fill_nowait():
                conn.pump()
    return sent


def _publish_native(conn: Connection, batch: bytes, frame_bytes: int, count: int, progress: Progress) -> int:
    """The write loop in C; it comes back for progress and when the server sent something (a PING)."""
    assert _loadgen is not None
    sent = 0
    while sent < count:
        done, stop = _loadgen.publish(conn.sock.fileno(), batch, frame_bytes, count - sent,
                                      _millis(conn.timeout_s), PROGRESS_EVERY_MS)
        sent += done
        progress(sent)
        if stop == STOP_TIMEOUT:
            raise BrokenError("server did not read our data in time")
        if stop == STOP_CLOSED:
            raise ClosedError("server closed the connection")
        if stop == STOP_OTHER and conn.fill_nowait():
            conn.pump()  # answers a PING, raises BrokenError on -ERR
    return sent


def _millis(seconds: float) -> int:
    return max(1, int(seconds * 1000))


def setup_sub(conn: Connection, spec: ClientSpec) -> None:
    conn.subscribe(spec.subject.encode())
    conn.flush()


def receive_count(conn: Connection, spec: ClientSpec, progress: Progress, result: ClientResult,
                  flags: int = 0, out: bytearray | None = None,
                  after_batch: Callable[[], None] | None = None) -> float:
    """Count data messages until spec.msgs arrived or the server went idle; returns the measured
    seconds, timed as `nats bench` times a subscriber: from the first message to the last (the wait
    for the first one, e.g. a push consumer noticing its new subscriber, is not throughput).

    Replies the scan wrote to `out` are sent after every read; `after_batch` runs after every read
    that brought messages."""
    start_ns, first_ns, last_ns = monotonic_ns(), 0, 0
    while result.msgs < spec.msgs:
        if not conn.fill():
            note_error(result, idle_text(conn, result, spec))
            break
        msgs, _ = conn.pump(flags, out)
        if out:
            conn.send(out)
            out.clear()
        if msgs:
            result.msgs += msgs
            last_ns = monotonic_ns()
            first_ns = first_ns or last_ns
            progress(result.msgs)
            if after_batch is not None:
                after_batch()
        conn.specials.clear()
    result.bytes = result.msgs * spec.size
    result.ended_s = (last_ns or start_ns) / 1e9
    return measured_seconds(start_ns, first_ns, last_ns)


def idle_text(conn: Connection, result: ClientResult, spec: ClientSpec) -> str:
    return f"idle for {conn.timeout_s:g}s after {result.msgs} of {spec.msgs} messages"


def run_sub(conn: Connection, spec: ClientSpec, progress: Progress, *, native: bool = NATIVE) -> ClientResult:
    """Count spec.msgs messages; timed like `nats bench`: from the first message to the last.

    Waiting for the first message (publishers starting, or someone else publishing later) is not
    part of the measured time. Runs that see every message in a single read fall back to the time
    since the start."""
    result = ClientResult(spec.role, spec.index)
    if native and _loadgen is not None:
        start_ns, first_ns, last_ns = _receive_native(conn, spec, progress, result)
    else:
        start_ns, first_ns, last_ns = _receive_python(conn, spec, progress, result)
    result.bytes = result.msgs * spec.size
    result.elapsed_s = measured_seconds(start_ns, first_ns, last_ns)
    result.ended_s = (last_ns or start_ns) / 1e9
    return result


def monotonic_ns() -> int:
    """CLOCK_MONOTONIC: the clock the C loops read, and one clock for every client process."""
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def measured_seconds(start_ns: int, first_ns: int, last_ns: int) -> float:
    """A subscriber's measured time: first to last message, or start to last if they came together."""
    if first_ns == 0:
        return 0.0
    if last_ns > first_ns:
        return (last_ns - first_ns) / 1e9
    return max(0, last_ns - start_ns) / 1e9


def _receive_python(conn: Connection, spec: ClientSpec, progress: Progress,
                    result: ClientResult) -> tuple[int, int, int]:
    start_ns, first_ns, last_ns = monotonic_ns(), 0, 0
    while result.msgs < spec.msgs:
        if not conn.fill():
            note_error(result, idle_text(conn, result, spec))
            break
        read_ns = monotonic_ns()
        msgs, _ = conn.pump()
        if msgs:
            result.msgs += msgs
            first_ns = first_ns or read_ns
            last_ns = read_ns
            progress(result.msgs)
        conn.specials.clear()
    return start_ns, first_ns, last_ns


def _receive_native(conn: Connection, spec: ClientSpec, progress: Progress,
                    result: ClientResult) -> tuple[int, int, int]:
    """The read-and-count loop in C; Python runs every PROGRESS_EVERY_MS and for non-messages."""
    assert _loadgen is not None
    start_ns = monotonic_ns()
    first_ns = last_ns = 0
    while result.msgs < spec.msgs:
        msgs, _, conn.start, conn.end, stop, first, last = _loadgen.receive_msgs(
            conn.sock.fileno(), conn.buf, conn.start, conn.end, spec.msgs - result.msgs,
            _millis(conn.timeout_s), PROGRESS_EVERY_MS)
        if msgs:
            result.msgs += msgs
            first_ns = first_ns or first
            last_ns = last
            progress(result.msgs)
        if stop == STOP_TIMEOUT:
            note_error(result, idle_text(conn, result, spec))
            break
        if stop == STOP_CLOSED:
            raise ClosedError("server closed the connection")
        if stop != STOP_NEED_MORE:
            taken = conn.take_one()  # a PING, a lower-case `msg`: the full parser handles it
            if taken is None and not conn.fill():  # it needs more bytes than have arrived
                note_error(result, idle_text(conn, result, spec))
                break
            if taken:
                result.msgs += taken
                last_ns = monotonic_ns()
                first_ns = first_ns or last_ns
        conn.specials.clear()
    return start_ns, first_ns, last_ns


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
