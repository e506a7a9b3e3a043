"""JetStream client loops: publish (sync, or async with a window of outstanding acks), pull
fetch (ack explicit / all / none), push consume, KV put and KV get.

All of them speak the standard API over the raw connection, so they run against any server.
Asynchronous publishing relies on one stream's acks coming back in publish order (they do: a
stream stores a single publisher's messages in order and acks each as stored), which lets a
ring of send times give every message its ack latency.
"""

from __future__ import annotations

import time

import numpy as np

from appliance.bench import jsapi, wire
from appliance.bench.conn import Connection
from appliance.bench.core import Progress, keep_latencies, note_error, payload_of, receive_count
from appliance.bench.scan import FLAG_OUT_ACK, FLAG_STOP_ERROR, FLAG_STOP_STATUS
from appliance.bench.spec import ClientResult, ClientSpec
from appliance.bench.stats import LatencyRecorder
from appliance.bench.sync import run_sync
from appliance.limits import BENCH_ASYNC_WINDOW_MAX, BENCH_FETCH_BATCH_MAX

PULL_EXPIRES_NS = 5_000_000_000  # a pull request that cannot be filled ends with 408 after this
STATUS_HEARTBEAT = 100


def run_js_pub(conn: Connection, spec: ClientSpec, progress: Progress) -> ClientResult:
    if spec.window == 0:
        return _js_pub_sync(conn, spec, progress)
    return js_pub_async(conn, spec, progress)


def _js_pub_sync(conn: Connection, spec: ClientSpec, progress: Progress) -> ClientResult:
    frame = wire.pub(spec.subject.encode(), payload_of(spec.size), conn.inbox_prefix + b".a")
    return run_sync(conn, spec, progress, frame)


def js_pub_async(conn: Connection, spec: ClientSpec, progress: Progress) -> ClientResult:
    """Keep `window` publishes in flight; each ack (or error ack) lets one more go."""
    assert 0 < spec.window <= BENCH_ASYNC_WINDOW_MAX
    result = ClientResult(spec.role, spec.index)
    conn.ensure_inbox()
    frame = wire.pub(spec.subject.encode(), payload_of(spec.size), conn.inbox_prefix + b".a")
    window = min(spec.window, spec.msgs)
    burst = memoryview(frame * window)
    sent_ns = np.zeros(window, dtype=np.int64)
    recorder = LatencyRecorder(spec.msgs)
    start = time.perf_counter()
    sent = acked = 0

    def send(count: int) -> None:
        nonlocal sent
        conn.send(burst[: count * len(frame)])
        slots = np.arange(sent, sent + count) % window
        sent_ns[slots] = time.perf_counter_ns()
        sent += count

    send(window)
    while acked < spec.msgs:
        if not conn.fill():
            note_error(result, f"no ack within {conn.timeout_s:g}s after {acked} of {spec.msgs}")
            break
        good, _ = conn.pump(FLAG_STOP_ERROR | FLAG_STOP_STATUS)
        failed = len(conn.specials)
        for msg in conn.specials:
            note_error(result, f"status {msg.status}" if msg.status else msg.payload[:200].decode())
        conn.specials.clear()
        arrived = good + failed
        if arrived == 0:
            continue
        now_ns = time.perf_counter_ns()
        recorder.record_many(now_ns - sent_ns[np.arange(acked, acked + arrived) % window])
        acked += arrived
        result.msgs += good
        progress(acked)
        more = min(arrived, spec.msgs - sent)
        if more > 0:
            send(more)
    result.elapsed_s = time.perf_counter() - start
    result.bytes = result.msgs * spec.size
    keep_latencies(result, recorder)
    return result


def run_js_fetch(conn: Connection, spec: ClientSpec, progress: Progress) -> ClientResult:
    """Pull `batch` at a time (one request in flight), ack as asked, until spec.msgs arrived."""
    assert 0 < spec.batch <= BENCH_FETCH_BATCH_MAX
    result = ClientResult(spec.role, spec.index)
    conn.ensure_inbox()
    inbox = conn.inbox_prefix + b".f"
    next_subject = f"$JS.API.CONSUMER.MSG.NEXT.{spec.stream}.{spec.consumer}".encode()
    flags = FLAG_STOP_STATUS | (FLAG_OUT_ACK if spec.ack == "explicit" else 0)
    recorder = LatencyRecorder(max(1, spec.msgs // spec.batch))
    acks = bytearray()
    start = time.perf_counter()
    while result.msgs < spec.msgs:
        want = min(spec.batch, spec.msgs - result.msgs)
        asked_ns = time.perf_counter_ns()
        conn.send(wire.pub(next_subject, jsapi.pull_request(want, expires_ns=PULL_EXPIRES_NS), inbox))
        got = _fetch_one(conn, want, flags, acks, result)
        if got < 0:
            break
        if spec.ack == "all" and got and conn.last_reply is not None:
            conn.send(wire.pub(conn.last_reply, b""))
        recorder.record(time.perf_counter_ns() - asked_ns)
        result.msgs += got
        progress(result.msgs)
    conn.flush()  # every ack has reached the server
    result.elapsed_s = time.perf_counter() - start
    result.bytes = result.msgs * spec.size
    keep_latencies(result, recorder)
    return result


def _fetch_one(conn: Connection, want: int, flags: int, acks: bytearray, result: ClientResult) -> int:
    """Messages received for one pull request; -1 when the server went idle or refused the pull
    (409, 503 no responders, ...): asking again would not help."""
    got = 0
    while got < want:
        if not conn.fill():
            note_error(result, f"pull request idle for {conn.timeout_s:g}s")
            return -1
        msgs, _ = conn.pump(flags, acks)
        got += msgs
        if acks:
            conn.send(acks)
            acks.clear()
        statuses = [msg.status for msg in conn.specials if msg.status != STATUS_HEARTBEAT]
        refused = [msg for msg in conn.specials if msg.status not in (STATUS_HEARTBEAT, 404, 408)]
        conn.specials.clear()
        for msg in refused:
            note_error(result, f"status {msg.status} {msg.description}".strip())
        if refused:
            return -1
        if statuses:
            break  # 404/408: this request is over; the caller asks again for the rest
    return got


def setup_js_push(conn: Connection, spec: ClientSpec) -> bytes:
    """Create this client's push consumer now; it delivers only once we subscribe after the start."""
    deliver = conn.inbox_prefix + b"-push"
    config = jsapi.consumer_config(spec.consumer, ack=spec.ack, deliver_subject=deliver.decode(),
                                   max_ack_pending=max(1000, 2 * BENCH_FETCH_BATCH_MAX))
    jsapi.create_consumer(conn, spec.stream, config)
    return deliver


def run_js_push(conn: Connection, spec: ClientSpec, progress: Progress) -> ClientResult:
    result = ClientResult(spec.role, spec.index)
    conn.subscribe(conn.inbox_prefix + b"-push")
    flags = FLAG_STOP_STATUS | (FLAG_OUT_ACK if spec.ack == "explicit" else 0)
    acks = bytearray()

    def ack_all() -> None:
        if conn.last_reply is not None:  # acks every message up to the newest one
            conn.send(wire.pub(conn.last_reply, b""))

    result.elapsed_s = receive_count(conn, spec, progress, result, flags, acks,
                                     ack_all if spec.ack == "all" else None)
    conn.flush()
    return result


def kv_key(index: int, keys: int) -> bytes:
    return b"k%d" % (index % keys)


def run_kv_put(conn: Connection, spec: ClientSpec, progress: Progress) -> ClientResult:
    prefix = f"$KV.{spec.bucket}.".encode()
    payload = payload_of(spec.size)
    reply = conn.inbox_prefix + b".k"
    first = spec.index * spec.msgs
    return run_sync(conn, spec, progress, lambda i: wire.pub(prefix + kv_key(first + i, spec.keys), payload, reply))


def run_kv_get(conn: Connection, spec: ClientSpec, progress: Progress) -> ClientResult:
    prefix = f"$JS.API.DIRECT.GET.KV_{spec.bucket}.$KV.{spec.bucket}.".encode()
    reply = conn.inbox_prefix + b".k"
    first = spec.index * spec.msgs
    return run_sync(conn, spec, progress, lambda i: wire.pub(prefix + kv_key(first + i, spec.keys), b"", reply))
