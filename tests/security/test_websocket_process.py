"""WebSocket clients in real processes: nats-py `ws://` and `wss://` through `appliance run` with two
workers (each serves its own WebSocket connections), the origin checks answered as nats-server
2.15.1 answers them (a differential on the HTTP upgrade reply), and a bad frame closing only its
own connection."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import socket
import time
import urllib.request
from pathlib import Path

import nats
import pytest

from appliance.testing.certs import TestCerts
from appliance.testing.natsserver import NatsServer
from appliance.testing.process import ApplianceProcess, free_port

WS_CLIENT_MARKS = [
    pytest.mark.integration,
    # nats-py's ws:// transport passes aiohttp a float timeout, which aiohttp >= 3.10 deprecates
    pytest.mark.filterwarnings("ignore:parameter 'timeout' of type 'float' is deprecated:DeprecationWarning"),
    # and leaves the aiohttp ClientSession of a transport it replaced unclosed (client side, not ours)
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.usefixtures("ws_client_leftovers"),
]
pytestmark = WS_CLIENT_MARKS


def ws_conf(path: Path, port: int, block: str = "no_tls: true", extra: str = "") -> Path:
    path.write_text(f"websocket {{ listen: \"127.0.0.1:{port}\"\n {block} }}\n{extra}")
    return path


def upgrade_request(port: int, origin: str | None = None, host: str | None = None) -> bytes:
    key = base64.b64encode(os.urandom(16)).decode()
    lines = ["GET / HTTP/1.1", f"Host: {host or f'127.0.0.1:{port}'}", "Upgrade: websocket",
             "Connection: Upgrade", f"Sec-WebSocket-Key: {key}", "Sec-WebSocket-Version: 13"]
    if origin is not None:
        lines.append(f"Origin: {origin}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def http_answer(port: int, request: bytes) -> tuple[str, dict[str, str], bytes]:
    """(status line, headers (lower-case names), what followed the headers) of the upgrade reply."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(request)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        want = int(headers.get("content-length", "0"))
        while len(rest) < want:
            chunk = sock.recv(4096)
            if not chunk:
                break
            rest += chunk
        return lines[0], headers, rest


def frame(payload: bytes, *, opcode: int = 2, mask: bool = True, rsv: int = 0) -> bytes:
    """A client frame (masked, as RFC 6455 requires of clients)."""
    head = bytes([0x80 | rsv | opcode])
    size = len(payload)
    mask_bit = 0x80 if mask else 0
    if size < 126:
        head += bytes([mask_bit | size])
    else:
        head += bytes([mask_bit | 126]) + size.to_bytes(2, "big")
    if not mask:
        return head + payload
    key = os.urandom(4)
    return head + key + bytes(b ^ key[i % 4] for i, b in enumerate(payload))


async def pub_sub_request(url: str, **kwargs: object) -> set[int]:
    clients = [await nats.connect(url, allow_reconnect=False, **kwargs) for _ in range(4)]  # type: ignore[arg-type]
    try:
        subs = [await nc.subscribe("ws.fan") for nc in clients]

        async def echo(msg: nats.aio.msg.Msg) -> None:
            await msg.respond(b"re:" + msg.data)

        await clients[1].subscribe("ws.svc", cb=echo)
        for nc in clients:
            await nc.flush()
        await clients[0].publish("ws.fan", b"x" * 128)
        for sub in subs:
            assert (await sub.next_msg(timeout=10)).data == b"x" * 128
        reply = await clients[2].request("ws.svc", b"ping", timeout=10)
        assert reply.data == b"re:ping"
        big = os.urandom(200_000)  # several frames' worth of reads on both sides
        await clients[3].publish("ws.fan", big)
        assert (await subs[0].next_msg(timeout=10)).data == big
        return {int(nc._client_id) % 2 for nc in clients}  # type: ignore[arg-type]
    finally:
        for nc in clients:
            await nc.close()


def test_ws_pub_sub_request_with_two_workers_and_plain_clients_alongside(tmp_path: Path) -> None:
    port = free_port()
    conf = ws_conf(tmp_path / "ws.conf", port, extra="appliance { workers: 2 }\n")
    with ApplianceProcess(["-c", str(conf), "-a", "127.0.0.1", "-p", "-1"], log_dir=tmp_path) as server:
        log = server.log()
        assert f"Listening for websocket clients on ws://127.0.0.1:{port}" in log
        assert "Websocket not configured with TLS. DO NOT USE IN PRODUCTION!" in log
        workers: set[int] = set()
        deadline = time.monotonic() + 40
        while workers != {0, 1} and time.monotonic() < deadline:
            # the kernel spreads connections over the workers listening; a worker still starting on a
            # loaded host gets none yet (seen: 12 connections all on worker 0), so rounds go on a while
            workers |= asyncio.run(pub_sub_request(f"ws://127.0.0.1:{port}"))
        assert workers == {0, 1}

        async def across() -> None:  # a ws:// subscriber sees a plain nats:// publisher and back
            ws = await nats.connect(f"ws://127.0.0.1:{port}", allow_reconnect=False)
            plain = await nats.connect(f"nats://127.0.0.1:{server.client_port}", allow_reconnect=False)
            try:
                sub_ws = await ws.subscribe("mix")
                sub_plain = await plain.subscribe("mix")
                await ws.flush()
                await plain.flush()
                await plain.publish("mix", b"from-plain")
                await ws.publish("mix", b"from-ws")
                got_ws = {(await sub_ws.next_msg(timeout=10)).data for _ in range(2)}
                got_plain = {(await sub_plain.next_msg(timeout=10)).data for _ in range(2)}
                assert got_ws == got_plain == {b"from-plain", b"from-ws"}
            finally:
                await ws.close()
                await plain.close()

        asyncio.run(across())


def test_wss_with_trustme_certificates(certs: TestCerts, tmp_path: Path) -> None:
    port, http = free_port(), free_port()
    block = f'tls {{ cert_file: "{certs.server.cert}", key_file: "{certs.server.key}" }}'
    conf = ws_conf(tmp_path / "wss.conf", port, block, extra=f"http_port: {http}\nappliance {{ workers: 2 }}\n")
    with ApplianceProcess(["-c", str(conf), "-a", "127.0.0.1", "-p", "-1"], log_dir=tmp_path) as server:
        assert f"Listening for websocket clients on wss://127.0.0.1:{port}" in server.log()
        asyncio.run(pub_sub_request(f"wss://127.0.0.1:{port}", tls=certs.client_context()))

        async def connz() -> list[dict[str, object]]:
            nc = await nats.connect(f"wss://127.0.0.1:{port}", tls=certs.client_context(), allow_reconnect=False,
                                    name="wss-probe")
            try:
                await nc.flush()
                for _ in range(50):  # bounded: the row of the other worker may lag a moment
                    with urllib.request.urlopen(f"http://127.0.0.1:{http}/connz", timeout=5) as answer:
                        conns = json.loads(answer.read())["connections"]
                    found = [c for c in conns if c.get("name") == "wss-probe"]
                    if found:
                        return found
                    await asyncio.sleep(0.1)
                return []
            finally:
                await nc.close()

        found = asyncio.run(connz())
        assert found and found[0]["type"] == "websocket"
        assert str(found[0]["tls_version"]).startswith("1.")


def test_websocket_without_tls_or_no_tls_is_refused_as_nats_server_refuses_it(tmp_path: Path) -> None:
    conf = tmp_path / "bad.conf"
    conf.write_text(f"websocket {{ port: {free_port()} }}\n")
    server = ApplianceProcess(["-c", str(conf), "-a", "127.0.0.1", "-p", "-1"], log_dir=tmp_path)
    with pytest.raises(Exception):  # noqa: B017  # start() raises when the process exits at start-up
        server.start()
    assert "websocket requires TLS configuration" in server.log()


@pytest.mark.parametrize(("block", "origin", "host"), [
    ("no_tls: true, same_origin: true", "http://evil.example:80", None),
    ("no_tls: true, same_origin: true", "http://127.0.0.1:{port}", None),
    ("no_tls: true, allowed_origins: [\"http://good.example\"]", "http://good.example", None),
    ("no_tls: true, allowed_origins: [\"http://good.example\"]", "https://good.example", None),
    ("no_tls: true, allowed_origins: [\"http://good.example:8080\"]", "http://good.example", None),
    ("no_tls: true, allowed_origins: [\"http://good.example\"]", None, None),
])
def test_origin_checks_answer_as_nats_server(tmp_path: Path, block: str, origin: str | None,
                                             host: str | None) -> None:
    """The status, the body and the headers that matter of the upgrade reply, side by side."""
    answers = []
    real_port, our_port = free_port(), free_port()
    real_conf = ws_conf(tmp_path / "real.conf", real_port, block, extra="port: -1\n")
    our_conf = ws_conf(tmp_path / "ours.conf", our_port, block)
    with NatsServer(["-c", str(real_conf)]), \
            ApplianceProcess(["-c", str(our_conf), "-a", "127.0.0.1", "-p", "-1"], log_dir=tmp_path) as ours:
        for port in (real_port, our_port):
            wanted = None if origin is None else origin.format(port=port)
            status, headers, body = http_answer(port, upgrade_request(port, wanted, host))
            answers.append((status.split(" ", 1)[1] if status.startswith("HTTP/1.1 ") else status,
                            headers.get("content-type"), headers.get("sec-websocket-version"),
                            headers.get("upgrade", "").lower(), body if not status.endswith("101 Switching Protocols") else b""))
        if answers[0][0].startswith("403"):
            assert "websocket handshake error: origin not allowed" in ours.log()
    assert answers[0] == answers[1]


def test_bad_frame_closes_only_that_connection(tmp_path: Path) -> None:
    port = free_port()
    conf = ws_conf(tmp_path / "ws.conf", port, extra="appliance { workers: 1 }\n")
    with ApplianceProcess(["-c", str(conf), "-a", "127.0.0.1", "-p", "-1"], log_dir=tmp_path):
        async def scenario() -> None:
            good = await nats.connect(f"ws://127.0.0.1:{port}", allow_reconnect=False)
            try:
                sub = await good.subscribe("still")
                await good.flush()
                with socket.create_connection(("127.0.0.1", port), timeout=5) as bad:
                    bad.sendall(upgrade_request(port))
                    answer = b""
                    while b"\r\n\r\n" not in answer:
                        answer += bad.recv(4096)
                    assert answer.startswith(b"HTTP/1.1 101")
                    bad.sendall(frame(b"CONNECT {}\r\n", rsv=0x40))  # RSV1 without compression: a bad frame
                    rest = b""
                    while True:
                        chunk = bad.recv(4096)
                        if not chunk:
                            break
                        rest += chunk
                    assert b"\x88" in rest  # a close frame came back before the socket closed
                await good.publish("still", b"alive")
                assert (await sub.next_msg(timeout=10)).data == b"alive"
            finally:
                await good.close()

        asyncio.run(scenario())


def ws_info(port: int) -> dict[str, object]:
    """The INFO that comes first, in a binary frame, after the upgrade."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(upgrade_request(port))
        data = b""
        while not (b"INFO " in data and data.endswith(b"\r\n")):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    head, _, frames = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 101") and frames[0] == 0x82  # FIN + binary
    line = frames[frames.index(b"INFO "):]
    return json.loads(line[5:].strip())


def test_ws_info_has_no_tls_fields_of_the_client_port_as_nats_server(certs: TestCerts, tmp_path: Path) -> None:
    keys = ("tls_required", "tls_verify", "tls_available", "auth_required", "headers", "proto", "max_payload")
    tls = f'tls {{ cert_file: "{certs.server.cert}", key_file: "{certs.server.key}" }}\n'
    real_port, our_port = free_port(), free_port()
    real_conf = ws_conf(tmp_path / "real.conf", real_port, extra="port: -1\n" + tls)
    our_conf = ws_conf(tmp_path / "ours.conf", our_port, extra=tls)
    with NatsServer(["-c", str(real_conf)]), \
            ApplianceProcess(["-c", str(our_conf), "-a", "127.0.0.1", "-p", "-1"], log_dir=tmp_path):
        real, ours = ws_info(real_port), ws_info(our_port)
    assert {k: real.get(k) for k in keys} == {k: ours.get(k) for k in keys}
    assert "tls_required" not in ours and ours["client_ip"] == "127.0.0.1"


def varz_of_both(tmp_path: Path, block: str) -> tuple[list[dict], tuple[int, int]]:
    """/varz of nats-server and of appliance, both with the same `websocket {}` block; and their
    WebSocket ports."""
    real_port, our_port, real_http, our_http = free_port(), free_port(), free_port(), free_port()
    real_conf = ws_conf(tmp_path / "real.conf", real_port, block, extra=f"port: -1\nhttp_port: {real_http}\n")
    our_conf = ws_conf(tmp_path / "ours.conf", our_port, block, extra=f"http_port: {our_http}\n")
    with NatsServer(["-c", str(real_conf)]), \
            ApplianceProcess(["-c", str(our_conf), "-a", "127.0.0.1", "-p", "-1"], log_dir=tmp_path):
        documents = []
        for http in (real_http, our_http):
            with urllib.request.urlopen(f"http://127.0.0.1:{http}/varz", timeout=5) as answer:
                documents.append(json.loads(answer.read()))
    return documents, (real_port, our_port)


def test_varz_websocket_block_as_nats_server(tmp_path: Path) -> None:
    block = ('no_tls: true, same_origin: true, compression: true, allowed_origins: ["http://a.example"], '
             'handshake_timeout: "3s"')
    documents, ports = varz_of_both(tmp_path, block)
    blocks = [varz["websocket"] for varz in documents]
    for found, port in zip(blocks, ports, strict=True):
        assert found.pop("port") == port
    assert blocks[0] == blocks[1]
