"""Client TLS in real processes: `appliance run` with two workers (each terminates TLS for its own
connections) and, side by side, nats-server 2.15.1 with the same `tls {}` block: the same INFO
fields, the same -ERR, the same start-up log line."""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import time
import urllib.request
from pathlib import Path

import nats
import pytest

from appliance.testing.certs import Pair, TestCerts
from appliance.testing.natsserver import NatsServer
from appliance.testing.process import ApplianceProcess, free_port

pytestmark = pytest.mark.integration

INFO_KEYS = ("tls_required", "tls_verify", "tls_available", "auth_required")


def tls_block(certs: TestCerts, extra: str = "") -> str:
    return (f'tls {{ cert_file: "{certs.server.cert}", key_file: "{certs.server.key}", ca_file: "{certs.ca_file}"'
            f"{', ' + extra if extra else ''} }}\n")


def read_line(sock: socket.socket | ssl.SSLSocket) -> bytes:
    line = b""
    while not line.endswith(b"\r\n"):
        chunk = sock.recv(1)
        if not chunk:
            return line + b"<closed>"
        line += chunk
    return line


def info_of(port: int) -> dict[str, object]:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        line = read_line(sock)
    return {k: v for k, v in json.loads(line[5:]).items() if k in INFO_KEYS}


def after_tls(port: int, context: ssl.SSLContext, data: bytes) -> bytes:
    """INFO in plain text, the handshake, then `data`; the first line of the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        read_line(raw)
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as secure:
            secure.sendall(data)
            try:
                return read_line(secure)
            except (ssl.SSLError, ConnectionResetError):
                return b"<closed>"


def test_two_workers_serve_tls_and_connz_shows_it(certs: TestCerts, tmp_path: Path) -> None:
    http = free_port()
    conf = tmp_path / "tls.conf"
    conf.write_text(tls_block(certs) + f"http_port: {http}\nappliance {{ workers: 2 }}\n")
    with ApplianceProcess(["-c", str(conf), "-a", "127.0.0.1", "-p", "-1"], log_dir=tmp_path) as server:
        assert "TLS required for client connections" in server.log()
        url = f"tls://127.0.0.1:{server.client_port}"

        async def traffic() -> set[int]:
            clients = [await nats.connect(url, tls=certs.client_context(), allow_reconnect=False) for _ in range(4)]
            try:
                subs = [await nc.subscribe("tls.fan") for nc in clients]
                for nc in clients:
                    await nc.flush()
                await clients[0].publish("tls.fan", b"x" * 128)
                for sub in subs:
                    assert (await sub.next_msg(timeout=10)).data == b"x" * 128
                return {int(nc._client_id) % 2 for nc in clients}  # type: ignore[arg-type]
            finally:
                for nc in clients:
                    await nc.close()

        workers: set[int] = set()
        for _ in range(5):  # the kernel picks the worker of each connection: a round may land on one only
            workers |= asyncio.run(traffic())
            if workers == {0, 1}:
                break
        assert workers == {0, 1}, "five rounds of four connections did not land on both workers"
        with urllib.request.urlopen(f"http://127.0.0.1:{http}/connz?state=closed", timeout=10) as answer:
            connz = json.load(answer)
        tls_conns = [c for c in connz["connections"] if c.get("tls_version") == "1.3"]
        assert len(tls_conns) >= 4, connz
        assert all(c["tls_cipher_suite"].startswith("TLS_") and "tls_first" not in c for c in tls_conns)


@pytest.mark.parametrize(("extra", "tail"), [("", ""), ("verify: true", ""), ("verify_and_map: true", ""),
                                             ("", "allow_non_tls: true\n")])
def test_info_fields_as_nats_server(certs: TestCerts, tmp_path: Path, extra: str, tail: str) -> None:
    users = 'authorization { users = [ { user: "CN=nobody-here" } ] }\n' if "map" in extra else ""
    conf = tmp_path / "same.conf"
    conf.write_text(tls_block(certs, extra) + users + tail)
    with NatsServer(["-c", str(conf)]) as real, \
            ApplianceProcess(["-c", str(conf), "-a", "127.0.0.1", "-p", "-1"], log_dir=tmp_path) as ours:
        assert info_of(ours.client_port) == info_of(real.port)


def test_unmapped_certificate_gets_the_same_error(certs: TestCerts, tmp_path: Path) -> None:
    conf = tmp_path / "map.conf"
    conf.write_text(tls_block(certs, "verify_and_map: true") + 'authorization { users = [ { user: "CN=alice,OU=eng,O=Acme" } ] }\n')
    stranger: Pair = certs.issue("diff-unmapped", "nobody.example.com", common_name="mallory")
    alice = certs.issue("diff-alice", "alice.example.com", common_name="alice", organization="Acme", unit="eng")
    request = b'CONNECT {"verbose":false,"pedantic":false}\r\nPING\r\n'
    with NatsServer(["-c", str(conf)]) as real, \
            ApplianceProcess(["-c", str(conf), "-a", "127.0.0.1", "-p", "-1"], log_dir=tmp_path) as ours:
        for pair, expected in ((stranger, b"-ERR 'Authorization Violation'\r\n"), (alice, b"PONG\r\n")):
            answers = [after_tls(port, certs.client_context(pair), request) for port in (real.port, ours.client_port)]
            assert answers == [expected, expected]


def test_plain_text_to_a_tls_port_is_closed_by_both(certs: TestCerts, tmp_path: Path) -> None:
    conf = tmp_path / "plain.conf"
    conf.write_text(tls_block(certs))
    with NatsServer(["-c", str(conf)]) as real, \
            ApplianceProcess(["-c", str(conf), "-a", "127.0.0.1", "-p", "-1"], log_dir=tmp_path) as ours:
        for port in (real.port, ours.client_port):
            with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
                read_line(sock)
                sock.sendall(b"CONNECT {}\r\nPING\r\n")
                deadline = time.monotonic() + 5
                received = b""
                while time.monotonic() < deadline:
                    try:
                        chunk = sock.recv(4096)
                    except ConnectionResetError:
                        break
                    if not chunk:
                        break
                    received += chunk
                assert b"PONG" not in received and b"-ERR" not in received, (port, received)


def session_tickets_from(port: int, context: ssl.SSLContext) -> int:
    """How many TLS 1.3 NewSessionTicket messages the server sends a client that connects, says
    CONNECT and PING and reads the PONG (the ticket comes before it). Counted with the ssl module's
    message callback (`_msg_callback`, the hook behind its own debugging output)."""
    seen: list[object] = []
    context._msg_callback = (  # type: ignore[attr-defined]
        lambda _conn, direction, _version, _content, message, _data: seen.append(message) if direction == "read" else None)
    answer = after_tls(port, context, b'CONNECT {"verbose":false,"pedantic":false}\r\nPING\r\n')
    assert answer == b"PONG\r\n"
    return sum(1 for message in seen if message == ssl._TLSMessageType.NEWSESSION_TICKET)  # type: ignore[attr-defined]


def test_one_session_ticket_as_nats_server(certs: TestCerts, tmp_path: Path) -> None:
    """Go's crypto/tls sends one TLS 1.3 session ticket after a handshake, OpenSSL two unless told:
    the second costs both ends a ticket's encryption for nothing a NATS client uses."""
    conf = tmp_path / "tickets.conf"
    conf.write_text(tls_block(certs))
    with NatsServer(["-c", str(conf)]) as real, \
            ApplianceProcess(["-c", str(conf), "-a", "127.0.0.1", "-p", "-1"], log_dir=tmp_path) as ours:
        counts = [session_tickets_from(port, certs.client_context()) for port in (real.port, ours.client_port)]
    assert counts == [1, 1]


def test_pinned_certs_let_in_only_the_pinned_key_as_nats_server(certs: TestCerts, tmp_path: Path) -> None:
    """`tls { verify: true, pinned_certs: [...] }`: a client whose certificate key is pinned gets its
    PONG; one with another certificate from the same CA is closed after the handshake, and both
    servers log it as a TLS handshake error."""
    from appliance.server.tls_pin import key_id

    alice = certs.issue("pin-alice", "alice.example.com", common_name="alice")
    bob = certs.issue("pin-bob", "bob.example.com", common_name="bob")
    pin = key_id(ssl.PEM_cert_to_DER_cert(Path(alice.cert).read_text()))
    conf = tmp_path / "pinned.conf"
    conf.write_text(tls_block(certs, f'verify: true, pinned_certs: ["{pin.upper()}"]'))
    request = b'CONNECT {"verbose":false,"pedantic":false}\r\nPING\r\n'
    real_log = tmp_path / "nats-server.log"
    with NatsServer(["-c", str(conf)], log_path=real_log) as real, \
            ApplianceProcess(["-c", str(conf), "-a", "127.0.0.1", "-p", "-1"], log_dir=tmp_path) as ours:
        for pair, expected in ((alice, b"PONG\r\n"), (bob, b"<closed>")):
            answers = [after_tls(port, certs.client_context(pair), request) for port in (real.port, ours.client_port)]
            assert answers == [expected, expected], pair
        line = "TLS handshake error: certificate not pinned"
        ours.wait_log(line, timeout_s=10)
        deadline = time.monotonic() + 10
        while line not in real_log.read_text():
            assert time.monotonic() < deadline, real_log.read_text()
            time.sleep(0.05)
