"""NKey users: config validation, nonce signing with nats-py (good and bad keys), accounts with
NKey users, and the INFO/-ERR of nats-server for the same config."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import socket
import time
from pathlib import Path

import nats
import nkeys
import pytest

from appliance.config.load import options_from_text
from appliance.config.nkey import is_valid_user_key, new_nonce, signature_valid
from appliance.errors import ConfigError
from appliance.testing.inproc import InProcessServer
from appliance.testing.natsserver import NatsServer
from appliance.testing.process import ApplianceProcess


def new_user() -> tuple[str, str]:
    """(seed, public key) of a fresh user key pair."""
    seed = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER).decode()
    return seed, nkeys.from_seed(bytearray(seed.encode())).public_key.decode()


ALICE_SEED, ALICE = new_user()
BOB_SEED, BOB = new_user()
MALLORY_SEED, MALLORY = new_user()  # a valid key nobody configured

CONFIG = f"""
authorization {{ users = [ {{ nkey: {ALICE}, permissions: {{ publish: "nk.>", subscribe: ["nk.>", "_INBOX.>"] }} }} ] }}
accounts {{ B: {{ users = [ {{ nkey: {BOB} }} ] }} }}
"""


def test_keys_and_signatures_pure() -> None:
    assert is_valid_user_key(ALICE)
    assert not is_valid_user_key(ALICE[:-1] + ("A" if ALICE[-1] != "A" else "B"))  # checksum
    account_key = nkeys.from_seed(bytearray(nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_ACCOUNT)))
    assert not is_valid_user_key(account_key.public_key.decode())  # an account key is no user key
    nonce = new_nonce()
    assert len(nonce) == 15
    signed = nkeys.from_seed(bytearray(ALICE_SEED.encode())).sign(nonce.encode())
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        assert signature_valid(ALICE, nonce, encode(signed).decode().rstrip("="))
    assert not signature_valid(ALICE, new_nonce(), base64.b64encode(signed).decode())
    assert not signature_valid(BOB, nonce, base64.b64encode(signed).decode())
    assert not signature_valid(ALICE, nonce, "not base64!")


def test_config_validation() -> None:
    options = options_from_text(CONFIG, filename="n.conf")
    assert options.authorization.users[0].nkey == ALICE
    assert options.accounts["B"].users[0].nkey == BOB
    for text, problem in (
        ("authorization { users = [ { nkey: UBAD } ] }", "Not a valid public nkey for a user"),
        (f"authorization {{ users = [ {{ nkey: {ALICE}, user: a }} ] }}", "Nkey users do not take usernames or passwords"),
        (f"authorization {{ users = [ {{ nkey: {ALICE} }}, {{ nkey: {ALICE} }} ] }}", f'Duplicate nkey "{ALICE}" detected'),
    ):
        with pytest.raises(ConfigError) as caught:
            options_from_text(text, filename="n.conf")
        assert any(problem in p for p in caught.value.problems), caught.value.problems


async def nkey_round_trip(url: str, seed: str, subject: str) -> bytes:
    nc = await nats.connect(url, nkeys_seed_str=seed, allow_reconnect=False, max_reconnect_attempts=0,
                            connect_timeout=3)
    try:
        sub = await nc.subscribe(subject)
        await nc.publish(subject, b"signed")
        return (await sub.next_msg(timeout=3)).data
    finally:
        await nc.close()


def test_nkey_users_connect_and_bad_keys_are_refused() -> None:
    with InProcessServer(options_from_text(CONFIG, filename="n.conf")) as server:
        assert asyncio.run(nkey_round_trip(server.url, ALICE_SEED, "nk.a")) == b"signed"
        assert asyncio.run(nkey_round_trip(server.url, BOB_SEED, "anything")) == b"signed"
        assert raw_exchange(server.port, MALLORY_SEED, MALLORY)[1] == b"-ERR 'Authorization Violation'\r\n"
        assert raw_exchange(server.port, BOB_SEED, ALICE)[1] == b"-ERR 'Authorization Violation'\r\n"
        assert server.server is not None
        closed = server.server.closed_clients
        deadline = time.monotonic() + 5
        while {ALICE, BOB} - {c.authorized_user for c in closed}:
            assert time.monotonic() < deadline, "the NKey connections never closed"
            time.sleep(0.01)
        users = {c.authorized_user: c.account for c in closed}
        assert users[ALICE] == "$G" and users[BOB] == "B"


def raw_exchange(port: int, sign_with: str | None, nkey: str) -> tuple[dict[str, object], bytes]:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        line = b""
        while not line.endswith(b"\r\n"):
            line += sock.recv(1)
        info = json.loads(line[5:])
        connect: dict[str, object] = {"verbose": False, "pedantic": False, "nkey": nkey}
        if sign_with is not None:
            signed = nkeys.from_seed(bytearray(sign_with.encode())).sign(str(info["nonce"]).encode())
            connect["sig"] = base64.urlsafe_b64encode(signed).decode().rstrip("=")
        sock.sendall(b"CONNECT " + json.dumps(connect).encode() + b"\r\nPING\r\n")
        answer = b""
        while not answer.endswith(b"\r\n"):
            chunk = sock.recv(4096)
            if not chunk:
                break
            answer += chunk
        return info, answer


@pytest.mark.integration
def test_same_answers_as_nats_server(tmp_path: Path) -> None:
    conf = tmp_path / "nkeys.conf"
    conf.write_text(CONFIG)
    with NatsServer(["-c", str(conf)]) as real, \
            ApplianceProcess(["-c", str(conf), "-a", "127.0.0.1", "-p", "-1"], log_dir=tmp_path) as ours:
        for sign_with, nkey, expected in (
            (ALICE_SEED, ALICE, b"PONG\r\n"),
            (BOB_SEED, ALICE, b"-ERR 'Authorization Violation'\r\n"),  # signed with the wrong key
            (None, ALICE, b"-ERR 'Authorization Violation'\r\n"),  # no signature
            (MALLORY_SEED, MALLORY, b"-ERR 'Authorization Violation'\r\n"),  # unknown key
        ):
            results = [raw_exchange(port, sign_with, nkey) for port in (real.port, ours.client_port)]
            for info, answer in results:
                assert info["auth_required"] is True
                assert isinstance(info["nonce"], str) and len(info["nonce"]) == 15
                assert answer == expected
