"""Direct Get (ADR-31): `$JS.API.DIRECT.GET.<stream>[.<subject>]` answered with raw messages and
status headers (404 Message Not Found, 408 Empty/Malformed Request, 204 EOB after a batch).

The by-subject form (`$JS.API.DIRECT.GET.<stream>.<subject>`, a KV get) is one request at a time
from a waiting client, so its cost is latency: it skips the JSON request object and builds the
reply's header block in one bytes format, with the RFC 3339 text of each second made once.
"""

from __future__ import annotations

import time
from functools import lru_cache
from typing import TYPE_CHECKING

from appliance import limits
from appliance.errors import CorruptData
from appliance.jetstream import errors
from appliance.jetstream.msg_get import (
    GetRequest,
    lookup,
    parse_direct_get,
    parse_direct_subject_form,
    start_seq,
)
from appliance.jetstream.request import needs_newer_api
from appliance.jetstream.storeview import count_live
from appliance.jetstream.wire import HEADER_LINE, rfc3339, status_headers
from appliance.store.api import StoredMsg

if TYPE_CHECKING:
    from appliance.jetstream.service import AccountJetStream
    from appliance.jetstream.stream import Stream

NANOS_PER_SECOND = 1_000_000_000
NOT_FOUND = status_headers(404, "Message Not Found")
NO_RESULTS = status_headers(404, "No Results")
NO_OPTIONS = GetRequest()


def direct_get(
    ajs: AccountJetStream, name: str, subject: str, reply: str, body: bytes, header: bytes = b""
) -> None:
    stream = ajs.streams.get(name)
    if stream is None or not reply:
        return
    if header and needs_newer_api(header):
        ajs.send(reply, b"", header=status_headers(412, "Required Api Level"))
        return
    prefix = f"$JS.API.DIRECT.GET.{name}."
    if subject.startswith(prefix):
        _direct_last(ajs, stream, subject[len(prefix) :], reply, body)
        return
    req = parse_direct_get(body)
    if isinstance(req, str):
        ajs.send(reply, b"", header=status_headers(408, req))
        return
    if req.batch or req.multi_last:
        _direct_batch(ajs, stream, reply, req)
        return
    try:
        msg = lookup(stream, req)
    except errors.JsApiError as exc:  # a lost (damaged) message: never its bytes
        ajs.send(reply, b"", header=status_headers(500, f"Message Lost: {exc}"))
        return
    _send_one(ajs, stream, reply, msg, req)


def _send_one(
    ajs: AccountJetStream, stream: Stream, reply: str, msg: StoredMsg | None, req: GetRequest
) -> None:
    if msg is None:
        ajs.send(reply, b"", header=NOT_FOUND)
        return
    header = None if req.no_hdr else direct_headers(stream.config.name, msg)
    ajs.send(reply, msg.payload, header=header)


def _direct_last(ajs: AccountJetStream, stream: Stream, subject: str, reply: str, body: bytes) -> None:
    """The last message on `subject` (the subject form, a KV get): a body may only carry
    no_hdr or max_bytes."""
    req = parse_direct_subject_form(body) if body else NO_OPTIONS
    if isinstance(req, str):
        ajs.send(reply, b"", header=status_headers(408, req))
        return
    _send_one(ajs, stream, reply, stream.store.load_last(subject) if subject else None, req)


@lru_cache(maxsize=limits.JS_DIRECT_TIME_TEXTS_MAX)
def _second_text(seconds: int) -> bytes:
    """The whole-second part of rfc3339 (UTC, no fraction, no "Z")."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)).encode()


def time_text(ns: int) -> bytes:
    """rfc3339(ns) as bytes, the whole-second part made once per second."""
    if ns <= 0:
        return rfc3339(ns).encode()
    seconds, nanos = divmod(ns, NANOS_PER_SECOND)
    if not nanos:
        return _second_text(seconds) + b"Z"
    return b"%s.%sZ" % (_second_text(seconds), (b"%09d" % nanos).rstrip(b"0"))


def direct_headers(stream_name: str, msg: StoredMsg, extra: bytes = b"") -> bytes:
    """The reply's header block: the stored headers (if any), then Nats-Stream, Nats-Subject,
    Nats-Sequence, Nats-Time-Stamp and `extra` (complete `Key: value\\r\\n` lines)."""
    added = b"Nats-Stream: %s\r\nNats-Subject: %s\r\nNats-Sequence: %d\r\nNats-Time-Stamp: %s\r\n%s\r\n" % (
        stream_name.encode(),
        msg.subject.encode(),
        msg.seq,
        time_text(msg.timestamp_ns),
        extra,
    )
    stored = msg.headers
    if len(stored) > 2:  # as nats-server's genHeader: its last two bytes give way, whatever they are
        return stored[:-2] + added
    return HEADER_LINE + b"\r\n" + added


def _direct_batch(ajs: AccountJetStream, stream: Stream, reply: str, req: GetRequest) -> None:
    store = stream.store
    batch = min(req.batch or limits.JS_DIRECT_BATCH_MAX, limits.JS_DIRECT_BATCH_MAX)
    max_bytes = req.max_bytes
    msgs = []
    multi = req.multi_last
    if multi:
        up_to = req.up_to_seq
        if req.up_to_ns is not None:  # the last sequence stored before up_to_time
            up_to = start_seq(stream, GetRequest(start_ns=req.up_to_ns))
            if up_to <= store.state().first_seq:
                ajs.send(reply, b"", header=NO_RESULTS)
                return
            up_to -= 1
        up_to = up_to or store.state().last_seq
        seqs: set[int] = set()
        for filter_subject in multi:
            for subject in store.subject_counts(filter_subject):
                last = _last_at_or_below(stream, subject, up_to)
                if last is not None and last >= req.seq:
                    seqs.add(last)
        if len(seqs) > limits.JS_DIRECT_MULTI_MAX:
            ajs.send(reply, b"", header=status_headers(413, "Too Many Results"))
            return
        if not seqs:
            ajs.send(reply, b"", header=NO_RESULTS)
            return
        for seq in sorted(seqs)[:batch]:
            try:
                msg = store.load(seq)
            except CorruptData:
                continue  # lost (damaged): quarantined by the store, never sent
            if msg is not None:
                msgs.append(msg)
        remaining_total = 0
    else:
        filter_subject = req.next_by or ">"
        seq = max(start_seq(stream, req), 1)
        if batch < 0:  # nats-server: no message, and the EOB counts what is pending from seq
            _send_eob(ajs, reply, count_live(store, seq, [filter_subject]), 0, None)
            return
        while len(msgs) < batch:
            msg = store.load_next(filter_subject, seq)
            if msg is None:
                break
            msgs.append(msg)
            seq = msg.seq + 1
        up_to = 0
        remaining_total = count_live(store, seq, [filter_subject]) if msgs else 0
    if not msgs:
        ajs.send(reply, b"", header=NOT_FOUND)
        return
    previous = 0
    sent_bytes = 0
    pending = remaining_total
    name = stream.config.name
    for index, msg in enumerate(msgs):
        pending = len(msgs) - index - 1 + remaining_total
        sent_bytes += len(msg.subject) + len(msg.headers) + len(msg.payload)  # as nats-server counts
        extra = b"Nats-Num-Pending: %d\r\nNats-Last-Sequence: %d\r\n" % (pending, previous)
        header = None if req.no_hdr else direct_headers(name, msg, extra)
        ajs.send(reply, msg.payload, header=header)
        previous = msg.seq
        if max_bytes and sent_bytes >= max_bytes:
            break
    if req.no_hdr:  # nats-server counts pending down only while it writes per-message headers
        pending = remaining_total + len(msgs)
    _send_eob(ajs, reply, pending, previous, up_to if multi else None)


def _send_eob(ajs: AccountJetStream, reply: str, pending: int, last: int, up_to: int | None) -> None:
    eob = [("Nats-Num-Pending", str(pending)), ("Nats-Last-Sequence", str(last))]
    if up_to is not None:
        eob.append(("Nats-UpTo-Sequence", str(up_to)))
    ajs.send(reply, b"", header=status_headers(204, "EOB", eob))


def _last_at_or_below(stream: Stream, subject: str, up_to: int) -> int | None:
    last = stream.store.load_last(subject)
    if last is None:
        return None
    if last.seq <= up_to:
        return last.seq
    best = None
    seq = 1
    while True:
        msg = stream.store.load_next(subject, seq)
        if msg is None or msg.seq > up_to:
            return best
        best = msg.seq
        seq = msg.seq + 1
