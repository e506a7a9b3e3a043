"""Synchronous request loops (one outstanding request): core request/reply and JetStream sync
publish. The C loop `sync_requests` does send, wait, parse and time in one call per chunk of
requests; Python takes over only for what is not a plain reply (PING, -ERR, a status or error
reply). Without the C module the same loop runs in Python, op by op.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from appliance.bench import wire
from appliance.bench.conn import Connection
from appliance.bench.core import Progress, keep_latencies, note_error, payload_of, wait_one_reply
from appliance.bench.scan import (
    NATIVE,
    STOP_CLOSED,
    STOP_ERROR,
    STOP_NEED_MORE,
    STOP_STATUS,
    STOP_TIMEOUT,
    _loadgen,
)
from appliance.bench.spec import ClientResult, ClientSpec
from appliance.bench.stats import LatencyRecorder
from appliance.errors import ClosedError

CHUNK_OPS = 1024  # requests per C call: progress and signals are looked at between chunks


FrameSource = bytes | Callable[[int], bytes]


def run_sync(conn: Connection, spec: ClientSpec, progress: Progress, frames: FrameSource, *,
             native: bool = NATIVE) -> ClientResult:
    """Send spec.msgs requests, each after the previous one's reply; latency per request.

    `frames` is one frame sent every time, or a function of the request number (one C call each).
    """
    result = ClientResult(spec.role, spec.index)
    recorder = LatencyRecorder(spec.msgs)
    conn.ensure_inbox()
    conn.flush()
    start = time.perf_counter()
    if native and _loadgen is not None:
        _native_loop(conn, spec.msgs, frames, result, recorder, progress)
    else:
        _python_loop(conn, spec.msgs, frames, result, recorder, progress)
    result.elapsed_s = time.perf_counter() - start
    result.bytes = result.msgs * spec.size
    keep_latencies(result, recorder)
    return result


def _python_loop(conn: Connection, count: int, frames: FrameSource, result: ClientResult,
                 recorder: LatencyRecorder, progress: Progress) -> None:
    for done in range(count):
        frame = frames if isinstance(frames, bytes) else frames(done)
        sent_ns = time.perf_counter_ns()
        conn.send(frame)
        if wait_one_reply(conn, result):
            recorder.record(time.perf_counter_ns() - sent_ns)
            result.msgs += 1
        if done % CHUNK_OPS == 0:
            progress(done)


def _native_loop(conn: Connection, count: int, frames: FrameSource, result: ClientResult,
                 recorder: LatencyRecorder, progress: Progress) -> None:
    assert _loadgen is not None
    latencies = np.zeros(CHUNK_OPS, dtype=np.int64)
    awaiting, sent_ns, finished = 0, 0, 0
    timeout_ms = int(conn.timeout_s * 1000)
    fd = conn.sock.fileno()
    while finished < count:
        if isinstance(frames, bytes):
            frame, chunk = frames, min(CHUNK_OPS, count - finished)
        else:
            frame, chunk = frames(finished), 1
        done, conn.start, conn.end, stop, awaiting, sent_ns = _loadgen.sync_requests(
            fd, frame, chunk, conn.buf, conn.start, conn.end, latencies, awaiting, sent_ns, timeout_ms)
        recorder.record_many(latencies[:done])
        result.msgs += done
        finished += done
        if finished % CHUNK_OPS < done or done == CHUNK_OPS:
            progress(finished)
        if stop == STOP_NEED_MORE:
            continue
        if stop == STOP_TIMEOUT:
            note_error(result, f"no reply within {conn.timeout_s:g}s")
            return
        if stop == STOP_CLOSED:
            raise ClosedError("server closed the connection")
        event, after = wire.parse_one(conn.buf, conn.start, conn.end)
        assert event is not None, "scan stops at complete operations only"
        conn.start = after
        if not isinstance(event, wire.Msg):
            conn.handle(event)
            continue
        awaiting = 0
        finished += 1
        if stop in (STOP_STATUS, STOP_ERROR):
            reason = f"status {event.status} {event.description}" if event.status else event.payload[:200].decode()
            note_error(result, reason)
        else:  # a data reply only the full parser understood (e.g. a lower-case `msg`)
            recorder.record(time.monotonic_ns() - sent_ns)
            result.msgs += 1


def run_request(conn: Connection, spec: ClientSpec, progress: Progress) -> ClientResult:
    frame = wire.pub(spec.subject.encode(), payload_of(spec.size), conn.inbox_prefix + b".r")
    return run_sync(conn, spec, progress, frame)
