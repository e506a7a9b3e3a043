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
from appliance.jetstream import errors
from appliance.jetstream.api_streams import MSG_GET_FIELDS, lookup
from appliance.jetstream.decode import JsonObject, decode_object, request_body
from appliance.jetstream.storeview import count_live, first_seq_at_or_after_time, last_seq
from appliance.jetstream.wire import HEADER_LINE, parse_rfc3339, rfc3339, status_headers
from appliance.store.api import StoredMsg

if TYPE_CHECKING:
    from appliance.jetstream.service import AccountJetStream
    from appliance.jetstream.stream import Stream

NANOS_PER_SECOND = 1_000_000_000
NOT_FOUND = status_headers(404, "Message Not Found")


def direct_get(ajs: AccountJetStream, name: str, subject: str, reply: str, body: bytes) -> None:
    stream = ajs.streams.get(name)
    if stream is None or not reply:
        return
    prefix = f"$JS.API.DIRECT.GET.{name}."
    if subject.startswith(prefix):
        _direct_last(ajs, stream, subject[len(prefix) :], reply)
        return
    text = request_body(body)
    if not text:
        ajs.send(reply, b"", header=status_headers(408, "Empty Request"))
        return
    try:
        obj: JsonObject = decode_object(text, MSG_GET_FIELDS, "JSApiMsgGetRequest")  # type: ignore[arg-type]
    except errors.JsApiError:
        ajs.send(reply, b"", header=status_headers(408, "Malformed Request"))
        return
    problem = request_problem(obj)
    if problem:
        ajs.send(reply, b"", header=status_headers(408, problem))
        return
    if obj.get("batch") or obj.get("multi_last"):
        _direct_batch(ajs, stream, reply, obj)
        return
    msg = _next_at_time(stream, obj) if obj.get("start_time") else lookup(stream, obj)
    if msg is None:
        ajs.send(reply, b"", header=NOT_FOUND)
        return
    ajs.send(reply, msg.payload, header=None if obj.get("no_hdr") else direct_headers(stream.config.name, msg))


def request_problem(obj: JsonObject) -> str:
    """nats-server's 408 for a request naming nothing, or options that conflict ("" when fine)."""
    seq, last_for, next_for = int(str(obj.get("seq") or 0)), obj.get("last_by_subj"), obj.get("next_by_subj")
    start_time, multi, batch = obj.get("start_time"), obj.get("multi_last"), int(str(obj.get("batch") or 0))
    if not seq and not last_for and not next_for and not multi and not start_time:
        return "Empty Request"
    conflicts = (
        (seq and last_for) or (seq and start_time) or (start_time and last_for) or (last_for and next_for)
        or (last_for and batch > 0) or (last_for and multi) or (next_for and multi)
        or (obj.get("up_to_seq") and obj.get("up_to_time"))
    )
    return "Bad Request" if conflicts else ""


def _direct_last(ajs: AccountJetStream, stream: Stream, subject: str, reply: str) -> None:
    """The last message on `subject` (the subject form; the request body is ignored, as
    nats-server does)."""
    msg = stream.store.load_last(subject) if subject else None
    if msg is None:
        ajs.send(reply, b"", header=NOT_FOUND)
        return
    ajs.send(reply, msg.payload, header=direct_headers(stream.config.name, msg))


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
    if stored:
        assert stored.endswith(b"\r\n\r\n")
        return stored[:-2] + added
    return HEADER_LINE + b"\r\n" + added


def _direct_batch(ajs: AccountJetStream, stream: Stream, reply: str, obj: JsonObject) -> None:
    store = stream.store
    batch = min(int(str(obj.get("batch") or limits.JS_DIRECT_BATCH_MAX)), limits.JS_DIRECT_BATCH_MAX)
    max_bytes = int(str(obj.get("max_bytes") or 0))
    msgs = []
    multi = obj.get("multi_last")
    if isinstance(multi, list):
        up_to = int(str(obj.get("up_to_seq") or 0))
        if obj.get("up_to_time"):  # the last sequence stored before that time (nats-server)
            at = _seq_at_time(stream, {"start_time": obj["up_to_time"]})
            if at <= store.state().first_seq:
                ajs.send(reply, b"", header=status_headers(404, "No Results"))
                return
            up_to = at - 1
        up_to = up_to or store.state().last_seq
        seqs: set[int] = set()
        for filter_subject in multi:
            for subject in store.subject_counts(str(filter_subject)):
                last = _last_at_or_below(stream, subject, up_to)
                if last is not None:
                    seqs.add(last)
        for seq in sorted(seqs)[:batch]:
            msg = store.load(seq)
            if msg is not None:
                msgs.append(msg)
        remaining_total = 0
    else:
        filter_subject = str(obj.get("next_by_subj") or ">")
        seq = max(int(str(obj.get("seq", 0))), 1)
        if obj.get("start_time"):
            seq = _seq_at_time(stream, obj)
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
    no_headers = bool(obj.get("no_hdr"))
    name = stream.config.name
    sent = 0
    for index, msg in enumerate(msgs):
        pending = len(msgs) - index - 1 + remaining_total
        sent_bytes += len(msg.subject) + len(msg.headers) + len(msg.payload)  # as nats-server counts
        extra = b"Nats-Num-Pending: %d\r\nNats-Last-Sequence: %d\r\n" % (pending, previous)
        ajs.send(reply, msg.payload, header=None if no_headers else direct_headers(name, msg, extra))
        previous = msg.seq
        sent += 1
        if max_bytes and sent_bytes >= max_bytes:
            break
    # nats-server counts pending down only while it writes per-message headers: with no_hdr the
    # EOB carries the count at the start of the batch
    eob_pending = remaining_total + len(msgs) - sent + (sent if no_headers else 0)  # max_bytes may stop early
    eob = [("Nats-Num-Pending", str(eob_pending)), ("Nats-Last-Sequence", str(previous))]
    if isinstance(multi, list):
        eob.append(("Nats-UpTo-Sequence", str(up_to)))
    ajs.send(reply, b"", header=status_headers(204, "EOB", eob))


def _seq_at_time(stream: Stream, obj: JsonObject) -> int:
    """Where a request with start_time begins (nats-server: GetSeqFromTime); past the end if none."""
    seq = first_seq_at_or_after_time(stream.store, parse_rfc3339(str(obj["start_time"])))
    return seq or last_seq(stream.store) + 1


def _next_at_time(stream: Stream, obj: JsonObject) -> StoredMsg | None:
    return stream.store.load_next(str(obj.get("next_by_subj") or ">"), _seq_at_time(stream, obj))


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
