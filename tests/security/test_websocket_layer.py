"""The WebSocket layer and the `websocket {}` block without sockets or clocks: the upgrade and its
refusals, frames in and out, a bad frame, origin rules, the config's errors."""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, BytesMessage, CloseConnection, Request

from appliance.config.load import options_from_text
from appliance.config.options import ServerOptions
from appliance.errors import ConfigError
from appliance.server.websocket import (
    WebSocketLayer,
    WebsocketServing,
    host_and_port,
    origin_refusal,
    serving_from_options,
)
from tests.security.fake_server import FakeServer


# --- config ---------------------------------------------------------------------------------------

def load(text: str) -> ServerOptions:
    return options_from_text(text, filename="t.conf")


def problems(text: str) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load(text)
    return caught.value.problems


def test_websocket_block_fills_options() -> None:
    options = load('websocket { listen: "127.0.0.1:8080", no_tls: true, compression: true, same_origin: true,\n'
                   ' allowed_origins: ["http://a.example", "https://b.example:8443"], handshake_timeout: "5s" }\n')
    ws = options.websocket
    assert (ws.host, ws.port, ws.no_tls, ws.compression, ws.same_origin) == ("127.0.0.1", 8080, True, True, True)
    assert ws.allowed_origins == ["http://a.example", "https://b.example:8443"]
    assert ws.handshake_timeout_s == 5.0
    serving = serving_from_options(options)
    assert serving is not None and serving.context is None and serving.handshake_timeout_s == 5.0
    assert serving.allowed_origins["b.example"].port == "8443"
    assert serving.allowed_origins["a.example"].port == "80"


def test_websocket_off_by_default() -> None:
    assert serving_from_options(load("port: 4222\n")) is None


@pytest.mark.parametrize(("body", "text"), [
    ("port: 8080", "websocket requires TLS configuration"),
    ('port: 8080, no_tls: true, jwt_cookie: "jwt"',
     'trusted operators or trusted keys configuration is required for JWT authentication via cookie "jwt"'),
    ("port: 8080, no_tls: true, bogus: 1", 'unknown field "bogus"'),
    ("port: 8080, no_tls: true, authorization { user: a, password: b, users: [] }", 'unknown field "users"'),
    ('port: 8080, no_tls: true, no_auth_user: "nobody"', 'no_auth_user: "nobody" present, but users/nkeys are not defined'),
    ('port: 8080, no_tls: true, handshake_timeout: "soon"', "error parsing handshake timeout"),
])
def test_bad_websocket_blocks_are_nats_server_errors(body: str, text: str) -> None:
    found = problems(f"websocket {{ {body} }}\n")
    assert any(text in problem for problem in found), found


def test_websocket_no_auth_user_must_be_a_user() -> None:
    good = load('authorization { users = [ { user: alice, password: pw } ] }\n'
                'websocket { port: 8080, no_tls: true, no_auth_user: alice }\n')
    assert good.websocket.no_auth_user == "alice"
    found = problems('authorization { users = [ { user: alice, password: pw } ] }\n'
                     'websocket { port: 8080, no_tls: true, no_auth_user: bob }\n')
    assert any('no_auth_user: "bob" not present as user or nkey' in p for p in found), found


# --- origins ----------------------------------------------------------------------------------------

def serving(*, same: bool = False, allowed: tuple[str, ...] = ()) -> WebsocketServing:
    text = "websocket { port: 8080, no_tls: true" + (", same_origin: true" if same else "")
    if allowed:
        text += ", allowed_origins: [" + ", ".join(f'"{a}"' for a in allowed) + "]"
    result = serving_from_options(load(text + " }\n"))
    assert result is not None
    return result


def request(host: str, origin: str | None) -> Request:
    headers = [] if origin is None else [(b"origin", origin.encode())]
    return Request(host=host, target="/", extra_headers=headers)


@pytest.mark.parametrize(("same", "allowed", "host", "origin", "refusal"), [
    (False, (), "h:1", "http://x.example", None),
    (True, (), "127.0.0.1:8080", "http://127.0.0.1:8080", None),
    (True, (), "127.0.0.1:8080", "http://127.0.0.1:8081", "not same origin"),
    (True, (), "example.com", "http://EXAMPLE.com:80", None),
    (True, (), "example.com", "https://example.com", "not same origin"),
    (True, (), "h:1", None, None),
    (False, ("http://a.example",), "h:1", "http://a.example:80", None),
    (False, ("http://a.example",), "h:1", "https://a.example", "not in the allowed list"),
    (False, ("https://a.example",), "h:1", "https://a.example:443", None),
    (False, ("http://a.example",), "h:1", "http://b.example", "not in the allowed list"),
])
def test_origin_rules_of_nats_server(same: bool, allowed: tuple[str, ...], host: str, origin: str | None,
                                     refusal: str | None) -> None:
    assert origin_refusal(serving(same=same, allowed=allowed), request(host, origin), tls=False) == refusal


def test_host_and_port_defaults_and_ipv6() -> None:
    assert host_and_port(False, "Example.COM") == ("example.com", "80")
    assert host_and_port(True, "example.com") == ("example.com", "443")
    assert host_and_port(False, "[::1]:9000") == ("::1", "9000")
    assert host_and_port(False, "[::1]") == ("::1", "80")


# --- the layer, on fakes --------------------------------------------------------------------------

@dataclass
class FakeConn:
    """What the layer calls on a ClientConnection: records it."""

    server: FakeServer = field(default_factory=FakeServer)
    websocket: bool = False
    closed: bool = False
    received: bytearray = field(default_factory=bytearray)
    close_reason: str = ""
    transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        transport.write(b"INFO {}\r\n")

    def data_received(self, data: bytes) -> None:
        self.received += data

    def close(self, reason: str, *, abort: bool = False) -> None:
        self.closed = True
        self.close_reason = reason
        self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True


class FakeTransport:
    def __init__(self) -> None:
        self.written = bytearray()
        self.closed = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 5555) if name == "peername" else default

    def write(self, data: bytes) -> None:
        assert not self.closed
        self.written += data

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True


def open_layer(compression: bool = False) -> tuple[WebSocketLayer, FakeConn, FakeTransport, WSConnection]:
    conn = FakeConn()
    layer = WebSocketLayer(conn, WebsocketServing(context=None, handshake_timeout_s=2.0, compression=compression,
                                                  same_origin=False, allowed_origins={}))  # type: ignore[arg-type]
    raw = FakeTransport()
    layer.connection_made(raw)  # type: ignore[arg-type]
    client = WSConnection(ConnectionType.CLIENT)
    layer.data_received(client.send(Request(host="127.0.0.1:8080", target="/")))
    client.receive_data(bytes(raw.written))
    raw.written.clear()
    events = list(client.events())
    assert isinstance(events[0], AcceptConnection)
    return layer, conn, raw, client


def test_upgrade_then_info_first_in_a_binary_frame() -> None:
    conn = FakeConn()
    layer = WebSocketLayer(conn, WebsocketServing(None, 2.0, False, False, {}))  # type: ignore[arg-type]
    raw = FakeTransport()
    layer.connection_made(raw)  # type: ignore[arg-type]
    client = WSConnection(ConnectionType.CLIENT)
    layer.data_received(client.send(Request(host="127.0.0.1:8080", target="/")))
    assert conn.websocket and conn.transport is layer
    assert raw.written.startswith(b"HTTP/1.1 101 ")
    client.receive_data(bytes(raw.written))
    events = list(client.events())
    assert isinstance(events[0], AcceptConnection)
    assert isinstance(events[1], BytesMessage) and events[1].data == b"INFO {}\r\n"


@settings(max_examples=50, deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=300), min_size=1, max_size=8), st.integers(1, 64))
def test_frames_in_any_chunking_reach_the_parser_in_order(messages: list[bytes], chunk: int) -> None:
    layer, conn, _, client = open_layer()
    wire = b"".join(client.send(BytesMessage(data=m)) for m in messages)
    for start in range(0, len(wire), chunk):
        layer.data_received(wire[start:start + chunk])
    assert bytes(conn.received) == b"".join(messages)


def test_writes_become_binary_frames_and_compression_round_trips() -> None:
    for compression in (False, True):
        conn = FakeConn()
        layer = WebSocketLayer(conn, WebsocketServing(None, 2.0, compression, False, {}))  # type: ignore[arg-type]
        raw = FakeTransport()
        layer.connection_made(raw)  # type: ignore[arg-type]
        from wsproto.extensions import PerMessageDeflate
        client = WSConnection(ConnectionType.CLIENT)
        layer.data_received(client.send(Request(host="h", target="/", extensions=[PerMessageDeflate()])))
        layer.write(b"MSG a 1 5\r\nhello\r\n" * 50)
        client.receive_data(bytes(raw.written))
        events = list(client.events())
        assert b"".join(e.data for e in events if isinstance(e, BytesMessage)) == b"INFO {}\r\n" + b"MSG a 1 5\r\nhello\r\n" * 50
        layer.data_received(client.send(BytesMessage(data=b"PING\r\n")))
        assert bytes(conn.received) == b"PING\r\n"


def test_bad_frame_sends_a_close_and_closes_with_read_error() -> None:
    layer, conn, raw, client = open_layer()
    payload = b"PING\r\n"
    key = os.urandom(4)
    bad = bytes([0x80 | 0x40 | 0x2, 0x80 | len(payload)]) + key + bytes(b ^ key[i % 4] for i, b in enumerate(payload))
    layer.data_received(bad)  # RSV1 set without a negotiated extension
    assert conn.closed and conn.close_reason == "Read Error"
    client.receive_data(bytes(raw.written))
    closes = [e for e in client.events() if isinstance(e, CloseConnection)]
    assert closes and closes[0].code == 1002
    assert raw.closed and conn.received == bytearray()


def test_client_close_is_answered_and_closes_as_client_closed() -> None:
    layer, conn, raw, client = open_layer()
    layer.data_received(client.send(BytesMessage(data=b"PUB a 1\r\nx\r\n")) + client.send(CloseConnection(code=1000)))
    assert bytes(conn.received) == b"PUB a 1\r\nx\r\n"
    assert conn.closed and conn.close_reason == "Client Closed"
    client.receive_data(bytes(raw.written))
    assert any(isinstance(e, CloseConnection) for e in client.events())


@pytest.mark.parametrize(("request_text", "status"), [
    (b"POST / HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
     b"Sec-WebSocket-Key: " + base64.b64encode(b"k" * 16) + b"\r\nSec-WebSocket-Version: 13\r\n\r\n", b"405"),
    (b"GET / HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
     b"Sec-WebSocket-Version: 13\r\n\r\n", b"400"),
    (b"not http at all\r\n\r\n", b"400"),
])
def test_refused_upgrades_get_an_http_error_and_no_connection(request_text: bytes, status: bytes) -> None:
    conn = FakeConn()
    layer = WebSocketLayer(conn, WebsocketServing(None, 2.0, False, False, {}))  # type: ignore[arg-type]
    raw = FakeTransport()
    layer.connection_made(raw)  # type: ignore[arg-type]
    layer.data_received(request_text)
    assert raw.written.startswith(b"HTTP/1.1 " + status)
    assert b"Sec-Websocket-Version: 13" in raw.written
    assert raw.closed and conn.transport is None


def test_an_upgrade_that_does_not_finish_in_the_handshake_timeout_is_dropped() -> None:
    conn = FakeConn()
    layer = WebSocketLayer(conn, WebsocketServing(None, 3.5, False, False, {}))  # type: ignore[arg-type]
    raw = FakeTransport()
    layer.connection_made(raw)  # type: ignore[arg-type]
    layer.data_received(b"GET / HTTP/1.1\r\nHost: h\r\n")  # half a request, then silence
    delay, fire = conn.server.loop.timers[0]
    assert delay == 3.5
    fire()
    assert raw.closed and conn.transport is None and raw.written == bytearray()


def test_websocket_no_auth_user_applies_to_websocket_clients_only() -> None:
    from appliance.server.auth import Authenticator, Granted
    options = load('authorization { users = [ { user: alice, password: pw }, { user: bob, password: pw } ] }\n'
                   'websocket { port: 8080, no_tls: true, no_auth_user: alice }\n')
    auth = Authenticator(options)
    granted = auth.authenticate({}, websocket=True)
    assert isinstance(granted, Granted) and granted.user is not None and granted.user.username == "alice"
    assert not isinstance(auth.authenticate({}), Granted)  # the client port has no no_auth_user
    both = Authenticator(load('authorization { users = [ { user: alice, password: pw }, { user: bob, password: pw } ] }\n'
                              'no_auth_user: bob\nwebsocket { port: 8080, no_tls: true }\n'))
    fallback = both.authenticate({}, websocket=True)  # no websocket one: the top-level no_auth_user
    assert isinstance(fallback, Granted) and fallback.user is not None and fallback.user.username == "bob"


def test_wsproto_takes_over_mid_stream_at_a_frame_boundary() -> None:
    from wsproto.events import Ping, Pong
    layer, conn, raw, client = open_layer()
    big = os.urandom(70_000)  # a 64-bit length
    wire = (client.send(BytesMessage(data=b"PING\r\n")) + client.send(BytesMessage(data=big))
            + client.send(Ping(payload=b"p")) + client.send(BytesMessage(data=b"PONG\r\n")))
    for start in range(0, len(wire), 999):
        layer.data_received(wire[start:start + 999])
    assert bytes(conn.received) == b"PING\r\n" + big + b"PONG\r\n"
    client.receive_data(bytes(raw.written))
    assert any(isinstance(e, Pong) and e.payload == b"p" for e in client.events())


def test_server_frames_of_every_length_form_decode() -> None:
    layer, _, raw, client = open_layer()
    payloads = [b"a" * 125, b"b" * 126, b"c" * 65535, b"d" * 65536]
    for payload in payloads:
        layer.write(payload)
    client.receive_data(bytes(raw.written))
    got = [e.data for e in client.events() if isinstance(e, BytesMessage)]
    assert got == payloads


def test_data_before_the_upgrade_answer_is_refused_as_nats_server() -> None:
    conn = FakeConn()
    layer = WebSocketLayer(conn, WebsocketServing(None, 2.0, False, False, {}))  # type: ignore[arg-type]
    raw = FakeTransport()
    layer.connection_made(raw)  # type: ignore[arg-type]
    client = WSConnection(ConnectionType.CLIENT)
    request = client.send(Request(host="h", target="/"))
    layer.data_received(request[:10])
    layer.data_received(request[10:] + b"\x82\x80abcd")  # a frame glued to the request
    assert raw.written.startswith(b"HTTP/1.1 400 ") and conn.transport is None
