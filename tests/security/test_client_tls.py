"""Client TLS end to end: nats-py over TLS (server-only, mutual, TLS-first, verify_and_map)
against the in-process server, and the failure paths (no client certificate, plain text to a
TLS port, an unmapped certificate)."""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import time
from collections.abc import Callable, Iterator

import nats
import pytest

from appliance.config.load import options_from_text
from appliance.testing.certs import Pair, TestCerts
from appliance.testing.inproc import InProcessServer


def tls_server(certs: TestCerts, extra: str = "", tail: str = "") -> InProcessServer:
    text = (f'tls {{ cert_file: "{certs.server.cert}", key_file: "{certs.server.key}", '
            f'ca_file: "{certs.ca_file}", {extra} }}\n{tail}')
    return InProcessServer(options_from_text(text, filename="tls.conf"))


async def round_trip(url: str, context: ssl.SSLContext, **kwargs: object) -> bytes:
    nc = await nats.connect(url, tls=context, allow_reconnect=False, max_reconnect_attempts=0,
                            connect_timeout=3, **kwargs)  # type: ignore[arg-type]
    try:
        sub = await nc.subscribe("tls.echo")
        await nc.publish("tls.echo", b"secret")
        msg = await sub.next_msg(timeout=3)
        return msg.data
    finally:
        await nc.close()


def eventually(check: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def read_info(sock: socket.socket) -> dict[str, object]:
    line = b""
    while not line.endswith(b"\r\n"):
        chunk = sock.recv(4096)
        assert chunk, "closed before INFO"
        line += chunk
    assert line.startswith(b"INFO ")
    return json.loads(line[5:])  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def server_only(certs: TestCerts) -> Iterator[InProcessServer]:
    with tls_server(certs) as server:
        yield server


def test_server_only_tls_pub_sub(certs: TestCerts, server_only: InProcessServer) -> None:
    assert asyncio.run(round_trip(f"tls://127.0.0.1:{server_only.port}", certs.client_context())) == b"secret"


def test_info_is_plain_text_and_says_tls_required(server_only: InProcessServer) -> None:
    with socket.create_connection(("127.0.0.1", server_only.port), timeout=5) as sock:
        info = read_info(sock)
    assert info["tls_required"] is True
    assert "tls_verify" not in info and "tls_available" not in info


def test_connz_fields_after_handshake(certs: TestCerts, server_only: InProcessServer) -> None:
    async def check() -> tuple[str, str]:
        nc = await nats.connect(f"tls://127.0.0.1:{server_only.port}", tls=certs.client_context(),
                                allow_reconnect=False)
        try:
            await nc.flush()
            assert server_only.server is not None
            conn = server_only.server.clients[nc.client_id]  # type: ignore[index]
            return conn.tls_version, conn.tls_cipher_suite
        finally:
            await nc.close()

    version, cipher = asyncio.run(check())
    assert version == "1.3"
    assert cipher in ("TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256")


def test_plain_text_after_info_is_closed_without_answer(server_only: InProcessServer) -> None:
    with socket.create_connection(("127.0.0.1", server_only.port), timeout=5) as sock:
        read_info(sock)
        sock.sendall(b"CONNECT {}\r\nPING\r\n")
        received = b""
        while True:
            try:
                chunk = sock.recv(4096)
            except ConnectionResetError:
                break
            if not chunk:
                break
            received += chunk
    assert b"PONG" not in received and b"-ERR" not in received


def test_mutual_tls_requires_a_client_certificate(certs: TestCerts) -> None:
    client = certs.issue("client-mutual", "client.example.com")
    stranger = certs.issue("stranger", "stranger.example.com", ca=certs.other_ca)
    with tls_server(certs, "verify: true") as server:
        url = f"tls://127.0.0.1:{server.port}"
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
            info = read_info(sock)
        assert info["tls_required"] is True and info["tls_verify"] is True
        assert asyncio.run(round_trip(url, certs.client_context(client))) == b"secret"
        for bad in (None, stranger):  # refused in the handshake: nothing but the plain INFO ever comes
            with socket.create_connection(("127.0.0.1", server.port), timeout=5) as raw:
                read_info(raw)
                with pytest.raises((ssl.SSLError, OSError)):
                    with certs.client_context(bad).wrap_socket(raw, server_hostname="127.0.0.1") as secure:
                        secure.sendall(b"CONNECT {}\r\nPING\r\n")
                        assert secure.recv(4096) == b""  # TLS 1.3: the refusal comes after our Finished
        assert server.server is not None
        closed = server.server.closed_clients
        eventually(lambda: [c.reason for c in closed].count("TLS Handshake Failure") >= 2)


def test_handshake_first(certs: TestCerts) -> None:
    with tls_server(certs, "handshake_first: true") as server:
        url = f"tls://127.0.0.1:{server.port}"
        assert asyncio.run(round_trip(url, certs.client_context(), tls_handshake_first=True)) == b"secret"
        # nothing in plain text: the INFO comes after the handshake, encrypted
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as raw:
            raw.settimeout(0.3)
            with pytest.raises(TimeoutError):
                raw.recv(1)
            raw.settimeout(5)
            with certs.client_context().wrap_socket(raw, server_hostname="127.0.0.1") as secure:
                info = read_info(secure)
        assert info["tls_required"] is True
        assert server.server is not None
        closed = server.server.closed_clients
        eventually(lambda: any(c.tls_first for c in closed))


def _map_users(certs: TestCerts) -> tuple[Pair, Pair, Pair]:
    by_subject = certs.issue("map-subject", "subject.example.com", common_name="alice", organization="Acme",
                             unit="eng")
    by_email = certs.issue("map-email", "bob@example.com")
    unknown = certs.issue("map-unknown", "nobody.example.com", common_name="mallory")
    return by_subject, by_email, unknown


def test_verify_and_map(certs: TestCerts) -> None:
    by_subject, by_email, unknown = _map_users(certs)
    tail = """authorization { users = [
        { user: "CN=alice,OU=eng,O=Acme", permissions: { publish: "tls.>", subscribe: "tls.>" } }
        { user: "bob@example.com" }
    ] }"""
    with tls_server(certs, "verify_and_map: true", tail) as server:
        url = f"tls://127.0.0.1:{server.port}"
        assert asyncio.run(round_trip(url, certs.client_context(by_subject))) == b"secret"
        assert asyncio.run(round_trip(url, certs.client_context(by_email))) == b"secret"
        assert server.server is not None
        closed = server.server.closed_clients
        eventually(lambda: {"CN=alice,OU=eng,O=Acme", "bob@example.com"} <= {c.authorized_user for c in closed})
        # a valid certificate that names nobody: Authorization Violation after CONNECT
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as raw:
            assert read_info(raw)["auth_required"] is True
            with certs.client_context(unknown).wrap_socket(raw, server_hostname="127.0.0.1") as secure:
                secure.sendall(b'CONNECT {"verbose":false}\r\nPING\r\n')
                received = b""
                while b"\r\n" not in received:
                    chunk = secure.recv(4096)
                    if not chunk:
                        break
                    received += chunk
        assert received.startswith(b"-ERR 'Authorization Violation'"), received


def test_allow_non_tls_serves_both(certs: TestCerts) -> None:
    with tls_server(certs, tail="allow_non_tls: true") as server:
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
            info = read_info(sock)
            assert info.get("tls_available") is True and "tls_required" not in info
            sock.sendall(b'CONNECT {"verbose":false}\r\nPING\r\n')
            assert sock.recv(4096) == b"PONG\r\n"  # plain text still works
        assert asyncio.run(round_trip(f"tls://127.0.0.1:{server.port}", certs.client_context())) == b"secret"
        assert asyncio.run(round_trip(f"nats://127.0.0.1:{server.port}", None)) == b"secret"  # type: ignore[arg-type]


def test_handshake_first_with_fallback(certs: TestCerts) -> None:
    with tls_server(certs, 'handshake_first: "100ms"') as server:
        url = f"tls://127.0.0.1:{server.port}"
        assert asyncio.run(round_trip(url, certs.client_context(), tls_handshake_first=True)) == b"secret"
        # a client that waits for the INFO gets it in plain text after the delay, then does TLS as usual
        assert asyncio.run(round_trip(url, certs.client_context())) == b"secret"
        assert server.server is not None
        closed = server.server.closed_clients
        eventually(lambda: sorted(c.tls_first for c in closed) == [False, True])


def test_a_closed_tls_connection_is_freed_without_the_garbage_collector(
        certs: TestCerts, server_only: InProcessServer) -> None:
    """The TLS layer and the connection refer to each other; once the socket is gone the
    connection lets go of the layer, so both are freed by reference counting at once. (Freed by
    the cyclic collector instead, every connection left garbage that cost new connections.)"""
    import gc
    import weakref

    assert server_only.server is not None
    server = server_only.server
    gc.collect()
    gc.disable()
    try:
        raw = socket.create_connection(("127.0.0.1", server_only.port), timeout=5)
        read_info(raw)
        with certs.client_context().wrap_socket(raw, server_hostname="127.0.0.1") as sock:
            sock.sendall(b'CONNECT {"verbose":false}\r\nPING\r\n')
            assert sock.recv(4096) == b"PONG\r\n"
            conns = list(server.clients.values())
            assert len(conns) == 1
            conn_ref = weakref.ref(conns[0])
            layer_ref = weakref.ref(conns[0].transport)
            del conns
        eventually(lambda: not server.clients)
        eventually(lambda: conn_ref() is None and layer_ref() is None)
    finally:
        gc.enable()
