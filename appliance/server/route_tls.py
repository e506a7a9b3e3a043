"""TLS on a route connection (`cluster { tls {} }`), terminated by the worker that holds the routes.

As nats-server (`createRoute` in server/route.go): with cluster TLS the handshake is the first thing
on the socket in both directions — the dialling server is the TLS client, the accepting one the
TLS server — and the INFO/CONNECT exchange runs encrypted after it. Both ends present and verify a
certificate (nats-server forces RequireAndVerifyClientCert for routes, with ca_file as the roots of
both directions); the dialling side checks the peer's certificate against the route URL's host.
The handshake has `tls.timeout`; a failure is logged as nats-server logs it, at error level
(`TLS route handshake error: ...`), and only that connection closes ("TLS Handshake Failure").

`RouteTLSLayer` is the socket's protocol from the first byte (OpenSSL over memory BIOs, for the
reason server/tls.py gives: no window in which uvloop hands handshake bytes to the parser) and,
once the handshake is done, the transport of the `RouteConnection`, which it then starts as if the
socket had just connected: the route protocol itself is unchanged by TLS.
"""

from __future__ import annotations

import asyncio
import logging
import ssl

from appliance.fabric.route import RouteConnection
from appliance.server.tls import ERR_NOT_PINNED, REASON_TLS_FAILURE, handshake_error_text
from appliance.server.tls_map import identity_from_cert, literal_names
from appliance.server.tls_pin import pin_failure
from appliance.server.tls_pump import TLSPump

logger = logging.getLogger(__name__)


class CertificateNotPinned(Exception):
    """The peer's certificate key is not in the cluster tls `pinned_certs`."""


class RouteTLSLayer(TLSPump):
    """The socket's protocol and, once the handshake is done, the route connection's transport,
    with OpenSSL in between. Nothing passes in plain text; the route connection starts only after
    the handshake (`_started`), and until then it sees neither writes nor flow control."""

    def __init__(self, conn: RouteConnection, context: ssl.SSLContext, timeout_s: float, *,
                 server_hostname: str | None = None, pinned: frozenset[str] = frozenset()) -> None:
        solicited = server_hostname is not None
        super().__init__(context, server_side=not solicited,
                         server_hostname=server_hostname if context.check_hostname else None)
        self.conn = conn
        self.timeout_s = timeout_s
        self.pinned = pinned  # cluster tls `pinned_certs`: the peer's certificate key must be one of these
        self._started = False  # the route connection was started on this layer
        self._failed = False
        self._where = ""

    # --- the socket's side -----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.raw = transport  # type: ignore[assignment]  # uvloop's is not an asyncio.Transport
        peer = transport.get_extra_info("peername")
        self._where = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else "?"
        side = "client" if not self._ssl.server_side else "server"
        logger.debug("%s - Starting TLS route %s handshake", self._where, side)
        self._timer = asyncio.get_running_loop().call_later(self.timeout_s, self._handshake_timeout)
        self._step_handshake()  # the dialling side sends its hello now

    def data_received(self, data: bytes) -> None:
        if self._failed or self.conn.closed:
            return
        plain = self._receive(data)
        if plain and not self.conn.closed:
            self.conn.data_received(plain)
        self._flush_outgoing()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timer()
        if self._failed:
            return
        if not self._started:
            self._fail(exc)
            return
        self.conn.connection_lost(exc)

    def pause_writing(self) -> None:
        if self._started:
            self.conn.pause_writing()

    def resume_writing(self) -> None:
        if self._started:
            self.conn.resume_writing()

    # --- internals --------------------------------------------------------------------------------

    def _handshake_done(self) -> None:
        failure = pin_failure(self.pinned, self._ssl.getpeercert(binary_form=True))
        if failure is not None:  # nats-server: a route handshake error, both dialling and accepting
            logger.debug("%s - %s", self._where, failure)
            self._fail(CertificateNotPinned(ERR_NOT_PINNED))
            return
        cert = self._ssl.getpeercert()
        identity = identity_from_cert(cert) if cert else None
        self.conn.peer_names = literal_names(identity) if identity is not None else ()
        self.conn.peer_dns_names = identity.dns_names if identity is not None else ()
        self._started = True
        logger.debug("%s - TLS route handshake complete (TLS %s, %s)", self._where,
                     self._ssl.version(), (self._ssl.cipher() or ("?",))[0])
        self.conn.connection_made(self)  # type: ignore[arg-type]  # INFO / CONNECT go out encrypted

    def _read_failed(self, error: ssl.SSLError) -> None:
        logger.error("route %s: TLS read error: %s", self.conn.describe(), error)
        self.conn.close("Read Error", abort=True)

    def _handshake_timeout(self) -> None:
        self._timer = None
        if not self._open and not self._failed:
            self._fail(TimeoutError("i/o timeout"))

    def _fail(self, error: BaseException | None) -> None:
        """nats-server's log line for a failed route handshake; this connection closes, nothing else."""
        text, _probe = handshake_error_text(error)
        if isinstance(error, TimeoutError):
            text = "i/o timeout"
        self._failed = True
        self._cancel_timer()
        logger.error("%s - TLS route handshake error: %s", self._where, text)
        self.conn.ip, _, port = self._where.rpartition(":")
        self.conn.port = int(port) if port.isdigit() else 0
        self.conn.close(REASON_TLS_FAILURE)  # not started: no transport of its own; the manager forgets it
        if self.raw is not None and not self.raw.is_closing():
            self.raw.close()
