"""Sans-I/O parser for the NATS client protocol (client → server direction).

Theory of operation: `feed(data, out)` appends one event tuple per complete operation to `out` and
keeps any incomplete tail for the next call, so the events never depend on how the bytes were
split. Events are plain tuples (not objects) because this is the hot path of every message:

    (OP_PUB,     subject, reply | None, payload)
    (OP_HPUB,    subject, reply | None, header_bytes, data)   # data = header block + payload
    (OP_SUB,     subject, queue | None, sid)
    (OP_UNSUB,   sid, max_msgs | None)
    (OP_PING,)   (OP_PONG,)   (OP_CONNECT, json_bytes)   (OP_INFO,)   (OP_OK,)

All fields are bytes. On a protocol violation `feed` raises ProtocolError after appending the
events that preceded it; `client_error` is the text for `-ERR '...'`, or "" when nats-server closes
without one (malformed arguments, a client sending -ERR). The parser is dead after an error.

Behaviour follows nats-server 2.15.1 as observed on the wire: ops are case-insensitive, arguments
are split on spaces or tabs, a control line may end in a bare LF but a payload must be followed by
exactly CRLF, sizes are plain decimal digits.
"""

from __future__ import annotations

from appliance import native
from appliance.errors import ProtocolError
from appliance.protocol._scan_py import scan_pubs as _scan_pubs_py

scan_pubs = native.speedups.scan_pubs if native.ENABLED and hasattr(native.speedups, "scan_pubs") else _scan_pubs_py

OP_PUB = 1
OP_HPUB = 2
OP_SUB = 3
OP_UNSUB = 4
OP_PING = 5
OP_PONG = 6
OP_CONNECT = 7
OP_INFO = 8
OP_OK = 9

ERR_UNKNOWN_OP = "Unknown Protocol Operation"
ERR_CONTROL_LINE = "maximum control line exceeded"
ERR_MAX_PAYLOAD = "Maximum Payload Violation"

Event = tuple  # type: ignore[type-arg]  # see the module docstring for the shapes


def _unknown_op() -> ProtocolError:
    return ProtocolError("unknown protocol operation", client_error=ERR_UNKNOWN_OP)


def _bad_args(op: str) -> ProtocolError:
    return ProtocolError(f"malformed {op} arguments", client_error="")


def _size(token: bytes, op: str) -> int:
    if not token.isdigit():
        raise _bad_args(op)
    return int(token)


class ClientParser:
    __slots__ = ("_rest", "_need", "_pending", "_max_line", "_max_payload", "dead")

    def __init__(self, *, max_control_line: int, max_payload: int) -> None:
        assert max_control_line > 0
        assert max_payload > 0
        self._rest = bytearray()  # unparsed tail of earlier data
        self._need = 0  # bytes `_rest` must hold before parsing can progress (a pending payload)
        self._pending: tuple[int, bytes, bytes | None, int, int] | None = None  # op, subj, reply, hdr, size
        self._max_line = max_control_line
        self._max_payload = max_payload
        self.dead = False

    def set_limits(self, *, max_control_line: int, max_payload: int) -> None:
        """New limits for what is parsed from now on (a config reload)."""
        assert max_control_line > 0 and max_payload > 0
        self._max_line = max_control_line
        self._max_payload = max_payload

    @property
    def buffered_bytes(self) -> int:
        return len(self._rest)

    def feed(self, data: bytes, out: list[Event]) -> None:
        assert not self.dead, "feed() after a protocol error"
        if self._rest:
            self._rest += data
            if len(self._rest) < self._need:
                return
            if self._pending is None and b"\n" not in data:
                self._check_line_length(len(self._rest))
                return
            buf = bytes(self._rest)
            self._rest.clear()
        else:
            buf = data
        try:
            pos = self._parse(buf, out)
        except ProtocolError:
            self.dead = True
            raise
        if pos < len(buf):
            self._rest += memoryview(buf)[pos:]
            if self._pending is None:
                self._check_line_length(len(self._rest))

    def _check_line_length(self, length: int) -> None:
        if length > self._max_line:
            self.dead = True
            raise ProtocolError("control line too long", client_error=ERR_CONTROL_LINE)

    def _parse(self, buf: bytes, out: list[Event]) -> int:
        """Parse whole operations from buf; return the offset of the first unconsumed byte."""
        pos = 0
        n = len(buf)
        find = buf.find
        max_line = self._max_line
        max_payload = self._max_payload
        if self._pending is not None:
            pos = self._finish_payload(buf, 0, out)
            if pos < 0:
                return 0
        while pos < n:
            pos = scan_pubs(buf, pos, max_line, max_payload, out)
            if pos >= n:
                return pos
            eol = find(b"\n", pos)
            if eol < 0:
                return pos
            if eol - pos > max_line:
                raise ProtocolError("control line too long", client_error=ERR_CONTROL_LINE)
            end = eol - 1 if eol > pos and buf[eol - 1] == 13 else eol
            pos = self._parse_other(buf, pos, eol, end, out)
            if pos < 0:
                return -pos - 1
        return pos

    def _finish_payload(self, buf: bytes, pos: int, out: list[Event]) -> int:
        """Complete the pending (H)PUB whose control line starts at pos; -1 if still short."""
        assert self._pending is not None
        op, subject, reply, header_size, size = self._pending
        eol = buf.find(b"\n", pos)
        assert eol >= 0
        start = eol + 1
        stop = start + size
        if stop + 2 > len(buf):
            return -1
        if buf[stop : stop + 2] != b"\r\n":
            raise _unknown_op()
        self._pending = None
        self._need = 0
        if op == OP_PUB:
            out.append((OP_PUB, subject, reply, buf[start:stop]))
        else:
            out.append((OP_HPUB, subject, reply, buf[start : start + header_size], buf[start:stop]))
        return stop + 2

    def _parse_other(self, buf: bytes, pos: int, eol: int, end: int, out: list[Event]) -> int:
        """Every op but the uppercase-PUB fast path. Returns the next offset, or -(pos+1) to wait."""
        line = buf[pos:end]
        head, _, rest = line.replace(b"\t", b" ").partition(b" ")
        op = head.upper()
        if op == b"PUB":
            args = rest.split()
            if len(args) not in (2, 3):
                raise _bad_args("PUB")
            return self._payload_op(buf, pos, eol, out, OP_PUB, args[0], args[1] if len(args) == 3 else None,
                                    0, _size(args[-1], "PUB"))
        if op == b"HPUB":
            args = rest.split()
            if len(args) not in (3, 4):
                raise _bad_args("HPUB")
            header_size = _size(args[-2], "HPUB")
            size = _size(args[-1], "HPUB")
            if header_size > size:
                raise _bad_args("HPUB")
            return self._payload_op(buf, pos, eol, out, OP_HPUB, args[0], args[1] if len(args) == 4 else None,
                                    header_size, size)
        if op == b"SUB":
            args = rest.split()
            if len(args) == 2:
                out.append((OP_SUB, args[0], None, args[1]))
            elif len(args) == 3:
                out.append((OP_SUB, args[0], args[1], args[2]))
            else:
                raise _bad_args("SUB")
            return eol + 1
        if op == b"UNSUB":
            args = rest.split()
            if len(args) == 1:
                out.append((OP_UNSUB, args[0], None))
            elif len(args) == 2:
                max_msgs = int(args[1]) if args[1].isdigit() else None
                out.append((OP_UNSUB, args[0], max_msgs))
            else:
                raise _unknown_op() if not args else _bad_args("UNSUB")
            return eol + 1
        if op.startswith(b"PING"):
            out.append((OP_PING,))
            return eol + 1
        if op.startswith(b"PONG"):
            out.append((OP_PONG,))
            return eol + 1
        if op == b"CONNECT":
            if not rest.strip():
                raise _bad_args("CONNECT")
            out.append((OP_CONNECT, rest))
            return eol + 1
        if op == b"INFO":
            out.append((OP_INFO,))
            return eol + 1
        if op == b"+OK":
            out.append((OP_OK,))
            return eol + 1
        if op == b"-ERR":
            raise ProtocolError("client sent -ERR", client_error="")
        raise _unknown_op()

    def _payload_op(self, buf: bytes, pos: int, eol: int, out: list[Event], op: int, subject: bytes,
                    reply: bytes | None, header_size: int, size: int) -> int:
        if size > self._max_payload:
            raise ProtocolError("payload too large", client_error=ERR_MAX_PAYLOAD)
        start = eol + 1
        stop = start + size
        if stop + 2 > len(buf):
            self._pending = (op, subject, reply, header_size, size)
            self._need = size + 2 + (eol + 1 - pos)
            return -pos - 1
        if buf[stop : stop + 2] != b"\r\n":
            raise _unknown_op()
        if op == OP_PUB:
            out.append((OP_PUB, subject, reply, buf[start:stop]))
        else:
            out.append((OP_HPUB, subject, reply, buf[start : start + header_size], buf[start:stop]))
        return stop + 2
