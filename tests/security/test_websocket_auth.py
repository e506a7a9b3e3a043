"""WebSocket authorization without sockets: the `websocket { authorization {...}, no_auth_user }`
block replaces the server's single user, token and no_auth_user for WebSocket clients as
nats-server's authOverride does (users lists and NKey users still apply), the config errors of
nats-server's validateWebsocketOptions, and the cookies that stand in for CONNECT fields."""

from __future__ import annotations

import pytest
from wsproto.events import Request

from appliance.config.load import options_from_text
from appliance.errors import ConfigError
from appliance.server.auth import Authenticator, Denied, Granted, NeedsBcrypt
from appliance.server.tls_map import identity_from_cert
from appliance.server.websocket import cookie_value, serving_from_options
from appliance.testing.certs import TestCerts

WS = "websocket { port: 8080, no_tls: true\n %s\n}\n"


def authenticator(text: str) -> Authenticator:
    return Authenticator(options_from_text(text, filename="t.conf"))


def problems(text: str) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        options_from_text(text, filename="t.conf")
    return caught.value.problems


def granted(outcome: object) -> str | None:
    """The user let in ('' for token or anonymous), None when denied."""
    if isinstance(outcome, Granted):
        return outcome.user.username if outcome.user is not None else ""
    assert isinstance(outcome, Denied | NeedsBcrypt)
    return None


def test_websocket_user_replaces_the_servers_single_user_for_websocket_clients_only() -> None:
    auth = authenticator('authorization { user: srv, password: s }\n'
                         + WS % "authorization { user: wsu, password: w }")
    assert granted(auth.authenticate({"user": "wsu", "pass": "w"}, websocket=True)) == "wsu"
    assert granted(auth.authenticate({"user": "srv", "pass": "s"}, websocket=True)) is None
    assert granted(auth.authenticate({"user": "wsu", "pass": "bad"}, websocket=True)) is None
    assert granted(auth.authenticate({"user": "srv", "pass": "s"})) == "srv"
    assert granted(auth.authenticate({"user": "wsu", "pass": "w"})) is None


def test_websocket_token_alone_requires_auth_of_websocket_clients_only() -> None:
    auth = authenticator(WS % "authorization { token: sesame, timeout: 3 }")
    assert not auth.required and auth.websocket.required and auth.websocket.timeout_s == 3.0
    assert granted(auth.authenticate({}, websocket=False)) == ""
    assert granted(auth.authenticate({"auth_token": "sesame"}, websocket=True)) == ""
    assert granted(auth.authenticate({"auth_token": "nope"}, websocket=True)) is None
    assert granted(auth.authenticate({}, websocket=True)) is None


def test_without_override_websocket_clients_use_the_servers_auth_and_timeout() -> None:
    auth = authenticator('authorization { token: t, timeout: 4 }\n' + WS % "")
    assert auth.websocket.required and auth.websocket.timeout_s == 4.0
    assert granted(auth.authenticate({"auth_token": "t"}, websocket=True)) == ""
    assert granted(auth.authenticate({"auth_token": "x"}, websocket=True)) is None


def test_websocket_no_auth_user_with_the_servers_users() -> None:
    auth = authenticator('authorization { users = [ {user: a, password: pa}, {user: b, password: pb} ] }\n'
                         'no_auth_user: a\n' + WS % "no_auth_user: b")
    assert granted(auth.authenticate({}, websocket=True)) == "b"
    assert granted(auth.authenticate({})) == "a"
    assert granted(auth.authenticate({"user": "a", "pass": "pa"}, websocket=True)) == "a"  # users still apply
    assert granted(auth.authenticate({"user": "a", "pass": "bad"}, websocket=True)) is None


def test_websocket_override_drops_the_servers_no_auth_user() -> None:
    """A block with only a token: nats-server takes its (empty) no_auth_user, not the server's."""
    auth = authenticator('authorization { token: t }\n' + WS % "authorization { token: w }")
    assert granted(auth.authenticate({"auth_token": "t"}, websocket=True)) is None
    assert granted(auth.authenticate({"auth_token": "w"}, websocket=True)) == ""


@pytest.mark.parametrize(("text", "error"), [
    ('authorization { users = [ {user: a, password: p} ] }\n' + WS % "authorization { user: b, password: c }",
     "websocket authentication username not compatible with presence of users/nkeys"),
    ('accounts { A { users = [ {user: a, password: p} ] } }\n' + WS % "authorization { token: t }",
     "websocket authentication token not compatible with presence of users/nkeys"),
    (WS % "authorization { user: b, users: [] }", 'unknown field "users"'),
    (WS % "no_auth_user: zed", 'no_auth_user: "zed" present, but users/nkeys are not defined'),
])
def test_config_errors_of_nats_server(text: str, error: str) -> None:
    found = problems(text)
    assert any(problem.endswith(error) for problem in found), found


def test_cookies_stand_in_for_connect_fields() -> None:
    options = options_from_text(WS % "user_cookie: u, pass_cookie: p, token_cookie: t, authorization { token: x }",
                                filename="t.conf")
    serving = serving_from_options(options)
    assert serving is not None
    assert serving.cookies == (("user", "u"), ("pass", "p"), ("auth_token", "t"))
    request = Request(host="h", target="/", extra_headers=[(b"Cookie", b"u=alice; t=tok")])
    assert [cookie_value(request, name) for _, name in serving.cookies] == ["alice", "", "tok"]


def test_verify_and_map_is_each_ports_own(certs: TestCerts) -> None:
    """The WebSocket block's `tls { verify_and_map }` maps WebSocket clients; the client port's
    does not apply to them (nats-server: `tlsMap = wo.TLSMap` for WebSocket clients)."""
    tls = (f'tls {{ cert_file: "{certs.server.cert}", key_file: "{certs.server.key}", ca_file: "{certs.ca_file}", '
           'verify_and_map: true }')
    users = 'authorization { users = [ {user: "alice@example.com"}, {user: bob, password: pb} ] }\n'
    identity = identity_from_cert({"subject": ((("commonName", "alice"),),),
                                   "subjectAltName": (("email", "alice@example.com"),)})
    on_ws = authenticator(users + f"websocket {{ port: 8080\n {tls}\n}}\n")
    assert granted(on_ws.authenticate({}, identity, websocket=True)) == "alice@example.com"
    assert granted(on_ws.authenticate({"user": "bob", "pass": "pb"}, None, websocket=True)) is None
    assert granted(on_ws.authenticate({"user": "bob", "pass": "pb"}, identity)) == "bob"  # client port: no map
    on_client_port = authenticator(users + tls + "\nwebsocket { port: 8080, no_tls: true }\n")
    assert granted(on_client_port.authenticate({}, identity)) == "alice@example.com"
    assert granted(on_client_port.authenticate({"user": "bob", "pass": "pb"}, None, websocket=True)) == "bob"
