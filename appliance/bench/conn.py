"""A blocking raw-protocol NATS connection for one bench client process.

One receive buffer of BENCH_READ_BUFFER_BYTES; hot loops call `pump`, which counts MSG/HMSG frames
with `scan` (C when built) and hands everything else to the full parser: PING is answered, PONG
counted, -ERR raised as BrokenError, and status or error messages collected in `specials` for
the caller. Setup code uses `request`/`next_msg`, which go through the full parser only.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from appliance.bench import wire
from appliance.bench.scan import (
    FLAG_OUT_ACK,
    FLAG_OUT_ECHO,
    STOP_NEED_MORE,
    STOP_OTHER,
    scan,
)
from appliance.errors import BrokenError, ClosedError, LimitExceeded
from appliance.limits import (
    BENCH_IDLE_TIMEOUT_S,
    BENCH_READ_BUFFER_BYTES,
    CONTROL_LINE_BYTES_MAX,
    PAYLOAD_BYTES_MAX,
)

SPECIALS_MAX = 65_536  # status/error messages held for the caller between two reads
ROOM_MIN_BYTES = PAYLOAD_BYTES_MAX + CONTROL_LINE_BYTES_MAX + 2


@dataclass(frozen=True, slots=True)
class Endpoint:
    host: str
    port: int
    user: str | None = None
    password: str | None = None
    token: str | None = None

    @classmethod
    def parse(cls, url: str) -> Endpoint:
        """nats://[user:pass@ | token@]host[:port]; the first of a comma-separated list."""
        first = url.split(",")[0].strip()
        if "://" not in first:
            first = "nats://" + first
        parts = urlsplit(first)
        if parts.hostname is None:
            raise ValueError(f"no host in url {url!r}")
        if parts.username is not None and parts.password is None:
            return cls(parts.hostname, parts.port or 4222, token=parts.username)
        return cls(parts.hostname, parts.port or 4222, parts.username, parts.password)


class Connection:
    def __init__(self, endpoint: Endpoint, *, name: str, timeout_s: float = BENCH_IDLE_TIMEOUT_S) -> None:
        self.endpoint = endpoint
        self.timeout_s = timeout_s
        self.buf = bytearray(BENCH_READ_BUFFER_BYTES)
        self.start = 0
        self.end = 0
        self.pongs = 0
        self.info: dict[str, object] = {}
        self.specials: list[wire.Msg] = []
        self.last_reply: bytes | None = None
        self.inbox_prefix = b"_INBOX.bench%d%x" % (os.getpid(), id(self) & 0xFFFFFF)
        self._inbox_sid = 0
        self._next_sid = 1
        self._request_id = 0
        self.sock = socket.create_connection((endpoint.host, endpoint.port), timeout=timeout_s)
        self._timeout_now_s = timeout_s
        try:
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._handshake(name)
        except BaseException:
            self.sock.close()  # a server that accepts but never answers (a stopped process) leaks no socket
            raise

    def _handshake(self, name: str) -> None:
        event = self.next_event()
        if not isinstance(event, wire.Info):
            raise BrokenError(f"expected INFO first, got {event!r}")
        self.info = event.fields
        ep = self.endpoint
        self.send(wire.connect_line(name=name, user=ep.user, password=ep.password, token=ep.token) + wire.PING)
        self.flush_wait(self.pongs + 1)

    # --- bytes in --------------------------------------------------------------------------------
    def fill(self, timeout_s: float | None = None) -> bool:
        """Read once into the buffer; False on timeout. Raises ClosedError when the server closed."""
        if self.start == self.end:
            self.start = self.end = 0
        elif len(self.buf) - self.end < ROOM_MIN_BYTES:
            pending = self.end - self.start
            self.buf[0:pending] = self.buf[self.start : self.end]
            self.start, self.end = 0, pending
        assert self.end < len(self.buf), "the caller consumes what it reads: a frame is at most 1 MiB"
        self._set_timeout(self.timeout_s if timeout_s is None else timeout_s)
        try:
            with memoryview(self.buf) as view:
                received = self.sock.recv_into(view[self.end :])
        except (TimeoutError, BlockingIOError):
            return False
        if received == 0:
            raise ClosedError("server closed the connection")
        self.end += received
        return True

    def fill_nowait(self) -> bool:
        """Read what is already there without blocking (drains PINGs during publish loops)."""
        return self.fill(0.0)

    def pump(self, flags: int = 0, out: bytearray | None = None) -> tuple[int, int]:
        """Consume everything buffered: (data messages, their bytes). Specials go to self.specials."""
        msgs = data_bytes = 0
        while True:
            pos, count, size, stop, reply_start, reply_end = scan(self.buf, self.start, self.end, flags, out)
            msgs += count
            data_bytes += size
            if reply_start >= 0:
                self.last_reply = bytes(self.buf[reply_start:reply_end])
            self.start = pos
            if stop == STOP_NEED_MORE:
                return msgs, data_bytes
            event, after = wire.parse_one(self.buf, pos, self.end)
            if event is None:
                return msgs, data_bytes
            self.start = after
            if isinstance(event, wire.Msg) and stop == STOP_OTHER and event.status is None:
                msgs += 1  # a data message scan left to the full parser (e.g. a lower-case `msg`)
                data_bytes += len(event.payload) + len(event.headers or b"")
                self._reply_slow(event, flags, out)
            else:
                self.handle(event)

    def take_one(self) -> int | None:
        """Consume the one operation at the read position with the full parser: 1 if it was a data
        message (counted), else 0 after handling it (PONG a PING, raise on -ERR); None while it is
        incomplete (the caller reads more)."""
        event, after = wire.parse_one(self.buf, self.start, self.end)
        if event is None:
            return None
        self.start = after
        if isinstance(event, wire.Msg) and event.status is None:
            return 1
        self.handle(event)
        return 0

    def _reply_slow(self, msg: wire.Msg, flags: int, out: bytearray | None) -> None:
        if msg.reply is None:
            return
        self.last_reply = msg.reply
        if out is not None and flags & FLAG_OUT_ACK:
            out += wire.pub(msg.reply, b"")
        elif out is not None and flags & FLAG_OUT_ECHO:
            out += wire.pub(msg.reply, msg.payload)

    def handle(self, event: wire.Event) -> None:
        """React to one non-data operation: PONG a PING, count a PONG, raise on -ERR, keep a status msg."""
        if isinstance(event, wire.Ping):
            self.send(wire.PONG)
        elif isinstance(event, wire.Pong):
            self.pongs += 1
        elif isinstance(event, wire.Err):
            raise BrokenError(f"server error: -ERR '{event.text}'")
        elif isinstance(event, wire.Msg):
            if len(self.specials) >= SPECIALS_MAX:
                raise LimitExceeded(f"more than {SPECIALS_MAX} status messages not taken by the caller")
            self.specials.append(event)
        elif isinstance(event, wire.Info):
            self.info = event.fields

    def next_event(self, timeout_s: float | None = None) -> wire.Event:
        """The next operation of any kind, through the full parser (setup paths only)."""
        deadline = time.monotonic() + (self.timeout_s if timeout_s is None else timeout_s)
        while True:
            event, after = wire.parse_one(self.buf, self.start, self.end)
            if event is not None:
                self.start = after
                return event
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self.fill(remaining):
                raise TimeoutError("no data from server in time")

    def next_msg(self, timeout_s: float | None = None) -> wire.Msg:
        """The next message; answers PINGs, counts PONGs, raises on -ERR."""
        deadline = time.monotonic() + (self.timeout_s if timeout_s is None else timeout_s)
        while True:
            if self.specials:
                return self.specials.pop(0)
            event = self.next_event(max(0.001, deadline - time.monotonic()))
            if isinstance(event, wire.Msg):
                return event
            self.handle(event)

    # --- bytes out -------------------------------------------------------------------------------
    def _set_timeout(self, timeout_s: float) -> None:
        """settimeout costs a syscall; hot loops call this with the same value again and again."""
        if timeout_s != self._timeout_now_s:
            self.sock.settimeout(timeout_s)
            self._timeout_now_s = timeout_s

    def send(self, data: bytes | bytearray | memoryview) -> None:
        self._set_timeout(self.timeout_s)
        try:
            self.sock.sendall(data)
        except TimeoutError as exc:
            raise BrokenError("server did not read our data in time") from exc

    def new_sid(self) -> int:
        sid = self._next_sid
        self._next_sid += 1
        return sid

    def subscribe(self, subject: bytes, queue: bytes | None = None) -> int:
        sid = self.new_sid()
        self.send(wire.sub(subject, sid, queue))
        return sid

    def ensure_inbox(self) -> None:
        """Subscribe to this connection's `<inbox_prefix>.*` once (a second SUB would double every reply)."""
        if self._inbox_sid == 0:
            self._inbox_sid = self.subscribe(self.inbox_prefix + b".*")

    def flush_wait(self, pongs: int, timeout_s: float | None = None) -> None:
        """Wait until `pongs` PONGs have arrived (send a PING first); data messages are counted away."""
        deadline = time.monotonic() + (self.timeout_s if timeout_s is None else timeout_s)
        while self.pongs < pongs:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("no PONG from server in time")
            event = self.next_event(remaining)
            self.handle(event)

    def flush(self, timeout_s: float | None = None) -> None:
        self.send(wire.PING)
        self.flush_wait(self.pongs + 1, timeout_s)

    def request(self, subject: bytes, payload: bytes, timeout_s: float | None = None) -> wire.Msg:
        """One request/reply on this connection's inbox (setup paths only)."""
        self.ensure_inbox()
        self._request_id += 1
        reply = b"%s.%d" % (self.inbox_prefix, self._request_id)
        self.send(wire.pub(subject, payload, reply))
        deadline = time.monotonic() + (self.timeout_s if timeout_s is None else timeout_s)
        while True:
            msg = self.next_msg(max(0.001, deadline - time.monotonic()))
            if msg.subject == reply:
                return msg

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
