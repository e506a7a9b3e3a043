"""Operator mode over WebSocket: `jwt_cookie` names the cookie of the upgrade request that carries
the user JWT when CONNECT has none (the client still signs the nonce); same answers from the real
nats-server and `appliance run`. Without operators the key is refused as nats-server refuses it."""

from __future__ import annotations

import base64
import json
import socket
import time
from pathlib import Path

import pytest
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, BytesMessage, CloseConnection, Request, TextMessage

from appliance.config.load import options_from_text
from appliance.errors import ConfigError
from appliance.testing.jwts import Key, account_jwt, operator_jwt, user_jwt
from appliance.testing.natsserver import NatsServer
from appliance.testing.process import ApplianceProcess, free_port

OPERATOR = Key.new("O")
SYSTEM, ACCOUNT = Key.new("A"), Key.new("A")
USER, OTHER = Key.new("U"), Key.new("U")


def conf_text(ws_port: int) -> str:
    preload = {SYSTEM.public: account_jwt(SYSTEM, OPERATOR, name="SYS"), ACCOUNT.public: account_jwt(ACCOUNT, OPERATOR)}
    entries = "\n".join(f"  {key}: {token}" for key, token in preload.items())
    return (f"operator: {operator_jwt(OPERATOR, system_account=SYSTEM.public)}\nresolver: MEMORY\n"
            f"resolver_preload: {{\n{entries}\n}}\n"
            f"websocket {{ host: 127.0.0.1, port: {ws_port}, no_tls: true, jwt_cookie: natsjwt }}\n")


def ws_exchange(port: int, cookie: str | None, key: Key) -> bytes:
    """Upgrade (with the cookie), read INFO, send CONNECT without a JWT signed by `key`, PING:
    what the server answered until PONG or close."""
    ws = WSConnection(ConnectionType.CLIENT)
    headers = [(b"Cookie", f"natsjwt={cookie}".encode())] if cookie is not None else []
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(ws.send(Request(host=f"127.0.0.1:{port}", target="/", extra_headers=headers)))
        received = b""
        deadline = time.monotonic() + 5
        info: dict[str, object] | None = None
        while time.monotonic() < deadline:
            data = sock.recv(65536)
            if not data:
                break
            ws.receive_data(data)
            for event in ws.events():
                if isinstance(event, AcceptConnection):
                    continue
                if isinstance(event, BytesMessage | TextMessage):
                    chunk = event.data if isinstance(event.data, bytes) else event.data.encode()
                    if info is None:
                        info = json.loads(chunk[5:].split(b"\r\n")[0])
                        sig = base64.urlsafe_b64encode(key.sign(str(info["nonce"]).encode())).decode().rstrip("=")
                        connect = json.dumps({"sig": sig, "verbose": False, "protocol": 0})
                        sock.sendall(ws.send(BytesMessage(data=f"CONNECT {connect}\r\nPING\r\n".encode())))
                    else:
                        received += chunk
                if isinstance(event, CloseConnection):
                    return received
            if b"PONG\r\n" in received or b"-ERR" in received:
                return received
    return received


@pytest.mark.integration
def test_jwt_cookie_matches_nats_server(tmp_path: Path) -> None:
    token = user_jwt(USER, ACCOUNT)
    answers = []
    for name in ("real", "ours"):
        ws_port = free_port()
        conf = tmp_path / f"{name}.conf"
        conf.write_text(conf_text(ws_port))
        if name == "real":
            with NatsServer(["-c", str(conf)], log_path=tmp_path / "nats-server.log"):
                answers.append([ws_exchange(ws_port, token, USER), ws_exchange(ws_port, token, OTHER),
                                ws_exchange(ws_port, None, USER)])
        else:
            with ApplianceProcess(["-c", str(conf), "-a", "127.0.0.1", "-p", "-1"], log_dir=tmp_path):
                answers.append([ws_exchange(ws_port, token, USER), ws_exchange(ws_port, token, OTHER),
                                ws_exchange(ws_port, None, USER)])
    assert answers[0] == answers[1]
    assert answers[0][0].startswith(b"PONG\r\n")
    assert answers[0][1] == answers[0][2] == b"-ERR 'Authorization Violation'\r\n"


def test_jwt_cookie_needs_operators() -> None:
    with pytest.raises(ConfigError) as caught:
        options_from_text("websocket { port: 8080, no_tls: true, jwt_cookie: c }", filename="w.conf")
    assert any("trusted operators or trusted keys configuration is required for JWT authentication via cookie"
               in p for p in caught.value.problems)
    assert options_from_text(conf_text(8080), filename="w.conf").websocket.jwt_cookie == "natsjwt"
