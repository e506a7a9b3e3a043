"""The client side of the NATS protocol, sans-I/O: frame builders and a full inbound parser.

The bench's hot loops count MSG/HMSG frames with `scan` (C, or its Python twin); every other
operation, and every frame `scan` stops at, goes through `parse_one` here, which understands
everything a server sends to a client: INFO, MSG, HMSG, PING, PONG, +OK, -ERR. Operation names are
case-insensitive and lines may end in CRLF or a bare LF, as nats-server's own parser allows.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

from appliance.bench._scan_py import is_status, parse_size, split_args
from appliance.errors import ProtocolError
from appliance.limits import CONTROL_LINE_BYTES_MAX

CRLF = b"\r\n"
PING = b"PING\r\n"
PONG = b"PONG\r\n"


@dataclass(frozen=True, slots=True)
class Msg:
    subject: bytes
    sid: bytes
    reply: bytes | None
    headers: bytes | None  # the whole header block of an HMSG, including its final CRLF
    payload: bytes

    @property
    def status(self) -> int | None:
        """The status code of a status message (`NATS/1.0 404 No Messages`), else None."""
        if self.headers is None or not is_status(self.headers, len(self.headers)):
            return None
        return int(self.headers[9:12])

    @property
    def description(self) -> str:
        """The text after the status code on a status message's first line."""
        if self.headers is None:
            return ""
        first_line = self.headers.split(CRLF, 1)[0].decode("utf-8", "replace")
        return first_line[13:].strip()


@dataclass(frozen=True, slots=True)
class Ping:
    pass


@dataclass(frozen=True, slots=True)
class Pong:
    pass


@dataclass(frozen=True, slots=True)
class Ok:
    pass


@dataclass(frozen=True, slots=True)
class Err:
    text: str


@dataclass(frozen=True, slots=True)
class Info:
    fields: dict[str, object]


Event = Msg | Ping | Pong | Ok | Err | Info


def _bad(detail: str) -> ProtocolError:
    return ProtocolError(detail, client_error="Unknown Protocol Operation")


def _parse_msg(args: list[bytes], body: bytes, *, is_hmsg: bool) -> Msg:
    header_bytes = parse_size(args[-2]) if is_hmsg else 0
    reply = args[3] if len(args) == (6 if is_hmsg else 5) else None
    headers = body[:header_bytes] if is_hmsg else None
    return Msg(args[1], args[2], reply, headers, body[header_bytes:])


def _msg_shape(args: list[bytes], *, is_hmsg: bool) -> int:
    """The total body size of a well-formed MSG/HMSG line, else raises ProtocolError."""
    sizes = 2 if is_hmsg else 1
    if len(args) not in (3 + sizes, 4 + sizes):
        raise _bad(f"malformed {'HMSG' if is_hmsg else 'MSG'} line with {len(args)} arguments")
    total = parse_size(args[-1])
    header_bytes = parse_size(args[-2]) if is_hmsg else 0
    if total < 0 or header_bytes < 0 or header_bytes > total:
        raise _bad("bad size in message line")
    return total


def parse_one(buf: bytes | bytearray, start: int, end: int) -> tuple[Event | None, int]:
    """Parse the operation at buf[start:end]: (event, position after it), or (None, start) if incomplete."""
    newline = buf.find(b"\n", start, end)
    if newline < 0:
        if end - start > CONTROL_LINE_BYTES_MAX + 1:
            raise ProtocolError("control line too long", client_error="maximum control line exceeded")
        return None, start
    if newline - start > CONTROL_LINE_BYTES_MAX + 1:
        raise ProtocolError("control line too long", client_error="maximum control line exceeded")
    line = bytes(buf[start:newline])
    if line.endswith(b"\r"):
        line = line[:-1]
    after_line = newline + 1
    args = split_args(line)
    if not args:
        raise _bad("empty control line")
    op = args[0].upper()
    if op in (b"MSG", b"HMSG"):
        is_hmsg = op == b"HMSG"
        total = _msg_shape(args, is_hmsg=is_hmsg)
        frame_end = after_line + total + 2
        if frame_end > end:
            return None, start
        if buf[frame_end - 2 : frame_end] != CRLF:
            raise _bad("message payload not followed by CRLF")
        return _parse_msg(args, bytes(buf[after_line : frame_end - 2]), is_hmsg=is_hmsg), frame_end
    return _parse_simple(op, line), after_line


def _parse_simple(op: bytes, line: bytes) -> Event:
    if op == b"PING":
        return Ping()
    if op == b"PONG":
        return Pong()
    if op == b"+OK":
        return Ok()
    if op == b"-ERR":
        text = line[4:].strip().decode("utf-8", "replace")
        return Err(text[1:-1] if len(text) >= 2 and text[0] == text[-1] == "'" else text)
    if op == b"INFO":
        try:
            fields = json.loads(line[4:])
        except ValueError as exc:
            raise _bad(f"INFO is not JSON: {exc}") from exc
        if not isinstance(fields, dict):
            raise _bad("INFO is not a JSON object")
        return Info(fields)
    raise _bad(f"unknown operation {op[:16]!r}")


class Reader:
    """Feed bytes as they arrive; iterate events. Events never depend on how the bytes were split."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> None:
        self._buf += data

    def events(self) -> Iterator[Event]:
        pos = 0
        try:
            while True:
                event, pos_after = parse_one(self._buf, pos, len(self._buf))
                if event is None:
                    return
                pos = pos_after
                yield event
        finally:
            del self._buf[:pos]


def connect_line(*, name: str, user: str | None = None, password: str | None = None,
                 token: str | None = None) -> bytes:
    """CONNECT as real clients send it: not verbose, not pedantic, headers and no_responders on."""
    options: dict[str, object] = {
        "verbose": False, "pedantic": False, "echo": True, "lang": "python-appliance-bench",
        "version": "0.1.0", "protocol": 1, "headers": True, "no_responders": True, "name": name,
    }
    if user is not None:
        options["user"] = user
        options["pass"] = password or ""
    if token is not None:
        options["auth_token"] = token
    return b"CONNECT " + json.dumps(options, separators=(",", ":")).encode() + CRLF


def pub(subject: bytes, payload: bytes, reply: bytes | None = None) -> bytes:
    if reply is None:
        return b"PUB %s %d\r\n%s\r\n" % (subject, len(payload), payload)
    return b"PUB %s %s %d\r\n%s\r\n" % (subject, reply, len(payload), payload)


def hpub(subject: bytes, headers: dict[str, str], payload: bytes, reply: bytes | None = None) -> bytes:
    block = b"NATS/1.0\r\n" + b"".join(f"{k}: {v}\r\n".encode() for k, v in headers.items()) + CRLF
    sizes = b"%d %d" % (len(block), len(block) + len(payload))
    middle = b"" if reply is None else reply + b" "
    return b"HPUB " + subject + b" " + middle + sizes + CRLF + block + payload + CRLF


def sub(subject: bytes, sid: int, queue: bytes | None = None) -> bytes:
    if queue is None:
        return b"SUB %s %d\r\n" % (subject, sid)
    return b"SUB %s %s %d\r\n" % (subject, queue, sid)


def unsub(sid: int) -> bytes:
    return b"UNSUB %d\r\n" % sid
