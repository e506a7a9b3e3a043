"""A small blocking NATS client for Spark tasks: one TCP connection (TLS when asked for, by a tls://
url or the server), CONNECT with user/password, token, an NKey or a user JWT (credentials.py),
SUB, (H)PUB, and a reader of MSG/HMSG frames with deadlines.

Spark runs the reader and writer in Python worker processes, one task at a time each: a blocking
socket is the simplest thing that is fast there (no event loop per task, and frames are parsed
straight out of one buffer). Server PINGs are answered; -ERR raises NatsError with the server's
text (e.g. 'Authorization Violation').
"""

from __future__ import annotations

import json
import os
import re
import socket
import ssl
import time
from dataclasses import dataclass, replace
from urllib.parse import unquote, urlsplit

from appliance.spark.credentials import Auth, TlsFiles

__all__ = ["Auth", "Connection", "Frame", "NatsError", "TlsFiles", "new_inbox", "parse_url", "status_of"]

DEFAULT_PORT = 4222
READ_CHUNK = 1 << 20
CONNECT_TIMEOUT_S = 10.0


class NatsError(Exception):
    """The server refused something (its -ERR text) or the connection failed."""


@dataclass(frozen=True, slots=True)
class Frame:
    subject: str
    reply: str
    headers: bytes  # the raw `NATS/1.0...\r\n\r\n` block, b"" for MSG
    payload: bytes


def parse_url(url: str, auth: Auth) -> tuple[str, int, Auth, bool]:
    """host, port, credentials and whether TLS is asked for, of `nats|tls://[user:pass@|token@]host[:port]`;
    credentials given as options win over the url's."""
    parts = urlsplit(url if "://" in url else f"nats://{url}")
    if parts.scheme not in ("nats", "tls"):
        raise ValueError(f"unsupported url scheme {parts.scheme!r} (nats:// or tls://)")
    host = parts.hostname or "127.0.0.1"
    port = parts.port or DEFAULT_PORT
    if auth.anonymous and parts.username:
        if parts.password is not None:
            auth = replace(auth, user=unquote(parts.username), password=unquote(parts.password))
        else:
            auth = replace(auth, token=unquote(parts.username))
    return host, port, auth, parts.scheme == "tls"


class Connection:
    def __init__(
        self, url: str, auth: Auth = Auth(), *, tls: TlsFiles = TlsFiles(), timeout_s: float = CONNECT_TIMEOUT_S,
        name: str = "",
    ) -> None:
        host, port, auth, tls_url = parse_url(url, auth)
        want_tls = tls.enabled or tls_url
        self.timeout_s = timeout_s
        try:
            self.sock: socket.socket = socket.create_connection((host, port), timeout=timeout_s)
        except OSError as exc:
            raise NatsError(f"cannot connect to {host}:{port}: {exc}") from exc
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()
        self.pos = 0
        self.out = bytearray()
        self.next_sid = 1
        try:
            if tls.handshake_first:
                self._start_tls(host, tls)
            line = self._line(time.monotonic() + timeout_s)
            if not line.startswith(b"INFO "):
                raise NatsError(f"not a NATS server: {bytes(line[:80])!r}")
            self.info = json.loads(line[5:])
            if not tls.handshake_first and (want_tls or self.info.get("tls_required")):
                # as nats.go: TLS when asked for or when the server requires it (then with the system CAs)
                if not (self.info.get("tls_required") or self.info.get("tls_available")):
                    raise NatsError(f"secure connection not available: {host}:{port} does not offer TLS")
                if self.pos != len(self.buf):
                    raise NatsError("unexpected data before the TLS handshake")
                self._start_tls(host, tls)
            self._connect(auth, name)
        except BaseException:
            self.sock.close()
            raise

    def _start_tls(self, host: str, tls: TlsFiles) -> None:
        try:
            self.sock = tls.context().wrap_socket(self.sock, server_hostname=host)
        except OSError as exc:  # ssl.SSLError included: a certificate not trusted, a refused client
            raise NatsError(f"TLS handshake with {host} failed: {exc}") from exc

    def _connect(self, auth: Auth, name: str) -> None:
        connect: dict[str, object] = {
            "verbose": False, "pedantic": False, "headers": True, "no_responders": True, "protocol": 1,
            "lang": "python-appliance-spark", "version": "1", "name": name or f"appliance-spark-{os.getpid()}",
            "tls_required": isinstance(self.sock, ssl.SSLSocket),
        }
        connect.update(auth.connect_fields(str(self.info.get("nonce", ""))))
        self.sock.sendall(b"CONNECT " + json.dumps(connect).encode() + b"\r\nPING\r\n")
        deadline = time.monotonic() + self.timeout_s
        while True:
            line = self._line(deadline)
            if line == b"PONG":
                break
            self._control(line)
        self.max_payload = int(self.info.get("max_payload", 1 << 20))

    # --- sending ------------------------------------------------------------------------------

    def subscribe(self, subject: str) -> int:
        sid = self.next_sid
        self.next_sid += 1
        self.out += b"SUB %s %d\r\n" % (subject.encode(), sid)
        return sid

    def unsubscribe(self, sid: int) -> None:
        self.out += b"UNSUB %d\r\n" % sid

    def publish(self, subject: str, payload: bytes, reply: str = "", headers: bytes = b"") -> None:
        """Queued; flush() sends. `headers` is a complete `NATS/1.0\\r\\n...\\r\\n\\r\\n` block or b""."""
        if len(payload) + len(headers) > self.max_payload:
            raise NatsError(f"maximum payload exceeded ({len(payload) + len(headers)} > {self.max_payload})")
        reply_part = b" " + reply.encode() if reply else b""
        if headers:
            self.out += b"HPUB %s%s %d %d\r\n" % (subject.encode(), reply_part, len(headers), len(headers) + len(payload))
            self.out += headers
        else:
            self.out += b"PUB %s%s %d\r\n" % (subject.encode(), reply_part, len(payload))
        self.out += payload
        self.out += b"\r\n"

    def flush(self) -> None:
        if self.out:
            self.sock.settimeout(self.timeout_s)
            self.sock.sendall(self.out)
            self.out.clear()

    def close(self) -> None:
        try:
            self.flush()
        except OSError:
            pass
        self.sock.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- receiving ----------------------------------------------------------------------------

    def _fill(self, deadline: float) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("no answer from the server in time")
        if self.pos:
            del self.buf[: self.pos]
            self.pos = 0
        self.sock.settimeout(remaining)
        try:
            chunk = self.sock.recv(READ_CHUNK)
        except TimeoutError:
            raise TimeoutError("no answer from the server in time") from None
        except ssl.SSLError as exc:  # e.g. the server refused our client certificate after the handshake
            raise NatsError(f"TLS: {exc}") from exc
        except OSError as exc:
            raise NatsError(f"connection lost: {exc}") from exc
        if not chunk:
            raise NatsError("connection closed by the server")
        self.buf += chunk

    def _line(self, deadline: float) -> bytes:
        while True:
            end = self.buf.find(b"\r\n", self.pos)
            if end >= 0:
                line = bytes(self.buf[self.pos : end])
                self.pos = end + 2
                return line
            self._fill(deadline)

    def _control(self, line: bytes) -> None:
        if line == b"PING":
            self.out += b"PONG\r\n"
            self.flush()
        elif line.startswith(b"-ERR"):
            raise NatsError(line[4:].strip().strip(b"'").decode(errors="replace"))
        elif line in (b"+OK", b"PONG") or line.startswith(b"INFO "):
            return
        else:
            raise NatsError(f"unexpected protocol line {line[:80]!r}")

    def next_frame(self, timeout_s: float | None = None) -> Frame:
        """The next MSG/HMSG (flushes pending output first); TimeoutError after timeout_s."""
        self.flush()
        deadline = time.monotonic() + (self.timeout_s if timeout_s is None else timeout_s)
        while True:
            line = self._line(deadline)
            if line.startswith(b"MSG ") or line.startswith(b"HMSG "):
                return self._frame(line, deadline)
            self._control(line)

    def take_buffered(self, pattern: re.Pattern[bytes]) -> tuple[re.Match[bytes], bytes] | None:
        """The next frame, consumed, if it is buffered whole and `pattern` matches it from its first
        byte: groups `hlen` and `total` are the HMSG sizes and group `block` must be exactly the
        header block. None otherwise (nothing consumed: next_frame reads it). Lets a hot loop take
        its common frames with one regex match each instead of a Frame and a header parse."""
        match = pattern.match(self.buf, self.pos)
        if match is None:
            return None
        start = match.start("block")
        if match.end("block") - start != int(match["hlen"]):
            return None
        end = start + int(match["total"])
        if end + 2 > len(self.buf) or self.buf[end : end + 2] != b"\r\n":
            return None
        payload = bytes(self.buf[match.end("block") : end])
        self.pos = end + 2
        return match, payload

    def _frame(self, line: bytes, deadline: float) -> Frame:
        args = line.split()
        if args[0] == b"HMSG":
            subject, reply = args[1], args[3] if len(args) == 6 else b""
            header_size, total = int(args[-2]), int(args[-1])
        else:
            subject, reply = args[1], args[3] if len(args) == 5 else b""
            header_size, total = 0, int(args[-1])
        while len(self.buf) - self.pos < total + 2:
            self._fill(deadline)
        start = self.pos
        headers = bytes(self.buf[start : start + header_size])
        payload = bytes(self.buf[start + header_size : start + total])
        self.pos = start + total + 2
        return Frame(subject.decode(), reply.decode(), headers, payload)


def status_of(headers: bytes) -> tuple[int, str]:
    """(code, description) of a status header block (`NATS/1.0 404 Message Not Found`), (0, "") if none."""
    if not headers:
        return 0, ""
    first = headers.split(b"\r\n", 1)[0]
    parts = first.split(b" ", 2)
    if len(parts) < 2 or not parts[1].isdigit():
        return 0, ""
    return int(parts[1]), parts[2].decode(errors="replace") if len(parts) > 2 else ""


def new_inbox() -> str:
    return "_INBOX." + os.urandom(11).hex()
