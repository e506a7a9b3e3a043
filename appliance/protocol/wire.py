"""Bytes the server writes to clients: constants and small builders (no I/O)."""

from __future__ import annotations

import json

PING = b"PING\r\n"
PONG = b"PONG\r\n"
OK = b"+OK\r\n"
CRLF = b"\r\n"
# one encoder for every INFO: json.dumps with these separators would build a new one per call
_JSON = json.JSONEncoder(separators=(",", ":"))


def err(text: str) -> bytes:
    return b"-ERR '" + text.encode() + b"'\r\n"


def info(fields: dict[str, object]) -> bytes:
    """`INFO <json> \\r\\n` — note the space before CRLF, as nats-server writes it."""
    return b"INFO " + _JSON.encode(fields).encode() + b" \r\n"


class InfoLine:
    """The INFO lines of one server to its connections: the server's fields, encoded once and reused
    while they stay the same, then each connection's own (client_id, client_ip, ...). The bytes are
    those of `info` over both merged, the connection's keys last (they are never among the server's)."""

    __slots__ = ("_shared", "_head")

    def __init__(self) -> None:
        self._shared: dict[str, object] | None = None
        self._head = b""  # b'INFO {"server_id":...' without the closing brace

    def encode(self, shared: dict[str, object], own: dict[str, object]) -> bytes:
        if not shared or not own:
            return info({**shared, **own})
        if shared != self._shared:
            self._shared = shared
            self._head = b"INFO " + _JSON.encode(shared).encode()[:-1]
        return b"%s,%s \r\n" % (self._head, _JSON.encode(own)[1:].encode())


def msg(subject: bytes, sid: bytes, reply: bytes | None, payload: bytes) -> bytes:
    if reply:
        return b"MSG %s %s %s %d\r\n%s\r\n" % (subject, sid, reply, len(payload), payload)
    return b"MSG %s %s %d\r\n%s\r\n" % (subject, sid, len(payload), payload)


def hmsg(subject: bytes, sid: bytes, reply: bytes | None, header_size: int, data: bytes) -> bytes:
    if reply:
        return b"HMSG %s %s %s %d %d\r\n%s\r\n" % (subject, sid, reply, header_size, len(data), data)
    return b"HMSG %s %s %d %d\r\n%s\r\n" % (subject, sid, header_size, len(data), data)


def no_responders_headers(subject: bytes) -> bytes:
    """The header block of a no-responders status message (32 + len(subject) bytes)."""
    return b"NATS/1.0 503\r\nNats-Subject: " + subject + b"\r\n\r\n"


def append_msg(out: bytearray, subject: bytes, tail: bytes, reply: bytes | None, header_size: int,
               data: bytes) -> None:
    """Append one MSG (header_size < 0) or HMSG to `out`. `tail` is b" <sid> " (twin of the native one)."""
    if header_size < 0:
        if reply:
            out += b"MSG %s%s%s %d\r\n%s\r\n" % (subject, tail, reply, len(data), data)
        else:
            out += b"MSG %s%s%d\r\n%s\r\n" % (subject, tail, len(data), data)
    elif reply:
        out += b"HMSG %s%s%s %d %d\r\n%s\r\n" % (subject, tail, reply, header_size, len(data), data)
    else:
        out += b"HMSG %s%s%d %d\r\n%s\r\n" % (subject, tail, header_size, len(data), data)
