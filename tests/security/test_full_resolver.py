"""The FULL account resolver (`resolver { type: full, dir: ... }`) against the real nats-server:
account JWTs pushed over `$SYS.REQ.CLAIMS.UPDATE` by a system-account user become accounts while
running (with JetStream per their limits), `LOOKUP` and `LIST` answer from the directory, a
pushed revocation disconnects the user, and the accounts are still there after a restart."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import nats
import pytest

from appliance.testing.jwts import Key, account_jwt, account_limits, creds, encode, operator_jwt, user_jwt
from appliance.testing.natsserver import NatsServer
from appliance.testing.process import ApplianceProcess
from appliance.testing.rawjwt import connected, exchange, read_until


OPERATOR = Key.new("O")
SYSTEM, ACCOUNT, GONE = Key.new("A"), Key.new("A"), Key.new("A")
ADMIN, USER = Key.new("U"), Key.new("U")
VIOLATION = b"-ERR 'Authorization Violation'\r\n"
JS_LIMITS = account_limits(mem_storage=1 << 20, disk_storage=1 << 20, streams=1)


def conf_text(tmp: Path, name: str) -> str:
    return (f"operator: {operator_jwt(OPERATOR, system_account=SYSTEM.public)}\n"
            f"resolver {{ type: full, dir: '{tmp / (name + '-jwt')}', allow_delete: true }}\n"
            f"resolver_preload {{ {SYSTEM.public}: {account_jwt(SYSTEM, OPERATOR, name='SYS')} }}\n"
            f"jetstream {{ store_dir: '{tmp / (name + '-js')}' }}\n")


@contextmanager
def running(name: str, conf: Path, tmp: Path) -> Iterator[int]:
    with running_with_log(name, conf, tmp) as (port, _):
        yield port


@contextmanager
def running_with_log(name: str, conf: Path, tmp: Path) -> Iterator[tuple[int, Callable[[], str]]]:
    """The server's client port and a way to read its log (SIGHUP: `hup`)."""
    if name == "nats-server":
        log = tmp / "nats-server.log"
        with NatsServer(["-c", str(conf)], log_path=log) as real:
            assert real.process is not None
            RUNNING[name] = real.process.send_signal
            yield real.port, log.read_text
    else:
        with ApplianceProcess(["-c", str(conf), "-a", "127.0.0.1", "-p", "-1"], log_dir=tmp) as ours:
            RUNNING[name] = ours.signal
            yield ours.client_port, ours.log


RUNNING: dict[str, Callable[[int], None]] = {}


def without_server(reply: bytes) -> dict[str, object]:
    body: dict[str, object] = json.loads(reply)
    body.pop("server")
    return body


async def push_and_use(port: int, admin_creds: Path, user_creds: Path) -> list[object]:
    """What a system-account user and a user of the pushed account see."""
    seen: list[object] = []
    url = f"nats://127.0.0.1:{port}"
    admin = await nats.connect(url, user_credentials=str(admin_creds), allow_reconnect=False, connect_timeout=3)
    try:
        missing = await admin.request(f"$SYS.REQ.ACCOUNT.{ACCOUNT.public}.CLAIMS.LOOKUP", b"", timeout=3)
        seen.append(missing.data)
        bad = await admin.request("$SYS.REQ.CLAIMS.UPDATE", user_jwt(USER, ACCOUNT).encode(), timeout=3)
        seen.append(without_server(bad.data))
        token = account_jwt(ACCOUNT, OPERATOR, name="PUSHED", limits=JS_LIMITS)
        pushed = await admin.request("$SYS.REQ.CLAIMS.UPDATE", token.encode(), timeout=3)
        seen.append(without_server(pushed.data))
        other = account_jwt(GONE, OPERATOR)
        wrong = await admin.request(f"$SYS.REQ.ACCOUNT.{ACCOUNT.public}.CLAIMS.UPDATE", other.encode(), timeout=3)
        seen.append(without_server(wrong.data))
        looked = await admin.request(f"$SYS.REQ.ACCOUNT.{ACCOUNT.public}.CLAIMS.LOOKUP", b"", timeout=3)
        seen.append(looked.data == token.encode())
        listed = await admin.request("$SYS.REQ.CLAIMS.LIST", b"", timeout=3)
        seen.append(sorted(json.loads(listed.data)["data"]))
    finally:
        await admin.close()
    for _ in range(4):  # new connections, over every worker of appliance
        nc = await nats.connect(url, user_credentials=str(user_creds), allow_reconnect=False, connect_timeout=3)
        try:
            sub = await nc.subscribe("pushed.>")
            await nc.publish("pushed.a", b"in the pushed account")
            seen.append((await sub.next_msg(timeout=3)).data)
            info = await nc.request("$JS.API.INFO", b"", timeout=3)
            seen.append(json.loads(info.data)["limits"]["max_streams"])
        finally:
            await nc.close()
    nc = await nats.connect(url, user_credentials=str(user_creds), allow_reconnect=False, connect_timeout=3)
    try:  # JetStream of the pushed account: one stream allowed
        for stream in ("S1", "S2"):
            body = {"name": stream, "subjects": [f"{stream}.>"], "max_bytes": 1024}
            created = json.loads((await nc.request(f"$JS.API.STREAM.CREATE.{stream}", json.dumps(body).encode(),
                                                   timeout=5)).data)
            seen.append(created.get("error", {}).get("err_code", "created"))
    finally:
        await nc.close()
    return seen


@pytest.mark.integration
def test_pushed_account_jwts_as_nats_server(tmp_path: Path) -> None:
    admin_creds, user_creds = tmp_path / "admin.creds", tmp_path / "user.creds"
    admin_creds.write_text(creds(user_jwt(ADMIN, SYSTEM), ADMIN))
    user_creds.write_text(creds(user_jwt(USER, ACCOUNT), USER))
    results = {}
    for name in ("nats-server", "appliance"):
        conf = tmp_path / f"{name}.conf"
        conf.write_text(conf_text(tmp_path, name))
        with running(name, conf, tmp_path) as port:
            results[name] = asyncio.run(push_and_use(port, admin_creds, user_creds))
            # a revocation pushed while the user is connected
            victim = connected(port, user_jwt(USER, ACCOUNT), USER)
            revoking = account_jwt(ACCOUNT, OPERATOR, name="PUSHED", limits=JS_LIMITS,
                                   revocations={USER.public: int(time.time()) + 60})
            admin = connected(port, user_jwt(ADMIN, SYSTEM), ADMIN)
            admin.sendall(f"PUB $SYS.REQ.CLAIMS.UPDATE {len(revoking)}\r\n{revoking}\r\n".encode())
            results[name].append(read_until(victim, b"Revoked'\r\n").split(b"\r\n")[-2])
            victim.close()
            admin.close()
        with running(name, conf, tmp_path) as port:  # the directory keeps the pushed account
            results[name].append(exchange(port, user_jwt(Key.new("U"), ACCOUNT), None).answer == VIOLATION)
            fresh = Key.new("U")
            results[name].append(exchange(port, user_jwt(fresh, ACCOUNT), fresh).answer.startswith(b"PONG"))
    assert results["appliance"] == results["nats-server"]
    assert results["nats-server"][2] == {"data": {"account": ACCOUNT.public, "code": 200, "message": "jwt updated"}}
    assert results["nats-server"][-5:-3] == ["created", 10027]
    assert results["nats-server"][-3] == b"-ERR 'User Authentication Revoked'"
    assert results["nats-server"][-1] is True


@pytest.mark.integration
def test_sighup_after_a_push_keeps_the_pushed_account(tmp_path: Path) -> None:
    """A reload (SIGHUP) with accounts pushed since the start is no change of configured accounts."""
    for name in ("nats-server", "appliance"):
        conf = tmp_path / f"{name}.conf"
        conf.write_text(conf_text(tmp_path, name))
        with running_with_log(name, conf, tmp_path) as (port, log):
            admin = connected(port, user_jwt(ADMIN, SYSTEM), ADMIN)
            token = account_jwt(ACCOUNT, OPERATOR, name="PUSHED")
            admin.sendall(f"PUB $SYS.REQ.CLAIMS.UPDATE {len(token)}\r\n{token}\r\nPING\r\n".encode())
            read_until(admin, b"PONG\r\n")
            RUNNING[name](signal.SIGHUP)
            deadline = time.monotonic() + 10
            while "Reloaded: accounts" not in log() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert "Reloaded: accounts" in log(), name
            assert "not supported" not in log(), name
            fresh = Key.new("U")
            assert exchange(port, user_jwt(fresh, ACCOUNT), fresh).answer.startswith(b"PONG"), name
            admin.close()


@pytest.mark.integration
def test_strict_operator_as_nats_server(tmp_path: Path) -> None:
    """strict_signing_key_usage: account JWTs must come from the operator's signing keys, and users from
    the accounts' signing keys (not the account key itself)."""
    signer, system_signer = Key.new("O"), Key.new("A")
    operator = operator_jwt(OPERATOR, system_account=SYSTEM.public, signing_keys=[signer.public],
                            strict_signing_key_usage=True)
    system = account_jwt(SYSTEM, signer, name="SYS", signing_keys=[system_signer.public])
    answers = {}
    for name in ("nats-server", "appliance"):
        conf = tmp_path / f"{name}.conf"
        conf.write_text(f"operator: {operator}\nresolver {{ type: full, dir: '{tmp_path / (name + '-jwt')}' }}\n"
                        f"resolver_preload {{ {SYSTEM.public}: {system} }}\n")
        with running(name, conf, tmp_path) as port:
            seen: list[object] = [exchange(port, user_jwt(ADMIN, SYSTEM), ADMIN).answer]  # the account's own key
            admin = connected(port, user_jwt(ADMIN, system_signer, issuer_account=SYSTEM.public), ADMIN)
            admin.sendall(b"SUB _R 1\r\n")
            for issuer in (OPERATOR, signer):
                token = account_jwt(ACCOUNT, issuer, name="PUSHED")
                admin.sendall(f"PUB $SYS.REQ.CLAIMS.UPDATE _R {len(token)}\r\n{token}\r\n".encode())
                lines = read_until(admin, b"}\r\n").split(b"\r\n")
                seen.append(without_server(next(part for part in lines if part.startswith(b"{"))))
            answers[name] = seen
            admin.close()
    assert answers["appliance"] == answers["nats-server"]
    assert answers["nats-server"][0] == VIOLATION
    assert answers["nats-server"][1]["error"]["description"].endswith(  # type: ignore[index]
        "operator requires issuer to be a signing key")


@pytest.mark.integration
def test_delete_request_as_nats_server(tmp_path: Path) -> None:
    """`$SYS.REQ.CLAIMS.DELETE` (allow_delete): an operator-signed request deletes account JWTs; the
    deleted account's connected users are expired and new ones refused."""
    answers = {}
    for name in ("nats-server", "appliance"):
        conf = tmp_path / f"{name}.conf"
        conf.write_text(conf_text(tmp_path, name))
        with running(name, conf, tmp_path) as port:
            admin = connected(port, user_jwt(ADMIN, SYSTEM), ADMIN)
            admin.sendall(b"SUB _R 1\r\n")
            token = account_jwt(ACCOUNT, OPERATOR, name="PUSHED")
            admin.sendall(f"PUB $SYS.REQ.CLAIMS.UPDATE _R {len(token)}\r\n{token}\r\n".encode())
            read_until(admin, b"}\r\n")
            victim = connected(port, user_jwt(USER, ACCOUNT), USER)
            seen: list[object] = []
            for signer in (Key.new("O"), OPERATOR):  # an untrusted operator first
                request = encode({"sub": signer.public, "nats": {"accounts": [ACCOUNT.public]}}, signer,
                                 kind="generic")
                admin.sendall(f"PUB $SYS.REQ.CLAIMS.DELETE _R {len(request)}\r\n{request}\r\n".encode())
                lines = read_until(admin, b"}\r\n").split(b"\r\n")
                answer = without_server(next(part for part in lines if part.startswith(b"{")))
                if "error" in answer:  # names the (random) key that signed it
                    answer["error"]["description"] = answer["error"]["description"].replace(  # type: ignore[index]
                        signer.public, "<signer>")
                seen.append(answer)
            seen.append(read_until(victim, b"Expired'\r\n").split(b"\r\n")[-2])
            fresh = Key.new("U")
            seen.append(exchange(port, user_jwt(fresh, ACCOUNT), fresh).answer)
            answers[name] = seen
            admin.close()
            victim.close()
    assert answers["appliance"] == answers["nats-server"]
    assert answers["nats-server"][1] == {"data": {"code": 200, "message": "deleted 1 accounts"}}
