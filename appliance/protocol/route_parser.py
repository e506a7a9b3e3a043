"""Sans-I/O parser and writer for the NATS route protocol (server ↔ server, no pooling).

Theory of operation: as the client parser, `feed(data, out)` appends one event tuple per complete
operation and keeps an incomplete tail, so the events never depend on how the bytes were split.
The grammar is nats-server's un-pooled route (spec/cluster-and-routes.md §3): every interest and
message line names its account.

    (R_INFO,    json_bytes)
    (R_CONNECT, json_bytes)
    (R_PING,)   (R_PONG,)   (R_OK,)
    (R_ERR,     text_bytes)                                   # -ERR '...' from the peer
    (R_SUB,     account, subject, queue | None, weight)        # RS+ (weight 0 without a queue)
    (R_UNSUB,   account, subject, queue | None)               # RS-
    (R_MSG,     account, subject, reply | None, queues, header | None, data)
                                                               # RMSG/HMSG; queues: tuple of names;
                                                               # data includes the header block
    (R_RUN,     account, [(1, subject, reply | None, payload), ...])
                                                               # consecutive plain RMSGs (no headers,
                                                               # no queues) of one account, each as a
                                                               # client PUB event: the receiving hot
                                                               # path hands runs to the PUB burst writers

All fields are bytes. On a protocol violation `feed` raises ProtocolError (after appending the events
before it) whose `client_error` is the text of the `-ERR` to send before closing; the parser is dead
after an error. Ops are case-insensitive, arguments are split on spaces or tabs, a control line may
end in a bare LF, a payload must be followed by exactly CRLF.

The `LS+`/`LS-`/`LMSG` leafnode-origin forms are not accepted: we never advertise `lnoc`, so a
peer never sends them (spec §1.3).
"""

from __future__ import annotations

from appliance import native
from appliance.errors import ProtocolError
from appliance.protocol._scan_py import ROUTE_RUN
from appliance.protocol._scan_py import scan_rmsgs as _scan_rmsgs_py

scan_rmsgs = native.speedups.scan_rmsgs if native.ENABLED and hasattr(native.speedups, "scan_rmsgs") else _scan_rmsgs_py

R_INFO = 1
R_CONNECT = 2
R_PING = 3
R_PONG = 4
R_OK = 5
R_ERR = 6
R_SUB = 7
R_UNSUB = 8
R_MSG = 9
R_RUN = ROUTE_RUN
OP_PUB = 1  # a run's messages have the shape of the client parser's PUB events

ERR_UNKNOWN_OP = "Unknown Protocol Operation"
ERR_CONTROL_LINE = "maximum control line exceeded"
ERR_MAX_PAYLOAD = "Maximum Payload Violation"

Event = tuple  # type: ignore[type-arg]  # see the module docstring for the shapes


def _bad_args(op: str, line: bytes) -> ProtocolError:
    text = f"processing {op} arguments: {line[:64].decode(errors='replace')!r}"
    return ProtocolError(f"malformed {op} arguments", client_error=text)


def _size(token: bytes, op: str, line: bytes) -> int:
    if not token.isdigit():
        raise _bad_args(op, line)
    return int(token)


class RouteParser:
    __slots__ = ("_rest", "_pending", "_max_line", "_max_payload", "dead")

    def __init__(self, *, max_control_line: int, max_payload: int) -> None:
        assert max_control_line > 0
        assert max_payload > 0
        self._rest = bytearray()
        # a message whose payload has not fully arrived: (account, subject, reply, queues, header size, size)
        self._pending: tuple[bytes, bytes, bytes | None, tuple[bytes, ...], int, int] | None = None
        self._max_line = max_control_line
        self._max_payload = max_payload
        self.dead = False

    @property
    def buffered_bytes(self) -> int:
        return len(self._rest)

    def feed(self, data: bytes, out: list[Event]) -> None:
        assert not self.dead, "feed() after a protocol error"
        self._rest += data
        pending = self._pending
        if pending is not None and len(self._rest) < pending[5] + 2:
            return  # the payload of a large message is still arriving
        buf = bytes(self._rest)
        try:
            pos = self._parse(buf, out)
        except ProtocolError:
            self.dead = True
            raise
        del self._rest[:pos]
        if self._pending is None and len(self._rest) > self._max_line:
            self.dead = True
            raise ProtocolError("control line too long", client_error=ERR_CONTROL_LINE)

    def _parse(self, buf: bytes, out: list[Event]) -> int:
        pos = 0
        n = len(buf)
        find = buf.find
        max_line = self._max_line
        max_payload = self._max_payload
        while pos < n:
            if self._pending is not None:
                after = self._finish_message(buf, pos, out)
                if after < 0:
                    return pos
                pos = after
                continue
            pos = scan_rmsgs(buf, pos, max_line, max_payload, out)  # the hot path: runs of plain RMSGs
            if pos >= n:
                return pos
            eol = find(b"\n", pos)
            if eol < 0:
                return pos
            if eol - pos > max_line:
                raise ProtocolError("control line too long", client_error=ERR_CONTROL_LINE)
            end = eol - 1 if eol > pos and buf[eol - 1] == 13 else eol
            self._parse_line(buf[pos:end], out)
            pos = eol + 1
        return pos

    def _finish_message(self, buf: bytes, pos: int, out: list[Event]) -> int:
        """The payload of the pending message at buf[pos:]; -1 while it is incomplete."""
        assert self._pending is not None
        account, subject, reply, queues, header_size, size = self._pending
        stop = pos + size
        if stop + 2 > len(buf):
            return -1
        if buf[stop : stop + 2] != b"\r\n":
            raise ProtocolError("message payload not followed by CRLF", client_error=ERR_UNKNOWN_OP)
        self._pending = None
        data = buf[pos:stop]
        if header_size < 0 and not queues and (reply is None or b"@" not in reply):
            if out and out[-1][0] == R_RUN and out[-1][1] == account:
                out[-1][2].append((OP_PUB, subject, reply, data))
            else:
                out.append((R_RUN, account, [(OP_PUB, subject, reply, data)]))
            return stop + 2
        header = data[:header_size] if header_size >= 0 else None
        out.append((R_MSG, account, subject, reply, queues, header, data))
        return stop + 2

    def _parse_line(self, line: bytes, out: list[Event]) -> None:
        head, _, rest = line.replace(b"\t", b" ").partition(b" ")
        op = head.upper()
        if op == b"RMSG" or op == b"HMSG":
            self._message_line(op, rest, line)
        elif op == b"RS+":
            args = rest.split()
            if len(args) == 2:
                out.append((R_SUB, args[0], args[1], None, 0))
            elif len(args) == 4:
                weight = _size(args[3], "RS+", line)
                if weight < 1:
                    raise _bad_args("RS+", line)
                out.append((R_SUB, args[0], args[1], args[2], weight))
            else:
                raise _bad_args("RS+", line)
        elif op == b"RS-":
            args = rest.split()
            if len(args) == 2:
                out.append((R_UNSUB, args[0], args[1], None))
            elif len(args) == 3:
                out.append((R_UNSUB, args[0], args[1], args[2]))
            else:
                raise _bad_args("RS-", line)
        elif op.startswith(b"PING"):
            out.append((R_PING,))
        elif op.startswith(b"PONG"):
            out.append((R_PONG,))
        elif op == b"INFO":
            if not rest.strip():
                raise _bad_args("INFO", line)
            out.append((R_INFO, rest.strip()))
        elif op == b"CONNECT":
            if not rest.strip():
                raise _bad_args("CONNECT", line)
            out.append((R_CONNECT, rest.strip()))
        elif op == b"+OK":
            out.append((R_OK,))
        elif op == b"-ERR":
            out.append((R_ERR, rest.strip().strip(b"'")))
        else:
            raise ProtocolError("unknown protocol operation", client_error=ERR_UNKNOWN_OP)

    def _message_line(self, op: bytes, rest: bytes, line: bytes) -> None:
        name = op.decode()
        args = rest.split()
        sizes = 2 if op == b"HMSG" else 1
        if len(args) < 2 + sizes:
            raise _bad_args(name, line)
        account, subject = args[0], args[1]
        middle = args[2:-sizes]
        reply: bytes | None = None
        queues: tuple[bytes, ...] = ()
        if len(middle) == 1:
            reply = middle[0]
        elif len(middle) > 1:
            if middle[0] == b"+" and len(middle) >= 3:
                reply = middle[1]
                queues = tuple(middle[2:])
            elif middle[0] == b"|":
                queues = tuple(middle[1:])
            else:
                raise _bad_args(name, line)
        size = _size(args[-1], name, line)
        header_size = _size(args[-2], name, line) if sizes == 2 else -1
        if header_size > size:
            raise _bad_args(name, line)
        if size > self._max_payload:
            raise ProtocolError("payload too large", client_error=ERR_MAX_PAYLOAD)
        self._pending = (account, subject, reply, queues, header_size, size)


# --- writer ---------------------------------------------------------------------------------------

def rs_plus(account: bytes, subject: bytes, queue: bytes | None = None, weight: int = 1) -> bytes:
    if queue is None:
        return b"RS+ %s %s\r\n" % (account, subject)
    assert weight >= 1
    return b"RS+ %s %s %s %d\r\n" % (account, subject, queue, weight)


def rs_minus(account: bytes, subject: bytes, queue: bytes | None = None) -> bytes:
    if queue is None:
        return b"RS- %s %s\r\n" % (account, subject)
    return b"RS- %s %s %s\r\n" % (account, subject, queue)


def append_rmsg(out: bytearray, account: bytes, subject: bytes, reply: bytes | None, queues: list[bytes] | tuple[bytes, ...],
                header_size: int, data: bytes) -> None:
    """RMSG (header_size -1) or HMSG, with the `+ reply q…` / `| q…` forms when queues are named."""
    out += b"HMSG " if header_size >= 0 else b"RMSG "
    out += account
    out += b" "
    out += subject
    out += b" "
    if queues:
        if reply:
            out += b"+ "
            out += reply
            out += b" "
        else:
            out += b"| "
        out += b" ".join(queues)
        out += b" "
    elif reply:
        out += reply
        out += b" "
    if header_size >= 0:
        out += b"%d %d\r\n" % (header_size, len(data))
    else:
        out += b"%d\r\n" % len(data)
    out += data
    out += b"\r\n"
