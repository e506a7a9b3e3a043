"""WebSocket clients: the client protocol inside WebSocket frames, on the `websocket {}` port.

As nats-server (server/websocket.go): the client opens with an HTTP/1.1 upgrade (GET, `Upgrade:
websocket`, `Connection: Upgrade`, a key, version 13); the origin is checked when `same_origin` or
`allowed_origins` asks for it; a refused upgrade gets Go's `http.Error` answer (status text as body,
`Sec-Websocket-Version: 13`) and the log line `<addr> - websocket handshake error: <reason>`. After
the `101 Switching Protocols` the server sends INFO first, in a binary frame, and from then on
every byte of the NATS protocol travels in frames both ways. `compression` accepts the client's
permessage-deflate offer. With `tls {}` the TLS handshake comes first (asyncio's server-side SSL,
which owns the socket from its first byte), then the HTTP upgrade.

`WebSocketLayer` sits between the socket's transport and a `ClientConnection`, as server/tls.py's
layer does: wsproto (sans-I/O) turns the bytes read into messages whose payloads go to the
connection's parser — all the messages of one read in one call — and each write of the connection
becomes one binary frame. A bad frame closes that connection only (a close frame with wsproto's
status, then "Read Error"). The plain client port never comes here.
"""

from __future__ import annotations

import asyncio
import email.utils
import http.cookies
import logging
import ssl
import urllib.parse
from dataclasses import dataclass
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Ping,
    Request,
    TextMessage,
)
from wsproto.extensions import Extension, PerMessageDeflate
from wsproto.utilities import RemoteProtocolError

from appliance import limits
from appliance.config.options import ServerOptions
from appliance.config.tls_context import cipher_name, server_context, version_name
from appliance.server.tls_map import identity_from_cert
from appliance.server.tls_pump import SocketLayer

if TYPE_CHECKING:
    from appliance.server.client import ClientConnection

logger = logging.getLogger(__name__)

REASON_READ_ERROR = "Read Error"
REASON_CLIENT_CLOSED = "Client Closed"
CLOSE_NORMAL = 1000

# wsproto's reasons for a refused request -> nats-server's (status, reason) for the same check
_REFUSALS = {
    "Request method must be GET": (HTTPStatus.METHOD_NOT_ALLOWED, "request method must be GET"),
    "Missing header, 'Connection: Upgrade'": (HTTPStatus.BAD_REQUEST, "invalid value for header 'Connection'"),
    "Missing header, 'Sec-WebSocket-Version'": (HTTPStatus.BAD_REQUEST, "invalid version"),
    "Missing header, 'Sec-WebSocket-Key'": (HTTPStatus.BAD_REQUEST, "key missing"),
    "Missing header, 'Upgrade: websocket'": (HTTPStatus.BAD_REQUEST, "invalid value for header 'Upgrade'"),
    "Missing header, 'Host'": (HTTPStatus.BAD_REQUEST, "'Host' missing in request"),
}


@dataclass(frozen=True, slots=True)
class AllowedOrigin:
    scheme: str
    port: str


@dataclass(frozen=True, slots=True)
class WebsocketServing:
    """What a worker needs to serve WebSocket clients."""

    context: ssl.SSLContext | None  # wss:// when set
    handshake_timeout_s: float
    compression: bool
    same_origin: bool
    allowed_origins: dict[str, AllowedOrigin]  # lower-case host -> scheme and port
    # CONNECT field -> the upgrade request's cookie whose value stands in for it when CONNECT has none
    # (jwt_cookie, user_cookie, pass_cookie, token_cookie)
    cookies: tuple[tuple[str, str], ...] = ()

    @property
    def tls(self) -> bool:
        return self.context is not None


def serving_from_options(options: ServerOptions) -> WebsocketServing | None:
    ws = options.websocket
    if ws.port == 0:
        return None
    context = None if ws.tls is None else server_context(ws.tls)
    timeout = ws.handshake_timeout_s
    if timeout <= 0:
        timeout = ws.tls.timeout_s if ws.tls is not None else limits.WS_HANDSHAKE_TIMEOUT_S
    cookies = tuple((field_name, cookie) for field_name, cookie in (
        ("jwt", ws.jwt_cookie), ("user", ws.user_cookie), ("pass", ws.pass_cookie), ("auth_token", ws.token_cookie),
    ) if cookie)
    allowed: dict[str, AllowedOrigin] = {}
    for origin in ws.allowed_origins:
        parts = urllib.parse.urlsplit(origin)
        host, port = host_and_port(parts.scheme == "https", parts.netloc)
        allowed[host] = AllowedOrigin(scheme=parts.scheme, port=port)
    return WebsocketServing(context=context, handshake_timeout_s=timeout, compression=ws.compression,
                            same_origin=ws.same_origin, allowed_origins=allowed, cookies=cookies)


def host_and_port(tls: bool, hostport: str) -> tuple[str, str]:
    """nats-server's wsGetHostAndPort: lower-case host; a missing port is the scheme's default."""
    if hostport.startswith("["):
        host, _, rest = hostport[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif hostport.count(":") == 1:
        host, _, port = hostport.partition(":")
    else:
        host, port = hostport, ""
    return host.lower(), port or ("443" if tls else "80")


def origin_refusal(serving: WebsocketServing, request: Request, *, tls: bool) -> str | None:
    """Why the request's origin is refused, or None (nats-server's checkOrigin)."""
    if not serving.same_origin and not serving.allowed_origins:
        return None
    headers = {name.lower(): value for name, value in request.extra_headers}
    origin = (headers.get(b"origin") or headers.get(b"sec-websocket-origin") or b"").decode("latin-1")
    if not origin:  # no Origin: not a browser, accepted (RFC 6455 1.6)
        return None
    parts = urllib.parse.urlsplit(origin)
    if not parts.scheme or not parts.netloc:
        return f'parse "{origin}": invalid URI for request'
    host, port = host_and_port(parts.scheme == "https", parts.netloc)
    if serving.same_origin and (host, port) != host_and_port(tls, request.host):
        return "not same origin"
    if serving.allowed_origins:
        allowed = serving.allowed_origins.get(host)
        if allowed is None or allowed.scheme != parts.scheme or allowed.port != port:
            return "not in the allowed list"
    return None


def cookie_value(request: Request, name: str) -> str:
    """The value of cookie `name` in the upgrade request's Cookie headers ('' when absent)."""
    for header, value in request.extra_headers:
        if header.lower() != b"cookie":
            continue
        jar = http.cookies.SimpleCookie()
        try:
            jar.load(value.decode("latin-1"))
        except http.cookies.CookieError:
            continue
        if name in jar:
            return jar[name].value
    return ""


def http_error(status: HTTPStatus) -> bytes:
    """Go's http.Error answer as nats-server's wsReturnHTTPError sends it (then we close)."""
    body = f"{status.phrase}\n".encode()
    return (f"HTTP/1.1 {status.value} {status.phrase}\r\n"
            "Content-Type: text/plain; charset=utf-8\r\n"
            "Sec-Websocket-Version: 13\r\n"
            "X-Content-Type-Options: nosniff\r\n"
            f"Date: {email.utils.formatdate(usegmt=True)}\r\n"
            f"Content-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n").encode() + body


class WebSocketLayer(SocketLayer):
    """The socket's protocol and the connection's transport, with WebSocket frames in between."""

    def __init__(self, conn: ClientConnection, serving: WebsocketServing) -> None:
        super().__init__()
        self.conn = conn
        self.serving = serving
        self._ws = WSConnection(ConnectionType.SERVER)
        self._open = False  # upgraded: frames flow
        self._refused = False
        self._where = ""
        self._head_tail = b""  # the last bytes of the request seen so far (to find its end)
        self._early_data = False
        # the fast path: whole, masked, uncompressed binary frames unmasked here (wsproto's frame
        # parser costs tens of microseconds a frame); anything else and wsproto takes over for good
        self._fast = False
        self._header = b""  # an incomplete frame header (at most 13 bytes)
        self._remaining = 0  # payload bytes of the current frame still to come
        self._mask = b""  # its mask, rotated to where the next payload byte is
        self._plain_out = False  # no compression: our frames are built in write()

    # --- the socket's side (asyncio.Protocol) ----------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.raw = transport  # type: ignore[assignment]  # uvloop's is not an asyncio.Transport
        peer = transport.get_extra_info("peername")
        self._where = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else "?"
        self._timer = self.conn.server.loop.call_later(self.serving.handshake_timeout_s, self._handshake_timeout)

    def data_received(self, data: bytes) -> None:
        if self._fast:
            self._fast_received(data)
            return
        if self._refused or self.raw is None:
            return
        if not self._open:  # where the request ends: nothing may follow it before our answer
            seen = self._head_tail + data
            end = seen.find(b"\r\n\r\n")
            self._early_data = self._early_data or (end >= 0 and len(seen) > end + 4)
            self._head_tail = seen[-3:]
        try:
            self._ws.receive_data(data)
        except RemoteProtocolError as error:
            status, reason = _REFUSALS.get(str(error), (HTTPStatus.BAD_REQUEST, str(error)))
            self._refuse(status, reason)
            return
        payloads: list[bytes] = []
        for event in self._ws.events():
            if isinstance(event, BytesMessage | TextMessage):
                data = event.data
                payloads.append(data.encode() if isinstance(data, str) else bytes(data))
            elif isinstance(event, Request):
                if self._early_data:
                    self._refuse(HTTPStatus.BAD_REQUEST, "client sent data before handshake is complete")
                    return
                if not self._upgrade(event):
                    return
            elif isinstance(event, Ping):
                self._send(event.response())
            elif isinstance(event, CloseConnection):
                self._closed_by_peer(event, payloads)
                return
        if payloads and self._open:
            self.conn.data_received(payloads[0] if len(payloads) == 1 else b"".join(payloads))

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timer()
        if self._open:
            self.conn.connection_lost(exc)

    def pause_writing(self) -> None:
        if self._open:
            self.conn.pause_writing()

    def resume_writing(self) -> None:
        if self._open:
            self.conn.resume_writing()

    # --- the connection's side (what ClientConnection calls on its transport) ----------------------

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not self._open or self._ws.state is not ConnectionState.OPEN:
            return
        if self._plain_out:  # a whole binary frame, unmasked as a server's are, built here
            size = len(data)
            if size < 126:
                head = bytes((0x82, size))
            elif size < 65536:
                head = b"\x82\x7e" + size.to_bytes(2, "big")
            else:
                head = b"\x82\x7f" + size.to_bytes(8, "big")
            if self.raw is not None and not self.raw.is_closing():
                self.raw.write(head + data)
            return
        self._send(BytesMessage(data=bytes(data)))

    def close(self) -> None:
        """A close frame (as nats-server sends one), then the socket closes after writing."""
        self._cancel_timer()
        if self.raw is None or self.raw.is_closing():
            return
        if self._ws.state is ConnectionState.OPEN:
            self._send(CloseConnection(code=CLOSE_NORMAL))
        self.raw.close()

    # --- internals --------------------------------------------------------------------------------

    def _upgrade(self, request: Request) -> bool:
        refusal = origin_refusal(self.serving, request, tls=self.serving.tls)
        if refusal is not None:
            self._refuse(HTTPStatus.FORBIDDEN, f"origin not allowed: {refusal}")
            return False
        extensions: list[Extension] = [PerMessageDeflate()] if self.serving.compression else []
        self._send(AcceptConnection(extensions=extensions))
        compressed = self.serving.compression and any("permessage-deflate" in str(e) for e in request.extensions)
        self._fast = self._plain_out = not compressed
        self._cancel_timer()
        self._open = True
        self.conn.websocket = True
        for field_name, cookie in self.serving.cookies:
            value = cookie_value(request, cookie)
            if value:
                self.conn.cookies[field_name] = value
        ssl_object = self.get_extra_info("ssl_object")  # wss://: for /connz, and the certificate for verify_and_map
        if ssl_object is not None:
            self.conn.tls_version, self.conn.tls_cipher_suite = version_name(ssl_object), cipher_name(ssl_object)
            cert = ssl_object.getpeercert()
            if cert:
                self.conn.peer_identity = identity_from_cert(cert)
        self.conn.connection_made(self)  # type: ignore[arg-type]  # registers, sends INFO (a frame)
        return True

    def _fast_received(self, data: bytes) -> None:
        """Frame boundaries are tracked here, so wsproto, when it takes over, starts at one."""
        buf = self._header + data if self._header else data
        self._header = b""
        out: list[bytes] = []
        i, n = 0, len(buf)
        while i < n:
            if self._remaining:
                take = min(self._remaining, n - i)
                out.append(self._unmask(buf[i:i + take]))
                i += take
                self._remaining -= take
                continue
            if n - i < 2:
                self._header = buf[i:]
                break
            first, second = buf[i], buf[i + 1]
            size = second & 0x7F
            length = 2 + (2 if size == 126 else 8 if size == 127 else 0) + 4
            if first != 0x82 or not second & 0x80:  # not a whole masked binary frame: wsproto's
                self._fast = False
                if out and not self.conn.closed:
                    self.conn.data_received(b"".join(out))
                self.data_received(buf[i:])
                return
            if n - i < length:
                self._header = buf[i:]
                break
            if size == 126:
                size = int.from_bytes(buf[i + 2:i + 4], "big")
            elif size == 127:
                size = int.from_bytes(buf[i + 2:i + 10], "big")
            self._mask = buf[i + length - 4:i + length]
            self._remaining = size
            i += length
        if out and not self.conn.closed:
            self.conn.data_received(out[0] if len(out) == 1 else b"".join(out))

    def _unmask(self, chunk: bytes) -> bytes:
        size = len(chunk)
        key = (self._mask * (size // 4 + 1))[:size]
        shift = size % 4
        self._mask = self._mask[shift:] + self._mask[:shift]
        return (int.from_bytes(chunk, "little") ^ int.from_bytes(key, "little")).to_bytes(size, "little")

    def _refuse(self, status: HTTPStatus, reason: str) -> None:
        logger.error("%s - websocket handshake error: %s", self._where, reason)
        self._refused = True
        self._cancel_timer()
        if self.raw is not None and not self.raw.is_closing():
            self.raw.write(http_error(status))
            self.raw.close()

    def _closed_by_peer(self, event: CloseConnection, payloads: list[bytes]) -> None:
        """The client's close frame, or wsproto's verdict on a bad frame (we send that close)."""
        if self._open and payloads:
            self.conn.data_received(b"".join(payloads))
        if self._ws.state is ConnectionState.REMOTE_CLOSING:
            self._send(event.response())  # answer the client's close
            reason = REASON_CLIENT_CLOSED
        else:
            logger.error("%s - read error: websocket frame: %s", self._where, event.reason or event.code)
            if self._ws.state is ConnectionState.OPEN:
                self._send(CloseConnection(code=event.code, reason=event.reason))
            reason = REASON_READ_ERROR
        if self._open and not self.conn.closed:
            self.conn.close(reason)
        elif self.raw is not None:
            self.raw.close()

    def _send(self, event: Any) -> None:
        if self.raw is not None and not self.raw.is_closing():
            self.raw.write(self._ws.send(event))

    def _handshake_timeout(self) -> None:
        self._timer = None
        if self._open or self.raw is None:
            return
        logger.debug("%s - websocket handshake timeout", self._where)
        self.raw.abort()
