"""Reading a stream with batch Direct Get (ADR-31, nats-server 2.11+): no consumer is created.

Each request `{"seq": s, "batch": n, "next_by_subj": filter}` answers with up to n messages
(headers Nats-Stream/-Subject/-Sequence/-Time-Stamp/-Num-Pending/-Last-Sequence appended to the
stored ones) and a `204 EOB` status; `404` when nothing is left. A reader asks for the next batch
when the previous ended, so at most one batch is in flight per connection.
"""

from __future__ import annotations

import base64
import json
import re
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone

from appliance.spark.conn import Connection, NatsError, new_inbox, status_of

BATCH_MAX = 1024  # nats-server's and our cap on one Direct Get batch
API_PREFIX = "$JS.API"
DIRECT_HEADERS = (
    b"Nats-Stream", b"Nats-Subject", b"Nats-Sequence", b"Nats-Time-Stamp", b"Nats-Num-Pending", b"Nats-Last-Sequence",
)


@dataclass(frozen=True, slots=True)
class Message:
    seq: int
    subject: str
    time_us: int
    headers: dict[str, list[str]]
    data: bytes


@dataclass(frozen=True, slots=True)
class StreamBounds:
    first_seq: int
    last_seq: int
    messages: int
    allow_direct: bool


def api_request(conn: Connection, subject: str, body: bytes, *, timeout_s: float = 10.0) -> dict[str, object]:
    inbox = new_inbox()
    sid = conn.subscribe(inbox)
    conn.publish(subject, body, reply=inbox)
    try:
        frame = conn.next_frame(timeout_s)
    finally:
        conn.unsubscribe(sid)
    code, text = status_of(frame.headers)
    if code == 503:
        raise NatsError("JetStream not enabled for account (no responders)")
    if code:
        raise NatsError(f"{code} {text}")
    answer = json.loads(frame.payload)
    error = answer.get("error")
    if error:
        raise NatsError(f"{error.get('description')} (err_code {error.get('err_code')})")
    return answer  # type: ignore[no-any-return]


def stream_bounds(conn: Connection, stream: str, *, api: str = API_PREFIX) -> StreamBounds:
    info = api_request(conn, f"{api}.STREAM.INFO.{stream}", b"")
    state, config = info["state"], info["config"]
    assert isinstance(state, dict) and isinstance(config, dict)
    bounds = StreamBounds(
        int(state["first_seq"]), int(state["last_seq"]), int(state["messages"]), bool(config.get("allow_direct"))
    )
    return bounds


def seq_at_time(conn: Connection, stream: str, time_ns: int, *, api: str = API_PREFIX) -> int | None:
    """The first sequence stored at or after time_ns (None: none), by a Direct Get with start_time."""
    request = json.dumps({"start_time": rfc3339_ns(time_ns), "batch": 1}).encode()
    for msg in _exchange(conn, f"{api}.DIRECT.GET.{stream}", request):
        return msg.seq
    return None


def rfc3339_ns(ns: int) -> str:
    seconds, nanos = divmod(ns, 1_000_000_000)
    whole = datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{whole}.{nanos:09d}Z"


def read_range(
    conn: Connection, stream: str, lo: int, hi: int, filter_subject: str = ">", *, api: str = API_PREFIX
) -> Iterator[Message]:
    """Every live message with lo <= seq <= hi matching filter_subject, in order."""
    if filter_subject in ("", ">"):
        yield from _read_all_pipelined(conn, f"{api}.DIRECT.GET.{stream}", lo, hi)
        return
    subject = f"{api}.DIRECT.GET.{stream}"
    seq = lo
    while seq <= hi:
        request = {"seq": seq, "batch": min(BATCH_MAX, hi - seq + 1)}
        if filter_subject not in ("", ">"):
            request["next_by_subj"] = filter_subject  # type: ignore[assignment]
        last = 0
        for msg in _exchange(conn, subject, json.dumps(request).encode()):
            if msg.seq > hi:
                return
            last = msg.seq
            yield msg
        if not last:
            return  # 404: nothing at or after seq
        seq = last + 1


MSG_GET_WINDOW = 256  # STREAM.MSG.GET requests in flight when reading by sequence


def read_range_msg_get(
    conn: Connection, stream: str, lo: int, hi: int, filter_subject: str = ">", *, api: str = API_PREFIX
) -> Iterator[Message]:
    """The same messages as read_range, for a stream without allow_direct: one STREAM.MSG.GET per
    message (JSON, base64), by sequence with a window of requests in flight when unfiltered, one
    after another with next_by_subj when filtered. Much slower; Direct Get is the way to read."""
    subject = f"{api}.STREAM.MSG.GET.{stream}"
    if filter_subject not in ("", ">"):
        seq = lo
        while seq <= hi:
            answer = _msg_get(conn, subject, {"seq": seq, "next_by_subj": filter_subject})
            if answer is None or answer.seq > hi:
                return
            yield answer
            seq = answer.seq + 1
        return
    prefix = new_inbox()
    sid = conn.subscribe(prefix + ".*")
    try:
        answers: dict[int, Message | None] = {}
        asked = lo
        wanted = lo
        while wanted <= hi:
            while asked <= hi and asked - wanted < MSG_GET_WINDOW:
                conn.publish(subject, b'{"seq":%d}' % asked, reply=f"{prefix}.{asked}")
                asked += 1
            while wanted not in answers:
                frame = conn.next_frame()
                answers[int(frame.subject.rpartition(".")[2])] = _msg_get_answer(frame.headers, frame.payload)
            msg = answers.pop(wanted)
            wanted += 1
            if msg is not None:
                yield msg
    finally:
        conn.unsubscribe(sid)


def _msg_get(conn: Connection, subject: str, request: dict[str, object]) -> Message | None:
    inbox = new_inbox()
    sid = conn.subscribe(inbox)
    conn.publish(subject, json.dumps(request).encode(), reply=inbox)
    try:
        frame = conn.next_frame()
    finally:
        conn.unsubscribe(sid)
    return _msg_get_answer(frame.headers, frame.payload)


def _msg_get_answer(headers: bytes, payload: bytes) -> Message | None:
    """A STREAM.MSG.GET response as a Message; None for 'no message found' (a deleted sequence)."""
    code, text = status_of(headers)
    if code:
        raise NatsError(f"stream message get failed: {code} {text}")
    answer = json.loads(payload)
    error = answer.get("error")
    if error:
        if error.get("err_code") == 10037:
            return None
        raise NatsError(f"{error.get('description')} (err_code {error.get('err_code')})")
    message = answer["message"]
    block = base64.b64decode(message["hdrs"]) if message.get("hdrs") else b""
    data = base64.b64decode(message["data"]) if message.get("data") else b""
    return Message(int(message["seq"]), message["subject"], rfc3339_micros(message["time"]), stored_headers(block), data)


# A Direct Get answer to a `{"seq","batch"}` request for a message without stored headers: the
# block is exactly the six headers the server appends (what parse_message's fast path checks)
PLAIN_DIRECT_FRAME = re.compile(
    rb"HMSG (?P<reply>[^ \r\n]+) \d+ (?P<hlen>\d+) (?P<total>\d+)\r\n(?P<block>NATS/1\.0\r\n"
    rb"Nats-Stream: [^\r\n]*\r\nNats-Subject: (?P<subject>[^\r\n]*)\r\nNats-Sequence: (?P<seq>\d+)\r\n"
    rb"Nats-Time-Stamp: (?P<time>[^\r\n]*)\r\nNats-Num-Pending: \d+\r\nNats-Last-Sequence: \d+\r\n\r\n)"
)
PIPELINE_DEPTH = 2  # requests in flight: the server fills the next batch while this one is parsed


def _read_all_pipelined(conn: Connection, subject: str, lo: int, hi: int) -> Iterator[Message]:
    """Unfiltered: request k asks for the 1024 messages from lo + 1024k, so requests need not wait
    for each other. Every live message of [s_k, s_k+1024) is among request k's answer (fewer than
    1024 are there); with deleted sequences an answer runs into the next range, and those repeats
    are dropped by sequence."""
    prefix = new_inbox()
    sid = conn.subscribe(prefix + ".*")
    answers: dict[str, tuple[list[Message], list[bool]]] = {}
    order: deque[str] = deque()
    next_start = lo
    tokens = 0
    exhausted = False

    def ask() -> None:
        nonlocal next_start, tokens
        if exhausted or next_start > hi:
            return
        count = min(BATCH_MAX, hi - next_start + 1)
        token = str(tokens)
        tokens += 1
        conn.publish(subject, b'{"seq":%d,"batch":%d}' % (next_start, count), reply=f"{prefix}.{token}")
        answers[token] = ([], [False])
        order.append(token)
        next_start += count

    try:
        for _ in range(PIPELINE_DEPTH):
            ask()
        last = lo - 1
        while order:
            token = order[0]
            msgs, done = answers[token]
            while not done[0]:
                fast = take_plain(conn)
                if fast is not None:  # a message without stored headers, already buffered
                    reply, msg = fast
                    answers.get(reply.rpartition(".")[2], ([], [True]))[0].append(msg)
                    continue
                frame = conn.next_frame()
                got_msgs, got_done = answers.get(frame.subject.rpartition(".")[2], ([], [True]))
                code, text = status_of(frame.headers)
                if code in (204, 404):
                    got_done[0] = True
                    if code == 404:
                        exhausted = True  # nothing at or after that start: nothing after later ones either
                elif code == 503:
                    raise NatsError(f"stream not found or JetStream not enabled (no responders on {subject})")
                elif code:
                    raise NatsError(f"direct get failed: {code} {text}")
                else:
                    got_msgs.append(parse_message(frame.headers, frame.payload))
            order.popleft()
            del answers[token]
            ask()
            for msg in msgs:
                if last < msg.seq <= hi:
                    last = msg.seq
                    yield msg
    finally:
        conn.unsubscribe(sid)


def take_plain(conn: Connection) -> tuple[str, Message] | None:
    """(reply subject, message) of the next frame if it is a buffered Direct Get answer without
    stored headers (the same Message parse_message gives), else None: read it with next_frame."""
    fast = conn.take_buffered(PLAIN_DIRECT_FRAME)
    if fast is None:
        return None
    match, payload = fast
    seq, subject, stamp = int(match["seq"]), match["subject"].decode(), rfc3339_micros(match["time"].decode())
    return match["reply"].decode(), Message(seq, subject, stamp, {}, payload)


def _exchange(conn: Connection, subject: str, request: bytes) -> Iterator[Message]:
    inbox = new_inbox()
    sid = conn.subscribe(inbox)
    conn.publish(subject, request, reply=inbox)
    try:
        while True:
            frame = conn.next_frame()
            code, text = status_of(frame.headers)
            if code == 204 or code == 404:
                return
            if code == 503:
                raise NatsError(f"stream not found or JetStream not enabled (no responders on {subject})")
            if code:
                raise NatsError(f"direct get failed: {code} {text}")
            yield parse_message(frame.headers, frame.payload)
    finally:
        conn.unsubscribe(sid)


PLAIN_BATCH_CRLFS = 8  # `NATS/1.0`, the six appended headers, the blank line: no stored headers


def parse_message(block: bytes, payload: bytes) -> Message:
    """A Direct Get reply: the stored headers, and the message's seq, subject and time from the
    headers the server appended (the last ones of the block)."""
    lines = block.split(b"\r\n")
    if len(lines) == PLAIN_BATCH_CRLFS + 1 and lines[3][:14] == b"Nats-Sequence:" and lines[2][:13] == b"Nats-Subject:":
        stamp_line = lines[4]
        if stamp_line[:16] == b"Nats-Time-Stamp:":  # the common case, without the general walk below
            return Message(
                int(lines[3][14:]), lines[2][13:].strip().decode(), rfc3339_micros(stamp_line[16:].strip().decode()),
                {}, payload,
            )
    end = len(lines)
    while end > 1 and not lines[end - 1]:
        end -= 1
    found: dict[bytes, bytes] = {}
    while end > 1:
        key, sep, value = lines[end - 1].partition(b":")
        key = key.strip()
        if not sep or key not in DIRECT_HEADERS or key in found:
            break
        found[key] = value.strip()
        end -= 1
    try:
        seq = int(found[b"Nats-Sequence"])
        subject = found[b"Nats-Subject"].decode()
        stamp = found[b"Nats-Time-Stamp"].decode()
    except KeyError as exc:
        raise NatsError(f"direct get reply without {exc.args[0].decode()}") from None
    return Message(seq, subject, rfc3339_micros(stamp), header_lists(lines[1:end]), payload)


def header_lists(lines: list[bytes]) -> dict[str, list[str]]:
    """`Key: value` lines as key -> values in order (a key may repeat)."""
    headers: dict[str, list[str]] = {}
    for line in lines:
        key, sep, value = line.partition(b":")
        if sep and key:
            headers.setdefault(key.strip().decode(errors="replace"), []).append(value.strip().decode(errors="replace"))
    return headers


def stored_headers(block: bytes) -> dict[str, list[str]]:
    """A stored `NATS/1.0\r\n...\r\n\r\n` header block as key -> values ({} for none)."""
    return header_lists(block.split(b"\r\n")[1:]) if block else {}


_SECONDS: dict[str, int] = {}  # "2024-05-01T10:00:00" -> epoch seconds, for the UTC form
_SECONDS_MAX = 4096


def rfc3339_micros(text: str) -> int:
    """`2024-05-01T10:00:00.123456789Z` (or an offset) as microseconds since the epoch (truncated)."""
    if len(text) >= 20 and text[-1] == "Z" and text[19] in ".Z":
        head = text[:19]
        seconds = _SECONDS.get(head)
        if seconds is None:
            if len(_SECONDS) >= _SECONDS_MAX:
                _SECONDS.clear()
            seconds = _SECONDS[head] = int(datetime.fromisoformat(head + "+00:00").timestamp())
        fraction = text[20:-1]
        return seconds * 1_000_000 + (int((fraction + "000000")[:6]) if fraction else 0)
    return _general_micros(text)


def _general_micros(text: str) -> int:
    main, _, rest = text.partition(".")
    fraction = ""
    zone = "Z"
    if rest:
        digits = len(rest) - len(rest.lstrip("0123456789"))
        fraction, zone = rest[:digits], rest[digits:] or "Z"
    else:
        for marker in ("Z", "+", "-"):
            at = main.find(marker, 10)
            if at > 0:
                main, zone = main[:at], main[at:]
                break
    base = datetime.fromisoformat(main + ("+00:00" if zone == "Z" else zone))
    seconds = int(base.timestamp())
    return seconds * 1_000_000 + int((fraction + "000000")[:6])
