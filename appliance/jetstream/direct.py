"""Direct Get (ADR-31): `$JS.API.DIRECT.GET.<stream>[.<subject>]` answered with raw messages and
status headers (404 Message Not Found, 408 Empty/Malformed Request, 204 EOB after a batch)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from appliance import limits
from appliance.jetstream import errors
from appliance.jetstream.api_streams import MSG_GET_FIELDS, lookup
from appliance.jetstream.decode import JsonObject, decode_object, request_body
from appliance.jetstream.storeview import count_live
from appliance.jetstream.wire import append_headers, rfc3339, status_headers
from appliance.store.api import StoredMsg

if TYPE_CHECKING:
    from appliance.jetstream.service import AccountJetStream
    from appliance.jetstream.stream import Stream


def direct_get(ajs: AccountJetStream, name: str, subject: str, reply: str, body: bytes) -> None:
    stream = ajs.streams.get(name)
    if stream is None or not reply:
        return
    prefix = f"$JS.API.DIRECT.GET.{name}."
    if subject.startswith(prefix):
        obj: JsonObject = {"last_by_subj": subject[len(prefix) :]}
    else:
        text = request_body(body)
        if not text:
            ajs.send(reply, b"", header=status_headers(408, "Empty Request"))
            return
        try:
            obj = decode_object(text, MSG_GET_FIELDS, "JSApiMsgGetRequest")  # type: ignore[arg-type]
        except errors.JsApiError:
            ajs.send(reply, b"", header=status_headers(408, "Malformed Request"))
            return
    if obj.get("batch") or obj.get("multi_last"):
        _direct_batch(ajs, stream, reply, obj)
        return
    msg = lookup(stream, obj)
    if msg is None:
        ajs.send(reply, b"", header=status_headers(404, "Message Not Found"))
        return
    ajs.send(reply, msg.payload, header=_direct_headers(stream, msg, []))


def _direct_headers(stream: Stream, msg: StoredMsg, extra: list[tuple[str, str]]) -> bytes:
    pairs = [
        ("Nats-Stream", stream.config.name),
        ("Nats-Subject", msg.subject),
        ("Nats-Sequence", str(msg.seq)),
        ("Nats-Time-Stamp", rfc3339(msg.timestamp_ns)),
        *extra,
    ]
    return append_headers(msg.headers, pairs)


def _direct_batch(ajs: AccountJetStream, stream: Stream, reply: str, obj: JsonObject) -> None:
    store = stream.store
    batch = min(int(str(obj.get("batch") or limits.JS_DIRECT_BATCH_MAX)), limits.JS_DIRECT_BATCH_MAX)
    max_bytes = int(str(obj.get("max_bytes") or 0))
    msgs = []
    multi = obj.get("multi_last")
    if isinstance(multi, list):
        up_to = int(str(obj.get("up_to_seq") or 0)) or store.state().last_seq
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
        while len(msgs) < batch:
            msg = store.load_next(filter_subject, seq)
            if msg is None:
                break
            msgs.append(msg)
            seq = msg.seq + 1
        up_to = 0
        remaining_total = count_live(store, seq, [filter_subject]) if msgs else 0
    if not msgs:
        ajs.send(reply, b"", header=status_headers(404, "Message Not Found"))
        return
    previous = 0
    sent_bytes = 0
    for index, msg in enumerate(msgs):
        pending = len(msgs) - index - 1 + remaining_total
        sent_bytes += len(msg.payload) + len(msg.headers)
        ajs.send(
            reply,
            msg.payload,
            header=_direct_headers(
                stream, msg, [("Nats-Num-Pending", str(pending)), ("Nats-Last-Sequence", str(previous))]
            ),
        )
        previous = msg.seq
        if max_bytes and sent_bytes >= max_bytes:
            break
    eob = [("Nats-Num-Pending", str(remaining_total)), ("Nats-Last-Sequence", str(previous))]
    if isinstance(multi, list):
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
