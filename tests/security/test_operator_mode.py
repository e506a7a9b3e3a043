"""Operator mode end to end: the same config (operator JWT, MEMORY resolver, preloaded account
JWTs) run by the real nats-server and by `appliance run`; the same CONNECTs with user JWTs get
the same answers (INFO nonce, PONG or -ERR), permissions and limits are enforced alike, and
nats-py connects with a creds file."""

from __future__ import annotations

import asyncio
import base64
import datetime
import json
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest

from appliance.config.load import options_from_text
from appliance.testing.inproc import InProcessServer
from appliance.testing.jwts import Key, account_jwt, account_limits, creds, operator_jwt, user_jwt
from appliance.errors import ConfigError
from appliance.testing.natsserver import NatsServer, nats_server_binary
from appliance.testing.rawjwt import connected, exchange, read_until
from appliance.testing.process import ApplianceProcess, free_port

OPERATOR, OTHER_OPERATOR = Key.new("O"), Key.new("O")
SYSTEM, ACCOUNT, LIMITED, UNTRUSTED, UNKNOWN, SIGNER = (Key.new("A") for _ in range(6))
USER, OTHER, REVOKED = Key.new("U"), Key.new("U"), Key.new("U")
NOW = int(time.time())


def conf_text() -> str:
    accounts = {
        SYSTEM.public: account_jwt(SYSTEM, OPERATOR, name="SYS"),
        ACCOUNT.public: account_jwt(ACCOUNT, OPERATOR, signing_keys=[SIGNER.public],
                                    revocations={REVOKED.public: NOW + 3600}),
        LIMITED.public: account_jwt(LIMITED, OPERATOR, limits=account_limits(subs=2, payload=8, conn=1,
                                                                              disallow_bearer=True)),
        UNTRUSTED.public: account_jwt(UNTRUSTED, OTHER_OPERATOR),
    }
    preload = "\n".join(f"  {key}: {token}" for key, token in accounts.items())
    return (f"operator: {operator_jwt(OPERATOR, system_account=SYSTEM.public)}\n"
            f"system_account: {SYSTEM.public}\nresolver: MEMORY\nresolver_preload: {{\n{preload}\n}}\n")


CONF = conf_text()


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, int]]:
    tmp = tmp_path_factory.mktemp("operator")
    conf = tmp / "op.conf"
    conf.write_text(CONF)
    with NatsServer(["-c", str(conf)], log_path=tmp / "nats-server.log") as real, \
            ApplianceProcess(["-c", str(conf), "-a", "127.0.0.1", "-p", "-1"], log_dir=tmp) as ours:
        yield real.port, ours.client_port


VIOLATION = b"-ERR 'Authorization Violation'\r\n"
CONNECTED = b"PONG\r\nINFO remote_account=" + ACCOUNT.public.encode() + b"\r\n"


def both(servers: tuple[int, int], token: str | None, key: Key | None, lines: bytes = b"", **kw: object) -> bytes:
    real, ours = (exchange(port, token, key, lines, **kw) for port in servers)  # type: ignore[arg-type]
    for result in (real, ours):
        assert result.info["auth_required"] is True
        assert isinstance(result.info["nonce"], str) and len(result.info["nonce"]) == 15
    assert ours.answer == real.answer, (token, ours.answer, real.answer)
    return ours.answer


@pytest.mark.integration
def test_connects_and_refusals_match_nats_server(servers: tuple[int, int]) -> None:
    cases = [
        (user_jwt(USER, ACCOUNT), USER, CONNECTED),  # signed by the account
        (user_jwt(USER, SIGNER, issuer_account=ACCOUNT.public), USER, CONNECTED),  # by its signing key
        (user_jwt(USER, ACCOUNT, bearer=True), None, CONNECTED),  # bearer: no nonce signature
        (user_jwt(USER, ACCOUNT), OTHER, VIOLATION),  # signed with the wrong key
        (user_jwt(USER, ACCOUNT), None, VIOLATION),  # no signature
        (user_jwt(USER, ACCOUNT, expires=NOW - 10), USER, VIOLATION),  # expired
        (user_jwt(REVOKED, ACCOUNT), REVOKED, VIOLATION),  # revoked in the account JWT
        (user_jwt(USER, UNKNOWN), USER, VIOLATION),  # account not preloaded
        (user_jwt(USER, UNTRUSTED), USER, VIOLATION),  # account signed by another operator
        (user_jwt(USER, Key.new("A"), issuer_account=ACCOUNT.public), USER, VIOLATION),  # unknown signing key
        (user_jwt(USER, LIMITED, bearer=True), None, VIOLATION),  # account disallows bearer tokens
        (None, None, VIOLATION),  # no JWT at all
        ("not.a.jwt", USER, VIOLATION),
    ]
    for token, key, expected in cases:
        assert both(servers, token, key) == expected


@pytest.mark.integration
def test_permissions_match_nats_server(servers: tuple[int, int]) -> None:
    token = user_jwt(USER, ACCOUNT, pub={"allow": ["ok.>"], "deny": ["ok.no"]}, sub={"allow": ["ok.>", "_INBOX.>"]})
    answer = both(servers, token, USER, b"SUB ok.a 1\r\nSUB no.a 2\r\nPUB ok.a 2\r\nhi\r\nPUB ok.no 0\r\n\r\n"
                  b"PUB no.a 0\r\n\r\nSUB ok.b q 3\r\nSUB nope q 4\r\n")
    assert b"-ERR 'Permissions Violation for Subscription to \"no.a\"'" in answer
    assert b"-ERR 'Permissions Violation for Publish to \"ok.no\"'" in answer
    assert b'-ERR \'Permissions Violation for Subscription to "nope" using queue "q"\'' in answer
    assert b"MSG ok.a 1 2\r\nhi\r\n" in answer


@pytest.mark.integration
def test_user_and_account_limits_match_nats_server(servers: tuple[int, int]) -> None:
    subs = both(servers, user_jwt(USER, LIMITED), USER, b"SUB a 1\r\nSUB b 2\r\nSUB c 3\r\n")
    assert subs.count(b"-ERR 'maximum subscriptions exceeded'\r\n") == 1
    user_subs = both(servers, user_jwt(USER, ACCOUNT, limits={"subs": 1, "data": -1, "payload": -1}), USER,
                     b"SUB a 1\r\nSUB b 2\r\n")
    assert user_subs.count(b"-ERR 'maximum subscriptions exceeded'\r\n") == 1
    payload = both(servers, user_jwt(USER, LIMITED), USER, b"PUB a 9\r\n123456789\r\n")
    assert payload.endswith(b"-ERR 'Maximum Payload Violation'\r\n")


def _window(seconds: int) -> dict[str, object]:
    """A connect-time window (UTC) from a minute ago to `seconds` from now."""
    now = datetime.datetime.now(datetime.timezone.utc)
    start, end = now - datetime.timedelta(seconds=60), now + datetime.timedelta(seconds=seconds)
    return {"subs": -1, "data": -1, "payload": -1, "times_location": "UTC",
            "times": [{"start": start.strftime("%H:%M:%S"), "end": end.strftime("%H:%M:%S")}]}


@pytest.mark.integration
def test_expiry_while_connected_matches_nats_server(servers: tuple[int, int]) -> None:
    """A user JWT's exp, and the end of its connect-time window, close the connection."""
    for make in (lambda: user_jwt(USER, ACCOUNT, expires=int(time.time()) + 2),
                 lambda: user_jwt(USER, ACCOUNT, limits=_window(2))):
        results = [exchange(port, make(), USER, until=b"Expired'\r\n", timeout_s=6)  # made just before use
                   for port in servers]
        for result in results:
            assert result.answer.startswith(b"PONG\r\n"), result.answer
            assert result.answer.endswith(b"-ERR 'User Authentication Expired'\r\n"), result.answer
    later = _window(0)
    later["times"] = [{"start": "00:00:00", "end": "00:00:01"}]  # a window that is not now (but at midnight)
    assert both(servers, user_jwt(USER, ACCOUNT, limits=later), USER) == VIOLATION


def test_account_connection_limit_matches_nats_server(tmp_path: Path) -> None:
    """One worker (in process): the account's `conn` limit counts this worker's clients."""
    conf = tmp_path / "op.conf"
    conf.write_text(CONF)
    token = user_jwt(USER, LIMITED)
    with NatsServer(["-c", str(conf)]) as real, \
            InProcessServer(options_from_text(CONF, filename=str(conf))) as ours:
        for port in (real.port, ours.port):
            with socket.create_connection(("127.0.0.1", port), timeout=5) as first:
                info = json.loads(first.recv(4096)[5:].split(b"\r\n")[0])
                sig = base64.urlsafe_b64encode(USER.sign(str(info["nonce"]).encode())).decode().rstrip("=")
                first.sendall(b"CONNECT " + json.dumps({"jwt": token, "sig": sig, "verbose": False}).encode()
                              + b"\r\nPING\r\n")
                assert first.recv(4096).endswith(b"PONG\r\n")
                second = exchange(port, token, USER)
                assert second.answer == b"-ERR 'maximum account active connections exceeded'\r\n", port
            third = exchange(port, token, USER)  # the first one left
            deadline = time.monotonic() + 5
            while not third.answer.startswith(b"PONG\r\n") and time.monotonic() < deadline:
                third = exchange(port, token, USER)
            assert third.answer.startswith(b"PONG\r\n"), third.answer


@pytest.mark.integration
def test_nats_py_connects_with_a_creds_file(servers: tuple[int, int], tmp_path: Path) -> None:
    """nats-py's user_credentials: the JWT from the creds file, the nonce signed with its seed."""
    good = tmp_path / "good.creds"
    good.write_text(creds(user_jwt(USER, ACCOUNT, pub={"allow": ["creds.>"]}), USER))

    async def round_trip(port: int) -> bytes:
        nc = await nats.connect(f"nats://127.0.0.1:{port}", user_credentials=str(good), allow_reconnect=False,
                                max_reconnect_attempts=0, connect_timeout=3)
        try:
            sub = await nc.subscribe("creds.>")
            await nc.publish("creds.a", b"via creds")
            return (await sub.next_msg(timeout=3)).data
        finally:
            await nc.close()

    for port in servers:
        assert asyncio.run(round_trip(port)) == b"via creds"


@pytest.mark.integration
def test_log_lines_match_nats_server(tmp_path: Path) -> None:
    """With -D both servers log why a user JWT was refused (nats-server's debug lines), then
    'authentication error'."""
    conf = tmp_path / "op.conf"
    conf.write_text(CONF)
    reasons = [
        (user_jwt(USER, ACCOUNT), OTHER, "Signature not verified"),
        (user_jwt(USER, ACCOUNT), None, "Signature missing"),
        (user_jwt(USER, ACCOUNT, expires=NOW - 10), USER, "User JWT no longer valid"),
        (user_jwt(REVOKED, ACCOUNT), REVOKED, "User authentication revoked"),
        (user_jwt(USER, UNKNOWN), USER, "Account JWT lookup error"),
        (user_jwt(USER, Key.new("A"), issuer_account=ACCOUNT.public), USER, "User JWT issuer is not known"),
        (user_jwt(USER, LIMITED, bearer=True), None, "Account does not allow bearer tokens"),
        (None, None, "Authentication requires a user JWT"),
    ]
    with NatsServer(["-c", str(conf), "-D"], log_path=tmp_path / "nats-server.log") as real, \
            ApplianceProcess(["-c", str(conf), "-a", "127.0.0.1", "-p", "-1", "-D"], log_dir=tmp_path) as ours:
        for token, key, _ in reasons:
            for port in (real.port, ours.client_port):
                assert exchange(port, token, key).answer == VIOLATION
        logs = {"nats-server": (tmp_path / "nats-server.log").read_text(), "appliance": ours.log()}
        deadline = time.monotonic() + 5
        while logs["appliance"].count("authentication error") < len(reasons) and time.monotonic() < deadline:
            time.sleep(0.05)
            logs["appliance"] = ours.log()
        for name, log in logs.items():
            for _, _, reason in reasons:
                assert f" - {reason}" in log, (name, reason)
            assert log.count("- authentication error\n") == len(reasons), name


@pytest.mark.integration
def test_reload_applies_new_account_jwts_as_nats_server(tmp_path: Path) -> None:
    """SIGHUP with a new preloaded account JWT that revokes one user: that user gets
    'User Authentication Revoked' and is closed, the other stays connected."""
    conf = tmp_path / "op.conf"
    conf.write_text(CONF)
    keep, revoke = user_jwt(USER, ACCOUNT), user_jwt(OTHER, ACCOUNT)
    with NatsServer(["-c", str(conf)], log_path=tmp_path / "nats-server.log") as real, \
            ApplianceProcess(["-c", str(conf), "-a", "127.0.0.1", "-p", "-1"], log_dir=tmp_path) as ours:
        ports = {"nats-server": real.port, "appliance": ours.client_port}
        sockets = {name: (connected(port, keep, USER), connected(port, revoke, OTHER)) for name, port in ports.items()}
        revoked_account = account_jwt(ACCOUNT, OPERATOR, signing_keys=[SIGNER.public],
                                      revocations={REVOKED.public: NOW + 3600, OTHER.public: NOW + 3600})
        added = account_jwt(UNKNOWN, OPERATOR, name="ADDED")  # a new preloaded account
        conf.write_text(CONF.replace(f"  {ACCOUNT.public}: ", f"  {UNKNOWN.public}: {added}\n"
                                     f"  {ACCOUNT.public}: {revoked_account}\n  #"))
        assert real.process is not None
        real.process.send_signal(signal.SIGHUP)
        ours.signal(signal.SIGHUP)
        for name, (kept, gone) in sockets.items():
            assert read_until(gone, b"Revoked'\r\n").endswith(b"-ERR 'User Authentication Revoked'\r\n"), name
            kept.sendall(b"PING\r\n")
            assert b"-ERR" not in read_until(kept, b"PONG\r\n").replace(b"PING\r\n", b""), name
            assert exchange(ports[name], revoke, OTHER).answer == VIOLATION, name
            assert exchange(ports[name], user_jwt(USER, UNKNOWN), USER).answer.startswith(b"PONG\r\n"), name
            kept.close()
            gone.close()


@pytest.mark.integration
def test_connz_auth_shows_the_jwt_user_as_nats_server(tmp_path: Path) -> None:
    """/connz?auth=true: authorized_user (the user key), account, jwt (hidden for bearer tokens),
    issuer_key (the signing key that issued it) and name_tag (the account JWT's name)."""
    conf = tmp_path / "op.conf"
    conf.write_text(CONF)
    signed = user_jwt(USER, SIGNER, issuer_account=ACCOUNT.public)
    bearer = user_jwt(OTHER, ACCOUNT, bearer=True)
    ports = (free_port(), free_port())
    shown = []
    with NatsServer(["-c", str(conf), "-m", str(ports[0])]) as real, \
            ApplianceProcess(["-c", str(conf), "-a", "127.0.0.1", "-p", "-1", "-m", str(ports[1])],
                             log_dir=tmp_path) as ours:
        for client_port, http_port in zip((real.port, ours.client_port), ports, strict=True):
            first, second = connected(client_port, signed, USER), connected(client_port, bearer, OTHER)
            with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/connz?auth=true", timeout=5) as answer:
                connz = json.loads(answer.read())
            shown.append(sorted(({k: c.get(k) for k in ("authorized_user", "account", "jwt", "issuer_key", "name_tag")}
                                 for c in connz["connections"]), key=lambda c: str(c["authorized_user"])))
            first.close()
            second.close()
    assert shown[0] == shown[1]
    assert {c["authorized_user"]: c["issuer_key"] for c in shown[0]} == {USER.public: SIGNER.public,
                                                                          OTHER.public: ACCOUNT.public}
    assert {c["authorized_user"]: c["jwt"] for c in shown[0]} == {USER.public: signed, OTHER.public: None}


@pytest.mark.integration
def test_account_expiry_while_connected_matches_nats_server(tmp_path: Path) -> None:
    expiring = Key.new("A")
    conf = tmp_path / "op.conf"
    conf.write_text(CONF.replace("resolver_preload: {\n", f"resolver_preload: {{\n  {expiring.public}: "
                                 f"{account_jwt(expiring, OPERATOR, expires=int(time.time()) + 8)}\n"))
    token = user_jwt(USER, expiring)
    with NatsServer(["-c", str(conf)]) as real, \
            ApplianceProcess(["-c", str(conf), "-a", "127.0.0.1", "-p", "-1"], log_dir=tmp_path) as ours:
        sockets = [connected(port, token, USER) for port in (real.port, ours.client_port)]
        for sock in sockets:
            answer = read_until(sock, b"Expired'\r\n", timeout_s=12)
            assert answer.endswith(b"-ERR 'Account Authentication Expired'\r\n"), answer
            sock.close()


@pytest.mark.integration
def test_varz_and_accountz_show_the_jwts_as_nats_server(tmp_path: Path) -> None:
    conf = tmp_path / "op.conf"
    conf.write_text(CONF)
    ports = (free_port(), free_port())
    shown = []
    with NatsServer(["-c", str(conf), "-m", str(ports[0])]) as real, \
            ApplianceProcess(["-c", str(conf), "-a", "127.0.0.1", "-p", "-1", "-m", str(ports[1])],
                             log_dir=tmp_path) as ours:
        for client_port, http_port in zip((real.port, ours.client_port), ports, strict=True):
            sock = connected(client_port, user_jwt(USER, ACCOUNT), USER)  # nats-server registers it now
            with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/varz", timeout=5) as answer:
                varz = json.loads(answer.read())
            with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/accountz?acc={ACCOUNT.public}",
                                        timeout=5) as answer:
                detail = json.loads(answer.read())["account_detail"]
            shown.append({
                "varz": {k: varz.get(k) for k in ("trusted_operators_jwt", "system_account", "auth_required")},
                "operator": {k: varz["trusted_operators_claim"][0].get(k) for k in ("sub", "iss", "name", "nats")},
                "accountz": {k: detail.get(k) for k in ("account_name", "jwt", "issuer_key", "name_tag", "revoked_user",
                                                        "client_connections")},
            })
            sock.close()
    assert shown[0] == shown[1]
    assert shown[0]["accountz"]["name_tag"] == "A" and shown[0]["accountz"]["issuer_key"] == OPERATOR.public


@pytest.mark.integration
def test_pinned_accounts_match_nats_server(tmp_path: Path) -> None:
    """resolver_pinned_accounts: users of other accounts are refused (the system account stays allowed)."""
    conf = tmp_path / "op.conf"
    conf.write_text(CONF + f"resolver_pinned_accounts: [{LIMITED.public}]\n")
    with NatsServer(["-c", str(conf)]) as real, \
            ApplianceProcess(["-c", str(conf), "-a", "127.0.0.1", "-p", "-1"], log_dir=tmp_path) as ours:
        for token, expected in ((user_jwt(USER, ACCOUNT), VIOLATION), (user_jwt(USER, LIMITED), b"PONG"),
                                (user_jwt(USER, SYSTEM), b"PONG")):
            for port in (real.port, ours.client_port):
                assert exchange(port, token, USER).answer.startswith(expected), port


@pytest.mark.integration
def test_scoped_signing_key_templates_match_nats_server(tmp_path: Path) -> None:
    scoped_key, templated = Key.new("A"), Key.new("A")
    template = {"pub": {"allow": ["{{name()}}.>", "team.{{tag(team)}}"]}, "sub": {"allow": ["{{name()}}.>"]},
                "subs": -1, "data": -1, "payload": -1}
    scope = {"kind": "user_scope", "key": scoped_key.public, "role": "r", "description": "", "template": template}
    conf = tmp_path / "op.conf"
    conf.write_text(CONF.replace("resolver_preload: {\n", f"resolver_preload: {{\n  {templated.public}: "
                                 f"{account_jwt(templated, OPERATOR, name='T', signing_keys=[scope])}\n"))
    token = user_jwt(USER, scoped_key, issuer_account=templated.public, scoped=True, name="bob", tags=["team:red"])
    lines = (b"SUB bob.in 1\r\nSUB alice.in 2\r\nPUB bob.in 2\r\nok\r\nPUB team.red 0\r\n\r\n"
             b"PUB team.blue 0\r\n\r\nPUB alice.in 0\r\n\r\n")
    with NatsServer(["-c", str(conf)]) as real, \
            ApplianceProcess(["-c", str(conf), "-a", "127.0.0.1", "-p", "-1"], log_dir=tmp_path) as ours:
        answer = both((real.port, ours.client_port), token, USER, lines)
    assert b"MSG bob.in 1 2\r\nok\r\n" in answer
    assert b"Permissions Violation for Subscription to \"alice.in\"" in answer
    assert b"Permissions Violation for Publish to \"team.blue\"" in answer
    assert b"Permissions Violation for Publish to \"alice.in\"" in answer
    assert b"team.red" not in answer


@pytest.mark.integration
def test_config_errors_match_nats_server_t(tmp_path: Path) -> None:
    """`nats-server -t` and appliance's loader name the same problem at the same file:line:col."""
    cases = [
        f"operator: {user_jwt(USER, ACCOUNT)}\nresolver: MEMORY\n",
        "operator: /nonexistent/op.jwt\nresolver: MEMORY\n",
        f"operator: {operator_jwt(OPERATOR)}\nresolver: BOGUS\n",
        f"operator: {operator_jwt(OPERATOR)}\nresolver: MEMORY\nresolver_preload: {{ {ACCOUNT.public}: nope }}\n",
        f"operator: {operator_jwt(OPERATOR)}\nresolver {{ type: full }}\n",
    ]
    for index, text in enumerate(cases):
        conf = tmp_path / f"c{index}.conf"
        conf.write_text(text)
        real = subprocess.run([nats_server_binary(), "-t", "-c", str(conf)], capture_output=True, text=True,
                              timeout=30)
        first = (real.stderr or real.stdout).strip().splitlines()[0].removeprefix("nats-server: ")
        with pytest.raises(ConfigError) as caught:
            options_from_text(text, filename=str(conf))
        assert caught.value.problems[0] == first, (caught.value.problems, first)


@pytest.mark.integration
def test_account_connection_limit_holds_across_workers(tmp_path: Path) -> None:
    """`appliance run` with two workers: the account's `conn` counts the connections of both."""
    conf = tmp_path / "op.conf"
    conf.write_text(CONF)
    token = user_jwt(USER, LIMITED)
    with ApplianceProcess(["-c", str(conf), "-a", "127.0.0.1", "-p", "-1"], log_dir=tmp_path) as ours:
        first = connected(ours.client_port, token, USER)
        for _ in range(8):  # new connections land on either worker
            assert exchange(ours.client_port, token, USER).answer == \
                b"-ERR 'maximum account active connections exceeded'\r\n"
        first.close()
        deadline = time.monotonic() + 5
        while not exchange(ours.client_port, token, USER).answer.startswith(b"PONG"):
            assert time.monotonic() < deadline, "the account's connection was never released"
