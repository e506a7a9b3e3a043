"""WebSocket authorization in real processes: nats-py `ws://` clients with the `websocket {}`
block's own user, token and no_auth_user (plain nats:// clients keep the server's), and a
differential of the INFO and the `-ERR` of a refused WebSocket CONNECT against nats-server 2.15.1
configured the same way."""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path

import nats
import pytest
from nats.errors import Error as NatsError

from appliance.testing.natsserver import NatsServer
from appliance.testing.process import ApplianceProcess, free_port
from tests.security.test_websocket_process import WS_CLIENT_MARKS, frame, upgrade_request, varz_of_both, ws_conf

pytestmark = WS_CLIENT_MARKS


SERVER_USER = "authorization { user: srv, password: s }\n"
WS_USER = "no_tls: true\n authorization { user: wsu, password: w }"


async def connects(url: str, **kwargs: object) -> bool:
    """True when the server lets the client in; False on 'Authorization Violation'."""
    errors: list[Exception] = []

    async def on_error(error: Exception) -> None:
        errors.append(error)

    try:
        nc = await nats.connect(url, allow_reconnect=False, max_reconnect_attempts=0, connect_timeout=5,
                                error_cb=on_error, **kwargs)  # type: ignore[arg-type]
    except (NatsError, OSError) as error:
        assert "authorization violation" in str(error).lower() or any(
            "authorization violation" in str(e).lower() for e in errors), (error, errors)
        return False
    await nc.close()
    return True


def test_websocket_user_and_token_replace_the_servers_for_ws_clients(tmp_path: Path) -> None:
    port = free_port()
    conf = ws_conf(tmp_path / "ws.conf", port, WS_USER, extra=SERVER_USER + "appliance { workers: 2 }\n")
    with ApplianceProcess(["-c", str(conf), "-a", "127.0.0.1", "-p", "-1"], log_dir=tmp_path) as server:
        async def scenario() -> None:
            assert await connects(f"ws://wsu:w@127.0.0.1:{port}")
            assert not await connects(f"ws://wsu:bad@127.0.0.1:{port}")
            assert not await connects(f"ws://srv:s@127.0.0.1:{port}")  # the server's user is not the WS port's
            assert not await connects(f"ws://127.0.0.1:{port}")
            assert await connects(f"nats://srv:s@127.0.0.1:{server.client_port}")
            assert not await connects(f"nats://wsu:w@127.0.0.1:{server.client_port}")

        asyncio.run(scenario())
        assert "authentication error" in server.log()


def test_websocket_token_on_a_server_without_auth(tmp_path: Path) -> None:
    port = free_port()
    conf = ws_conf(tmp_path / "ws.conf", port, "no_tls: true\n authorization { token: sesame }")
    with ApplianceProcess(["-c", str(conf), "-a", "127.0.0.1", "-p", "-1"], log_dir=tmp_path) as server:
        async def scenario() -> None:
            assert await connects(f"ws://127.0.0.1:{port}", token="sesame")
            assert not await connects(f"ws://127.0.0.1:{port}", token="wrong")
            assert not await connects(f"ws://127.0.0.1:{port}")
            assert await connects(f"nats://127.0.0.1:{server.client_port}")  # the client port stays open

        asyncio.run(scenario())


def test_websocket_no_auth_user_lands_in_its_account(tmp_path: Path) -> None:
    port = free_port()
    accounts = ("accounts { A { users = [ {user: a, password: pa} ] }, B { users = [ {user: b, password: pb} ] } }\n"
                "no_auth_user: a\n")
    conf = ws_conf(tmp_path / "ws.conf", port, "no_tls: true, no_auth_user: b", extra=accounts)
    with ApplianceProcess(["-c", str(conf), "-a", "127.0.0.1", "-p", "-1"], log_dir=tmp_path) as server:
        async def scenario() -> None:
            in_b = await nats.connect(f"nats://b:pb@127.0.0.1:{server.client_port}", allow_reconnect=False)
            in_a = await nats.connect(f"nats://127.0.0.1:{server.client_port}", allow_reconnect=False)  # a
            ws = await nats.connect(f"ws://127.0.0.1:{port}", allow_reconnect=False)  # b, by the block
            try:
                sub_b, sub_a = await in_b.subscribe("where"), await in_a.subscribe("where")
                await in_b.flush()
                await in_a.flush()
                await ws.publish("where", b"ws")
                await ws.flush()
                assert (await sub_b.next_msg(timeout=10)).data == b"ws"
                with pytest.raises(nats.errors.TimeoutError):
                    await sub_a.next_msg(timeout=0.3)
            finally:
                for nc in (ws, in_a, in_b):
                    await nc.close()
            assert not await connects(f"ws://b:wrong@127.0.0.1:{port}")

        asyncio.run(scenario())


def read_frames(sock: socket.socket, data: bytes, until: bytes) -> tuple[bytes, bytes]:
    """The payloads of the server's (unmasked) frames until `until` is in them; the rest of the input."""
    out = b""
    while until not in out:
        while len(data) >= 2:
            size, at = data[1] & 0x7F, 2
            if size == 126:
                if len(data) < 4:
                    break
                size, at = int.from_bytes(data[2:4], "big"), 4
            if len(data) < at + size:
                break
            out += data[at:at + size] if data[0] & 0x0F in (0, 1, 2) else b""
            data = data[at + size:]
        if until in out:
            break
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return out, data


def ws_exchange(port: int, connect: dict[str, object]) -> tuple[dict[str, object], bytes]:
    """The INFO after the upgrade and what answers `CONNECT ... PING` (the -ERR line, or PONG)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(upgrade_request(port))
        data = b""
        while b"\r\n\r\n" not in data:
            data += sock.recv(4096)
        head, _, data = data.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 101")
        info_line, data = read_frames(sock, data, b"\r\n")
        sock.sendall(frame(b"CONNECT " + json.dumps(connect).encode() + b"\r\nPING\r\n"))
        answer, _ = read_frames(sock, data, b"\r\n")
    return json.loads(info_line[5:].strip()), answer.split(b"\r\n")[0]


@pytest.mark.parametrize(("server", "block", "connect"), [
    (SERVER_USER, WS_USER, {"user": "wsu", "pass": "w"}),
    (SERVER_USER, WS_USER, {"user": "srv", "pass": "s"}),
    ("", "no_tls: true\n authorization { token: sesame }", {"auth_token": "sesame"}),
    ("", "no_tls: true\n authorization { token: sesame }", {"auth_token": "nope"}),
    ("", "no_tls: true\n authorization { token: sesame }", {}),
    ("authorization { users = [ {user: a, password: pa} ] }\n", "no_tls: true, no_auth_user: a", {}),
    ("authorization { users = [ {user: a, password: pa} ] }\n", "no_tls: true, no_auth_user: a",
     {"user": "a", "pass": "x"}),
])
def test_ws_info_and_connect_answers_match_nats_server(tmp_path: Path, server: str, block: str,
                                                       connect: dict[str, object]) -> None:
    real_port, our_port = free_port(), free_port()
    real_conf = ws_conf(tmp_path / "real.conf", real_port, block, extra="port: -1\n" + server)
    our_conf = ws_conf(tmp_path / "ours.conf", our_port, block, extra=server)
    fields = {"verbose": False, "pedantic": False, "protocol": 1, **connect}
    answers = []
    with NatsServer(["-c", str(real_conf)]), \
            ApplianceProcess(["-c", str(our_conf), "-a", "127.0.0.1", "-p", "-1"], log_dir=tmp_path):
        for port in (real_port, our_port):
            info, answer = ws_exchange(port, fields)
            answers.append((info.get("auth_required"), "nonce" in info, answer))
    assert answers[0] == answers[1]
    assert answers[1][2] in (b"PONG", b"-ERR 'Authorization Violation'")


def test_varz_websocket_auth_timeout_as_nats_server(tmp_path: Path) -> None:
    documents, _ = varz_of_both(tmp_path, "no_tls: true\n authorization { token: t, timeout: 3 }")
    blocks = [(varz["websocket"].get("auth_timeout"), varz.get("auth_required")) for varz in documents]
    assert blocks[0] == blocks[1] == (3, None)
