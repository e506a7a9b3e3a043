"""The transport plumbing the socket layers share: server/tls.py (client TLS), server/route_tls.py
(route TLS) and server/websocket.py each sit between a socket's transport and a connection.

`SocketLayer` is what all three are to the connection above them: a transport that passes
buffer sizes, limits, reading pauses, closing state and aborts through to the socket's own, plus
one handshake timer. `TLSPump` adds OpenSSL over a pair of memory BIOs: the handshake step,
application writes encrypted through to the socket, the decrypting read pump, and a close that
sends our close_notify first (as Go's tls.Conn.Close does). What differs between the layers — what
happens before the handshake, when the connection above starts, how failures are logged — stays
in each of them, through the `_handshake_done` and `_read_failed` hooks.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Any

READ_CHUNK_BYTES = 256 * 1024


class SocketLayer(asyncio.Protocol):
    """The socket's protocol and the connection's transport; the socket's transport is `raw`."""

    def __init__(self) -> None:
        self.raw: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None

    def eof_received(self) -> bool | None:
        return None  # the transport closes; connection_lost follows

    def get_write_buffer_size(self) -> int:
        return self.raw.get_write_buffer_size() + self._pending_out() if self.raw is not None else 0

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        if self.raw is not None:
            self.raw.set_write_buffer_limits(high=high, low=low)

    def pause_reading(self) -> None:
        if self.raw is not None:
            self.raw.pause_reading()

    def resume_reading(self) -> None:
        if self.raw is not None:
            self.raw.resume_reading()

    def is_closing(self) -> bool:
        return self.raw is None or self.raw.is_closing()

    def abort(self) -> None:
        self._cancel_timer()
        if self.raw is not None:
            self.raw.abort()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.raw.get_extra_info(name, default) if self.raw is not None else default

    def _pending_out(self) -> int:
        """Bytes written by the connection but not yet handed to the socket's transport."""
        return 0

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class TLSPump(SocketLayer):
    """A `SocketLayer` with OpenSSL between the socket and the connection (memory BIOs)."""

    def __init__(self, context: ssl.SSLContext, *, server_side: bool, server_hostname: str | None = None) -> None:
        super().__init__()
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._ssl = context.wrap_bio(self._incoming, self._outgoing, server_side=server_side,
                                     server_hostname=server_hostname)
        self._open = False  # handshake done: application data flows (until our close_notify)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self.raw is None or self.raw.is_closing():
            return
        if not self._open:
            self._write_before_open(data)
            return
        try:
            self._ssl.write(data)
        except ssl.SSLError:
            return
        self._flush_outgoing()

    def close(self) -> None:
        """Our close_notify (as Go's tls.Conn.Close sends it), then the socket closes after writing."""
        self._cancel_timer()
        if self.raw is None or self.raw.is_closing():
            return
        if self._open:
            self._open = False
            try:
                self._ssl.unwrap()
            except (ssl.SSLWantReadError, ssl.SSLError, OSError):
                pass  # the peer's close_notify is not awaited
        self._flush_outgoing()
        self.raw.close()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "ssl_object":
            return self._ssl if self._open else default
        if name == "peercert":
            return self._ssl.getpeercert() if self._open else default
        return super().get_extra_info(name, default)

    def peer_certificate(self) -> bytes | None:
        """The peer's certificate (DER) once the handshake is done; None before or without one."""
        return self._ssl.getpeercert(binary_form=True) if self._open else None

    # --- for the layers ---------------------------------------------------------------------------

    def _write_before_open(self, data: bytes | bytearray | memoryview) -> None:
        """A write before the handshake is done (or after our close_notify): dropped by default."""

    def _handshake_done(self) -> None:
        """The handshake finished (the timer is cancelled, `_open` is set): start what runs on top."""
        raise NotImplementedError

    def _read_failed(self, error: ssl.SSLError) -> None:
        """A TLS error on reading application data: log it as the layer does and close."""
        raise NotImplementedError

    def _fail(self, error: BaseException | None) -> None:
        """The handshake failed (the alert, if any, is already out)."""
        raise NotImplementedError

    def _step_handshake(self) -> bool:
        """Advance the handshake with what arrived; True once it is done. What OpenSSL has to send
        once it is done (TLS 1.3 session tickets) stays in the outgoing BIO: the caller's
        `_flush_outgoing` after the first answer sends both in one socket write."""
        try:
            self._ssl.do_handshake()
        except ssl.SSLWantReadError:
            self._flush_outgoing()
            return False
        except (ssl.SSLError, OSError) as error:
            self._flush_outgoing()  # the alert, as Go sends one
            self._fail(error)
            return False
        self._cancel_timer()
        self._open = True
        self._handshake_done()
        return not self.is_closing()  # the layer may refuse the peer once it is known (pinned_certs)

    def _receive(self, data: bytes) -> bytes:
        """Bytes from the socket in; the application bytes decrypted from them out (b"" while the
        handshake runs or when a record is incomplete). Whatever OpenSSL has to send stays pending:
        the caller hands the bytes on, then calls `_flush_outgoing`, so an answer written meanwhile
        leaves in the same socket write."""
        self._incoming.write(data)
        if not self._open and not self._step_handshake():
            return b""
        return self._read_plain()

    def _read_plain(self) -> bytes:
        """What OpenSSL decrypts from the incoming BIO, record by record, until the BIO is empty
        (asking once more then would only raise SSLWantReadError: an exception per socket read)."""
        chunks: list[bytes] = []
        incoming = self._incoming
        while incoming.pending:
            try:
                chunk = self._ssl.read(READ_CHUNK_BYTES)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError:  # close_notify: the peer is done; answer it and close
                self.close()
                break
            except ssl.SSLError as error:
                self._read_failed(error)
                break
            if not chunk:  # close_notify (Python returns b"" for it): answer it and close
                self.close()
                break
            chunks.append(chunk)  # bounded: at most what this socket read brought, decrypted
        return b"".join(chunks)

    def _pending_out(self) -> int:
        return self._outgoing.pending

    def _flush_outgoing(self) -> None:
        if self._outgoing.pending and self.raw is not None and not self.raw.is_closing():
            self.raw.write(self._outgoing.read())
