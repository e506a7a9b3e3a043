"""The client TLS layer (server/tls.py over server/tls_pump.py) on fakes: what reaches the socket,
and in how many writes, for a handshake driven by a real OpenSSL client over memory BIOs."""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from typing import Any

from appliance.config.tls import TLSOptions
from appliance.config.tls_context import server_context
from appliance.server.tls import TLSLayer, TLSServing
from appliance.testing.certs import TestCerts
from tests.security.fake_server import FakeServer


@dataclass
class FakeConn:
    """The ClientConnection calls the layer makes: it answers every read with a PONG."""

    server: FakeServer = field(default_factory=FakeServer)
    closed: bool = False
    ip: str = "127.0.0.1"
    port: int = 4222
    cid: int = 1
    layer: Any = None
    received: bytearray = field(default_factory=bytearray)
    established: int = 0

    def connection_made(self, layer: Any) -> None:
        self.layer = layer
        layer.begin_handshake(b"INFO {}\r\n")

    def tls_established(self, secure: Any, *, first: bool) -> None:
        self.established += 1

    def data_received(self, data: bytes) -> None:
        self.received += data
        self.layer.write(b"PONG\r\n")

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True

    def close(self, reason: str, *, abort: bool = False) -> None:
        self.closed = True


class FakeSocket:
    """The socket's transport: every write is kept apart."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def close(self) -> None:
        pass


def open_tls(certs: TestCerts) -> tuple[TLSLayer, FakeConn, FakeSocket, ssl.SSLObject, ssl.MemoryBIO, ssl.MemoryBIO]:
    serving = TLSServing(context=server_context(TLSOptions(cert_file=certs.server.cert, key_file=certs.server.key)),
                         timeout_s=2.0, handshake_first=False, verify=False, map=False)
    conn = FakeConn()
    layer = TLSLayer(conn, serving)  # type: ignore[arg-type]
    sock = FakeSocket()
    layer.connection_made(sock)  # type: ignore[arg-type]
    assert sock.writes == [b"INFO {}\r\n"]
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = certs.client_context().wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
    try:
        client.do_handshake()
    except ssl.SSLWantReadError:
        pass
    layer.data_received(outgoing.read())  # the client hello
    assert len(sock.writes) == 2  # the server's flight, in one write
    incoming.write(sock.writes[1])
    client.do_handshake()
    return layer, conn, sock, client, incoming, outgoing


def test_ticket_and_first_answer_leave_in_one_write(certs: TestCerts) -> None:
    """The client's Finished and its CONNECT/PING arrive in one read: the session ticket OpenSSL
    issues once the handshake is done and the PONG go out in one socket write, not two (each
    write to a socket is a system call and a wake-up of the client)."""
    layer, conn, sock, client, incoming, outgoing = open_tls(certs)
    client.write(b'CONNECT {"verbose":false}\r\nPING\r\n')
    layer.data_received(outgoing.read())
    assert conn.established == 1
    assert bytes(conn.received) == b'CONNECT {"verbose":false}\r\nPING\r\n'
    assert len(sock.writes) == 3, [len(w) for w in sock.writes]
    incoming.write(sock.writes[2])
    assert client.read(1024) == b"PONG\r\n"


def test_records_split_across_reads_are_decrypted_once_whole(certs: TestCerts) -> None:
    """A record cut anywhere by TCP reaches the connection only once it is complete; nothing is
    written back for a read that completed no record."""
    layer, conn, sock, client, incoming, outgoing = open_tls(certs)
    layer.data_received(outgoing.read())  # the client's Finished alone: the ticket goes out
    writes = len(sock.writes)
    for cut in (1, 5, 30):
        client.write(b"PUB a 5\r\nhello\r\n")
        record = outgoing.read()
        layer.data_received(record[:cut])
        layer.data_received(record[cut:cut])  # an empty read changes nothing
        assert conn.received == b""
        assert len(sock.writes) == writes
        layer.data_received(record[cut:])
        assert bytes(conn.received) == b"PUB a 5\r\nhello\r\n"
        writes += 1  # the PONG of the fake connection
        assert len(sock.writes) == writes
        conn.received.clear()
