"""TLS on the client port, terminated by the worker that accepted the connection.

As nats-server (`createClient` in server/server.go): the INFO goes out in plain text with
`tls_required`, then the server side of the handshake runs on the same socket (asyncio's
`start_tls`, uvloop's C SSL protocol); with `handshake_first` the handshake comes first and the
INFO after it, encrypted. The handshake has `tls.timeout` to finish. The auth and ping timers
start once it is done. A failed handshake is logged as nats-server logs it — `TLS handshake
error: ...` (at debug level for a peer that did not speak TLS at all: a probe or a load balancer)
— and the connection closes with reason "TLS Handshake Failure". The plain-text path never comes
here.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from dataclasses import dataclass
from typing import TYPE_CHECKING

from appliance.config.options import ServerOptions
from appliance.config.tls_context import server_context

if TYPE_CHECKING:
    from appliance.server.client import ClientConnection

logger = logging.getLogger(__name__)

REASON_TLS_FAILURE = "TLS Handshake Failure"

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
    "UNEXPECTED_EOF_WHILE_READING": "EOF",
}
_PROBE_REASONS = frozenset({"WRONG_VERSION_NUMBER", "HTTP_REQUEST", "UNEXPECTED_EOF_WHILE_READING"})


@dataclass(frozen=True, slots=True)
class TLSServing:
    """What a worker needs to serve TLS on its client connections."""

    context: ssl.SSLContext
    timeout_s: float
    handshake_first: bool
    verify: bool
    map: bool


def serving_from_options(options: ServerOptions) -> TLSServing | None:
    tls = options.tls
    if tls is None:
        return None
    return TLSServing(context=server_context(tls), timeout_s=tls.timeout_s, handshake_first=tls.handshake_first,
                      verify=tls.verify, map=tls.map)


def handshake_error_text(error: BaseException) -> tuple[str, bool]:
    """(nats-server's text for a failed handshake, whether it looks like a non-TLS probe)."""
    if isinstance(error, asyncio.TimeoutError | TimeoutError):
        return "TLS handshake timeout", True
    reason = getattr(error, "reason", None)
    if isinstance(reason, str) and reason in _GO_TEXTS:
        return _GO_TEXTS[reason], reason in _PROBE_REASONS
    if isinstance(error, ConnectionError | EOFError) or (isinstance(error, OSError) and not str(error)):
        return "EOF", True
    return str(error) or type(error).__name__, False


def start_handshake(conn: ClientConnection, serving: TLSServing) -> None:
    """Run the server side of the handshake on `conn`'s socket (reading is paused until then)."""
    task = conn.server.loop.create_task(_handshake(conn, serving))
    conn.server.background_tasks.add(task)
    task.add_done_callback(conn.server.background_tasks.discard)


async def _handshake(conn: ClientConnection, serving: TLSServing) -> None:
    transport = conn.transport
    assert transport is not None
    where = f"{conn.ip}:{conn.port} - cid:{conn.cid}"
    logger.debug("%s - Starting TLS client connection handshake", where)
    early = _EarlyData(conn)
    try:
        secure = await conn.server.loop.start_tls(
            transport, early, serving.context, server_side=True,  # type: ignore[arg-type]
            ssl_handshake_timeout=serving.timeout_s)
    except (OSError, ssl.SSLError, asyncio.TimeoutError, EOFError, RuntimeError) as error:
        text, probe = handshake_error_text(error)
        if text == "TLS handshake timeout":
            logger.debug("%s - %s", where, text)
        else:
            logger.log(logging.DEBUG if probe else logging.ERROR, "%s - TLS handshake error: %s", where, text)
        conn.close(REASON_TLS_FAILURE, abort=True)
        return
    if secure is None or conn.closed:
        if secure is not None:
            secure.abort()
        return
    secure.set_protocol(conn)
    conn.tls_established(secure, first=serving.handshake_first)
    early.hand_over()


class _EarlyData(asyncio.Protocol):
    """The application protocol while the handshake finishes: asyncio's SSL protocol may deliver
    the client's first bytes (sent with its Finished message) before `start_tls` returns the new
    transport; they wait here until the connection talks through that transport."""

    def __init__(self, conn: ClientConnection) -> None:
        self.conn = conn
        self.chunks: list[bytes] = []
        self.lost: tuple[Exception | None] | None = None

    def data_received(self, data: bytes) -> None:
        self.chunks.append(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = (exc,)

    def hand_over(self) -> None:
        chunks, self.chunks = self.chunks, []
        for data in chunks:
            self.conn.data_received(data)
        if self.lost is not None:
            self.conn.connection_lost(self.lost[0])
