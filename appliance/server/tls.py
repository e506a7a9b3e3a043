"""TLS on the client port, terminated by the worker that accepted the connection.

As nats-server (`createClient` in server/server.go): the INFO goes out in plain text with
`tls_required`, then the server side of the handshake runs on the same socket; with
`handshake_first` the handshake comes first and the INFO after it, encrypted. The handshake has
`tls.timeout` to finish; the auth and ping timers start once it is done. A failed handshake is
logged as nats-server logs it — `TLS handshake error: ...` (at debug level for a peer that did
not speak TLS at all: a probe or a load balancer) — and the connection closes with reason
"TLS Handshake Failure".

`TLSLayer` sits between the socket's transport and the `ClientConnection`: it is the socket's
protocol from the first byte (OpenSSL over a pair of memory BIOs), and it is the transport the
connection writes to. Why not asyncio's `start_tls`: uvloop starts reading right after
`connection_made`, so the first bytes of the handshake can reach the NATS parser before
`start_tls` takes the socket over; owning the bytes from the start has no such window (and lets
a later `allow_non_tls` look at the first byte). The plain-text path never comes here.
The memory-BIO pump and the transport plumbing this layer shares with the route and WebSocket
layers are server/tls_pump.py's.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from dataclasses import dataclass
from typing import TYPE_CHECKING

from appliance.config.options import ServerOptions
from appliance.config.tls_context import server_context
from appliance.server.tls_pin import pin_failure
from appliance.server.tls_pump import TLSPump

if TYPE_CHECKING:
    from appliance.server.client import ClientConnection

logger = logging.getLogger(__name__)

REASON_TLS_FAILURE = "TLS Handshake Failure"
ERR_NOT_PINNED = "certificate not pinned"  # nats-server's ErrCertNotPinned

# OpenSSL reasons -> the text Go's crypto/tls gives for the same failure (nats-server's log lines)
_GO_TEXTS = {
    "PEER_DID_NOT_RETURN_A_CERTIFICATE": "tls: client didn't provide a certificate",
    "CERTIFICATE_VERIFY_FAILED": "tls: failed to verify certificate: x509: certificate signed by unknown authority",
    "TLSV1_ALERT_UNKNOWN_CA": "remote error: tls: unknown certificate authority",
    "SSLV3_ALERT_BAD_CERTIFICATE": "remote error: tls: bad certificate",
    "SSLV3_ALERT_CERTIFICATE_UNKNOWN": "remote error: tls: bad certificate",
    "TLSV1_ALERT_PROTOCOL_VERSION": "remote error: tls: protocol version not supported",
    "UNSUPPORTED_PROTOCOL": "tls: client offered only unsupported versions",
    "NO_SHARED_CIPHER": "tls: no cipher suite supported by both client and server",
    "WRONG_VERSION_NUMBER": "tls: first record does not look like a TLS handshake",
    "HTTP_REQUEST": "tls: first record does not look like a TLS handshake",
    "HTTPS_PROXY_REQUEST": "tls: first record does not look like a TLS handshake",  # plain text starting "CONNECT"
    "UNEXPECTED_EOF_WHILE_READING": "EOF",
}
_PROBE_REASONS = frozenset({"WRONG_VERSION_NUMBER", "HTTP_REQUEST", "HTTPS_PROXY_REQUEST", "UNEXPECTED_EOF_WHILE_READING"})


@dataclass(frozen=True, slots=True)
class TLSServing:
    """What a worker needs to serve TLS on its client connections."""

    context: ssl.SSLContext
    timeout_s: float
    handshake_first: bool
    verify: bool
    map: bool
    fallback_s: float = 0.0  # handshake_first "auto"/duration: plain INFO after this much silence
    allow_non_tls: bool = False  # plain-text clients too: the first byte decides (0x16 = TLS)
    pinned: frozenset[str] = frozenset()  # `pinned_certs`: the client certificate's key must be one of these


def serving_from_options(options: ServerOptions) -> TLSServing | None:
    tls = options.tls
    if tls is None:
        return None
    return TLSServing(context=server_context(tls), timeout_s=tls.timeout_s, handshake_first=tls.handshake_first,
                      verify=tls.verify, map=tls.map, fallback_s=tls.handshake_first_fallback_s,
                      allow_non_tls=options.allow_non_tls, pinned=tls.pinned_certs)


def handshake_error_text(error: BaseException | None) -> tuple[str, bool]:
    """(nats-server's text for a failed handshake, whether it looks like a non-TLS probe)."""
    if error is None:
        return "EOF", True
    reason = getattr(error, "reason", None)
    if isinstance(reason, str) and reason in _GO_TEXTS:
        return _GO_TEXTS[reason], reason in _PROBE_REASONS
    if isinstance(error, ConnectionError | EOFError) or (isinstance(error, OSError) and not str(error)):
        return "EOF", True
    return str(error) or type(error).__name__, False


class TLSLayer(TLSPump):
    """The socket's protocol and the connection's transport, with OpenSSL in between. Unlike the
    route layer, bytes pass in plain text before the handshake (the INFO, a -ERR, and all of a
    plain-text client's traffic)."""

    def __init__(self, conn: ClientConnection, serving: TLSServing) -> None:
        super().__init__(serving.context, server_side=True)
        self.conn = conn
        self.serving = serving
        self._handshaking = False
        self._sniffing = False  # allow_non_tls: the first byte says TLS or plain text
        self._plain = False  # a plain-text client (allow_non_tls, or after a TLS-first fallback)
        self._info: bytes | None = None  # set while a TLS-first fallback may still happen
        self._fell_back = False
        self._buffer_limits: tuple[int | None, int | None] = (None, None)

    # --- the socket's side (asyncio.Protocol) ----------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.raw = transport  # type: ignore[assignment]  # uvloop's is not an asyncio.Transport
        self.conn.connection_made(self)  # type: ignore[arg-type]  # it calls begin_handshake

    def begin_handshake(self, info: bytes) -> None:
        """The plain-text INFO, then the client's hello (or, with allow_non_tls, whatever it
        sends). TLS first: no INFO until the handshake is done; with a fallback delay, a client
        that says nothing that long gets the plain INFO and the usual choice."""
        assert self.raw is not None
        loop = self.conn.server.loop
        if self.serving.handshake_first:
            self._start_handshake()
            if self.serving.fallback_s > 0:
                self._info = info
                self._cancel_timer()
                self._timer = loop.call_later(self.serving.fallback_s, self._fall_back)
            return
        self.raw.write(info)
        self._after_info()

    def _after_info(self) -> None:
        if self.serving.allow_non_tls:
            self._sniffing = True
            self._timer = self.conn.server.loop.call_later(self.serving.timeout_s, self._handshake_timeout)
        else:
            self._start_handshake()

    def _start_handshake(self) -> None:
        self._handshaking = True
        if logger.isEnabledFor(logging.DEBUG):  # not the text of `_where` for every connection
            logger.debug("%s - Starting TLS client connection handshake", self._where())
        self._cancel_timer()
        self._timer = self.conn.server.loop.call_later(self.serving.timeout_s, self._handshake_timeout)

    def _fall_back(self) -> None:
        """TLS first with a fallback delay, and the client said nothing: it is not a TLS-first client."""
        self._timer = None
        if self._open or self.conn.closed or self._incoming.pending or self.raw is None:
            return
        self._handshaking = False
        self._info = None
        self._fell_back = True
        self.raw.write(self.conn.server.info_bytes(self.conn, tls_first=False))
        self._after_info()

    def data_received(self, data: bytes) -> None:
        if self._plain:
            self.conn.data_received(data)
            return
        if self.conn.closed:
            return
        if self._sniffing:
            self._sniffing = False
            if data[:1] != b"\x16":  # not a TLS record: a plain-text client (allow_non_tls)
                self._cancel_timer()
                self._plain = True
                self.conn.tls_skipped()
                self.conn.data_received(data)
                return
            self._start_handshake()
        elif self._info is not None and not self._open:
            self._cancel_timer()  # TLS-first bytes came before the fallback delay: the TLS timeout again
            self._info = None
            self._timer = self.conn.server.loop.call_later(self.serving.timeout_s, self._handshake_timeout)
        if not self._open and not self._handshaking:
            self._incoming.write(data)  # closing, or bytes before the INFO went out: kept in the BIO
            return
        plain = self._receive(data)
        if plain:
            self.conn.data_received(plain)  # its answer (a PONG) is written through to OpenSSL...
        self._flush_outgoing()  # ...and leaves with the session ticket in one socket write

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timer()
        if (self._handshaking or self._sniffing) and not self._open and not self.conn.closed:
            self._fail(exc)
        self.conn.connection_lost(exc)  # after a failed handshake: only lets go of this layer

    def pause_writing(self) -> None:
        self.conn.pause_writing()

    def resume_writing(self) -> None:
        self.conn.resume_writing()

    # --- the connection's side: TLSPump is its transport ------------------------------------------

    def _write_before_open(self, data: bytes | bytearray | memoryview) -> None:
        assert self.raw is not None
        self.raw.write(data)  # plain-text clients, and before the handshake only the plain INFO / -ERR

    # --- internals --------------------------------------------------------------------------------

    def _where(self) -> str:
        return f"{self.conn.ip}:{self.conn.port} - cid:{self.conn.cid}"

    def _handshake_done(self) -> None:
        self._handshaking = False
        pinned = self.serving.pinned
        failure = pin_failure(pinned, self._ssl.getpeercert(binary_form=True)) if pinned else None
        if failure is not None:  # as nats-server: a handshake error, after the handshake
            logger.debug("%s - %s", self._where(), failure)
            logger.error("%s - TLS handshake error: %s", self._where(), ERR_NOT_PINNED)
            self.conn.close(REASON_TLS_FAILURE)
            return
        self.conn.tls_established(self, first=self.serving.handshake_first and not self._fell_back)

    def _read_failed(self, error: ssl.SSLError) -> None:
        logger.debug("%s - TLS read error: %s", self._where(), error)
        self.conn.close("Read Error", abort=True)

    def _handshake_timeout(self) -> None:
        self._timer = None
        if self._open or self.conn.closed:
            return
        if self._sniffing:  # allow_non_tls and silence: nats-server goes on without TLS
            self._sniffing = False
            self._plain = True
            self.conn.tls_skipped()
            return
        logger.debug("%s - TLS handshake timeout", self._where())
        self._handshaking = self._sniffing = False
        self.conn.close(REASON_TLS_FAILURE, abort=True)

    def _fail(self, error: BaseException | None) -> None:
        text, probe = handshake_error_text(error)
        logger.log(logging.DEBUG if probe else logging.ERROR, "%s - TLS handshake error: %s", self._where(), text)
        self._handshaking = False
        self.conn.close(REASON_TLS_FAILURE)
