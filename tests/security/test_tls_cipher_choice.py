"""Which TLS 1.3 cipher suite a client gets: the one nats-server's Go crypto/tls picks
(TLS_AES_128_GCM_SHA256 for a client offering AES-GCM first), not OpenSSL's first
(TLS_AES_256_GCM_SHA384); /connz `tls_cipher_suite` compared with nats-server's."""

from __future__ import annotations

import json
import socket
import ssl
import time
import urllib.request
from pathlib import Path

from appliance.config.load import options_from_text
from appliance.config.tls13_order import GO_TLS13_SUITES
from appliance.config.tls_context import client_context, server_context
from appliance.testing.certs import TestCerts
from appliance.testing.inproc import InProcessServer
from appliance.testing.natsserver import NatsServer


def _tls13_order(context: ssl.SSLContext) -> tuple[str, ...]:
    return tuple(c["name"] for c in context.get_ciphers() if c.get("protocol") == "TLSv1.3")


def test_server_and_route_contexts_order_tls13_suites_as_go(certs: TestCerts) -> None:
    options = options_from_text(f'tls {{ cert_file: "{certs.server.cert}", key_file: "{certs.server.key}" }}\n',
                                filename="tls.conf")
    assert options.tls is not None
    assert _tls13_order(server_context(options.tls)) == GO_TLS13_SUITES
    assert _tls13_order(client_context(options.tls)) == GO_TLS13_SUITES


def _negotiated(port: int, certs: TestCerts) -> tuple[str, socket.socket]:
    """Connect as nats-py does (plain INFO, then TLS with the default client context), CONNECT, PING."""
    raw = socket.create_connection(("127.0.0.1", port), timeout=5)
    line = b""
    while not line.endswith(b"\r\n"):
        chunk = raw.recv(4096)
        assert chunk, "closed before INFO"
        line += chunk
    sock = certs.client_context().wrap_socket(raw, server_hostname="127.0.0.1")
    sock.sendall(b'CONNECT {"verbose":false}\r\nPING\r\n')
    seen = b""
    while b"PONG\r\n" not in seen:
        chunk = sock.recv(4096)
        assert chunk, "closed before PONG"
        seen += chunk
    cipher = sock.cipher()
    assert cipher is not None
    return cipher[0], sock


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _connz(http_port: int) -> list[dict[str, object]]:
    deadline = time.monotonic() + 5
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/connz", timeout=2) as answer:
                return json.load(answer)["connections"]  # type: ignore[no-any-return]
        except OSError:
            assert time.monotonic() < deadline, "nats-server monitor did not answer"
            time.sleep(0.05)


def test_negotiated_suite_and_connz_field_as_nats_server(certs: TestCerts, tmp_path: Path) -> None:
    block = f'tls {{ cert_file: "{certs.server.cert}", key_file: "{certs.server.key}" }}\n'
    http_port = _free_port()
    conf = tmp_path / "real.conf"
    conf.write_text(block + f"http_port: {http_port}\n")
    with NatsServer(["-c", str(conf)]) as real, \
            InProcessServer(options_from_text(block, filename="tls.conf")) as ours:
        real_suite, real_sock = _negotiated(real.port, certs)
        our_suite, our_sock = _negotiated(ours.port, certs)
        try:
            real_connz = [c.get("tls_cipher_suite") for c in _connz(http_port)]
            assert ours.server is not None
            our_connz = [conn.tls_cipher_suite for conn in ours.server.clients.values()]
        finally:
            real_sock.close()
            our_sock.close()
    assert real_suite == "TLS_AES_128_GCM_SHA256"  # what this test stands on: Go's pick for this client
    assert our_suite == real_suite
    assert our_connz == real_connz == [real_suite]
