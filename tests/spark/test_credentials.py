"""Credentials and TLS options of the Spark connector without a server: .creds and seed files read
on the driver, clear errors for wrong options, CONNECT fields that the server's own NKey check
accepts, and a client that wants TLS refusing a server that offers none."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from appliance.config.nkey import signature_valid
from appliance.spark.conn import Connection, NatsError
from appliance.spark.credentials import Auth, auth_from_options, read_creds, tls_from_options
from appliance.testing.jwts import Key, creds, user_jwt
from tests.spark.fake_socket import FakeSocket

NONCE = "e3bLCh3MjwZq5Jw"


def test_creds_file_gives_the_jwt_and_seed(tmp_path: Path) -> None:
    user, account = Key.new("U"), Key.new("A")
    token = user_jwt(user, account)
    path = tmp_path / "u.creds"
    path.write_text(creds(token, user))
    assert read_creds(path.read_text()) == (token, user.seed)
    auth = auth_from_options({"credsfile": str(path)})
    assert (auth.jwt, auth.nkey_seed) == (token, user.seed)
    fields = auth.connect_fields(NONCE)
    assert fields["jwt"] == token and "nkey" not in fields
    assert signature_valid(user.public, NONCE, fields["sig"])


def test_nkey_seed_signs_the_nonce(tmp_path: Path) -> None:
    user = Key.new("U")
    (tmp_path / "seed").write_text(user.seed + "\n")
    for options in ({"nkeyseed": user.seed}, {"nkeyseedfile": str(tmp_path / "seed")}):
        fields = auth_from_options(options).connect_fields(NONCE)
        assert fields["nkey"] == user.public
        assert signature_valid(user.public, NONCE, fields["sig"])
        assert not signature_valid(user.public, "another nonce", fields["sig"])


def test_user_password_and_token_fields() -> None:
    assert Auth("u", "p").connect_fields(NONCE) == {"user": "u", "pass": "p"}
    assert Auth(token="t").connect_fields("") == {"auth_token": "t"}
    assert "secretpw" not in repr(Auth("u", "secretpw")) and "secretpw" not in str(Auth("u", "secretpw"))


@pytest.mark.parametrize("options, message", [
    ({"credsfile": "/nonexistent/u.creds"}, "cannot read"),
    ({"nkeyseed": "SUXXXX"}, "not an NKey seed"),
    ({"nkeyseed": Key.new("A").seed}, "not a user NKey seed"),
    ({"jwt": "eyJ0eXAi.x.y"}, "needs nkeySeed"),
    ({"nkeyseed": Key.new("U").seed, "credsfile": "x"}, "one of"),
])
def test_wrong_credential_options_fail_clearly(options: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        auth_from_options(options)


def test_creds_file_without_its_parts(tmp_path: Path) -> None:
    path = tmp_path / "bad.creds"
    path.write_text("-----BEGIN NATS USER JWT-----\nabc\n------END NATS USER JWT------\n")
    with pytest.raises(ValueError, match="USER NKEY SEED"):
        auth_from_options({"credsfile": str(path)})


def test_tls_options(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    assert not tls_from_options({}).enabled
    assert tls_from_options({"tls": "true"}).enabled
    assert tls_from_options({"tlscafile": str(ca)}).ca_file == str(ca)
    assert tls_from_options({"tlshandshakefirst": "true"}).handshake_first
    with pytest.raises(ValueError, match="no such file"):
        tls_from_options({"tlscafile": str(tmp_path / "missing.pem")})
    with pytest.raises(ValueError, match="go together"):
        tls_from_options({"tlscertfile": str(ca)})
    with pytest.raises(ValueError, match="true or false"):
        tls_from_options({"tls": "yes"})


def greeting_server(info: dict[str, object]) -> FakeSocket:
    """A server that sends INFO with info and a PONG, then closes."""
    return FakeSocket([b"INFO " + json.dumps(info).encode() + b"\r\nPONG\r\n"])


def test_connect_sends_the_signed_nonce(monkeypatch: pytest.MonkeyPatch) -> None:
    user = Key.new("U")
    fake = greeting_server({"nonce": NONCE, "max_payload": 1024})
    monkeypatch.setattr(socket, "create_connection", lambda *a, **k: fake)
    Connection("nats://127.0.0.1:1", Auth(nkey_seed=user.seed))
    connect = json.loads(fake.sent.split(b"\r\n")[0][len(b"CONNECT "):])
    assert connect["nkey"] == user.public and signature_valid(user.public, NONCE, connect["sig"])


def test_tls_wanted_but_not_offered(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = greeting_server({"max_payload": 1024})
    monkeypatch.setattr(socket, "create_connection", lambda *a, **k: fake)
    with pytest.raises(NatsError, match="secure connection not available"):
        Connection("tls://127.0.0.1:1")
    assert fake.sent == b""  # no credentials went out in clear
