"""Message get requests (`STREAM.MSG.GET`, `DIRECT.GET` in both forms): decoding, nats-server's
validation of every field (which options exclude which), and the lookup of the one message.

nats-server validates before it looks the stream up, so a bad MSG.GET on a missing stream is a
bad request, not "stream not found". Its two decoders differ: MSG.GET refuses unknown fields and
reads whitespace as an empty request; DIRECT.GET (Go's json.Unmarshal) ignores unknown fields
and calls anything that is not JSON malformed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from appliance.errors import CorruptData
from appliance.jetstream import advisories, errors
from appliance.jetstream.decode import decode_object, invalid_json, parse_json
from appliance.jetstream.storeview import seq_from_time
from appliance.jetstream.wire import parse_rfc3339
from appliance.store.api import StoredMsg

if TYPE_CHECKING:
    from appliance.jetstream.stream import Stream

MSG_GET_FIELDS: dict[str, object] = {
    "seq": "uint",
    "last_by_subj": "str",
    "next_by_subj": "str",
    "batch": "int",
    "max_bytes": "int",
    "start_time": "time",
    "multi_last": "strs",
    "up_to_seq": "uint",
    "up_to_time": "time",
    "no_hdr": "bool",
}

EMPTY = "Empty Request"  # DIRECT.GET's 408 descriptions
BAD = "Bad Request"
MALFORMED = "Malformed Request"


@dataclass(slots=True)
class GetRequest:
    seq: int = 0
    last_by: str = ""
    next_by: str = ""
    batch: int = 0
    max_bytes: int = 0
    start_ns: int | None = None  # start_time given (Go: a non-nil *time.Time)
    multi_last: tuple[str, ...] = ()
    up_to_seq: int = 0
    up_to_ns: int | None = None
    no_hdr: bool = False


def _time(value: object, field: str) -> int | None:
    if value is None:
        return None
    try:
        return parse_rfc3339(str(value))
    except ValueError:
        raise invalid_json(f"parsing time {value!r} as RFC 3339 ({field})") from None


def decode_get(data: object) -> GetRequest:
    """A JSON value (already parsed) as a get request; a wrong type raises 10025."""
    if data is None:
        return GetRequest()  # Go decodes null into a struct as nothing
    obj = decode_object(data, MSG_GET_FIELDS, "JSApiMsgGetRequest")  # type: ignore[arg-type]
    return GetRequest(
        seq=int(str(obj.get("seq") or 0)),
        last_by=str(obj.get("last_by_subj") or ""),
        next_by=str(obj.get("next_by_subj") or ""),
        batch=int(str(obj.get("batch") or 0)),
        max_bytes=int(str(obj.get("max_bytes") or 0)),
        start_ns=_time(obj.get("start_time"), "start_time"),
        multi_last=tuple(str(s) for s in obj.get("multi_last") or ()),  # type: ignore[attr-defined]
        up_to_seq=int(str(obj.get("up_to_seq") or 0)),
        up_to_ns=_time(obj.get("up_to_time"), "up_to_time"),
        no_hdr=bool(obj.get("no_hdr")),
    )


def _conflicts(req: GetRequest) -> bool:
    """seq, last_by_subj and start_time exclude each other; next_by_subj pairs with seq or start_time."""
    start = req.start_ns is not None
    return (
        (req.seq > 0 and bool(req.last_by))
        or (req.seq > 0 and start)
        or (start and bool(req.last_by))
        or (bool(req.last_by) and bool(req.next_by))
    )


def parse_msg_get(body: bytes) -> GetRequest:
    """A STREAM.MSG.GET body, or the JsApiError nats-server answers (400 bad request, 10025)."""
    text = body.strip()
    parsed = parse_json(text) if text else {}
    if parsed == {}:
        raise errors.BAD_REQUEST.error()
    req = decode_get(parsed)
    nothing = req.seq == 0 and not req.last_by and not req.next_by and req.start_ns is None
    if req.batch > 0 or req.max_bytes > 0 or nothing or _conflicts(req):
        raise errors.BAD_REQUEST.error()
    return req


def parse_direct_get(body: bytes) -> GetRequest | str:
    """A DIRECT.GET body, or the description of the 408 nats-server answers."""
    if not body:
        return EMPTY
    try:
        parsed = parse_json(body)
        if isinstance(parsed, dict):
            parsed = {k: v for k, v in parsed.items() if k in MSG_GET_FIELDS}
        req = decode_get(parsed)
    except errors.JsApiError:
        return MALFORMED
    if (
        req.seq == 0
        and not req.last_by
        and not req.next_by
        and not req.multi_last
        and req.start_ns is None
    ):
        return EMPTY
    if (
        _conflicts(req)
        or (bool(req.last_by) and req.batch != 0)  # nats-server: Batch > 0, but a set batch is
        or (bool(req.last_by) and bool(req.multi_last))  # never accepted with last_by_subj
        or (bool(req.next_by) and bool(req.multi_last))
        or (req.up_to_seq > 0 and req.up_to_ns is not None)
    ):
        return BAD
    return req


def parse_direct_subject_form(body: bytes) -> GetRequest | str:
    """The body of `DIRECT.GET.<stream>.<subject>`: optional; only no_hdr and max_bytes apply."""
    req = GetRequest()
    if body:
        try:
            parsed = parse_json(body)
            if isinstance(parsed, dict):
                parsed = {k: v for k, v in parsed.items() if k in MSG_GET_FIELDS}
            req = decode_get(parsed)
        except errors.JsApiError:
            return MALFORMED
    if (
        req.last_by
        or req.next_by
        or req.multi_last
        or req.seq
        or req.batch
        or req.start_ns is not None
        or req.up_to_seq
        or req.up_to_ns is not None
    ):
        return BAD
    return req


def start_seq(stream: Stream, req: GetRequest) -> int:
    """req.seq, or with start_time the first sequence stored at or after it (past the last
    sequence when none is)."""
    if req.start_ns is None:
        return req.seq
    return seq_from_time(stream.store, req.start_ns)


def lookup(stream: Stream, req: GetRequest) -> StoredMsg | None:
    """The one message a (valid) non-batch request names; a lost (damaged) one is an error, never bytes."""
    try:
        return _lookup(stream, req)
    except CorruptData as exc:
        advisories.stream_corrupt(stream.host, stream.config.name, stream.store.lost())
        raise errors.STREAM_GENERAL.format(err=_lost_text(exc)) from exc


def _lost_text(exc: CorruptData) -> str:
    """What a client is told: the store's description without the server's file paths."""
    text = str(exc)
    if exc.path and text.startswith(exc.path):
        text = text.split(": ", 1)[-1]
    return text


def _lookup(stream: Stream, req: GetRequest) -> StoredMsg | None:
    store = stream.store
    seq = start_seq(stream, req)
    if req.next_by:
        return store.load_next(req.next_by, max(seq, 1))
    if seq > 0:
        return store.load(seq)
    return store.load_last(req.last_by) if req.last_by else None
