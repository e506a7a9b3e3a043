"""NATS JWTs without sockets: decoding and signature checks (config/jwt.py), the operator-mode
config keys with file:line errors (config/operator.py), and the user-JWT chain (server/jwt_auth.py)."""

from __future__ import annotations

import base64
import datetime
import json
import time
from pathlib import Path

import nkeys
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.config.jwt import JWTError, account_claims, decode, operator_claims, parse_decorated, user_claims
from appliance.config.load import options_from_text
from appliance.config.nkey import new_nonce
from appliance.errors import ConfigError
from appliance.server.jwt_auth import JWTAuthenticator, JWTUser
from appliance.testing.jwts import Key, account_jwt, account_limits, creds, operator_jwt, user_jwt

OPERATOR, OPERATOR_SIGNER, OTHER_OPERATOR = Key.new("O"), Key.new("O"), Key.new("O")
SYSTEM, ACCOUNT, ACCOUNT_SIGNER, SCOPED = Key.new("A"), Key.new("A"), Key.new("A"), Key.new("A")
USER = Key.new("U")


def config(preload: dict[str, str], *, extra: str = "") -> str:
    entries = "\n".join(f"  {key}: {token}" for key, token in preload.items())
    return (f"operator: {operator_jwt(OPERATOR, signing_keys=[OPERATOR_SIGNER.public], system_account=SYSTEM.public)}\n"
            f"resolver: MEMORY\nresolver_preload: {{\n{entries}\n}}\n{extra}")


def base_preload(**accounts: str) -> dict[str, str]:
    return {SYSTEM.public: account_jwt(SYSTEM, OPERATOR, name="SYS"), **accounts}


def sign(nonce: str, key: Key) -> str:
    return base64.urlsafe_b64encode(key.sign(nonce.encode())).decode().rstrip("=")


def test_decode_verifies_signature_and_kind() -> None:
    token = user_jwt(USER, ACCOUNT)
    claims = user_claims(token)
    assert (claims.subject, claims.issuer, claims.account) == (USER.public, ACCOUNT.public, ACCOUNT.public)
    head, body, sig = token.split(".")
    tampered = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    tampered["nats"]["pub"] = {"allow": [">"]}
    forged = f"{head}.{base64.urlsafe_b64encode(json.dumps(tampered).encode()).decode().rstrip('=')}.{sig}"
    with pytest.raises(JWTError, match="claim failed V2 signature verification"):
        decode(forged)
    with pytest.raises(JWTError, match="expected 3 chunks"):
        decode("a.b")
    with pytest.raises(JWTError, match="not account claim"):
        account_claims(token)
    with pytest.raises(JWTError, match="not operator claim"):
        operator_claims(token)


def test_account_claims_shapes() -> None:
    scope = {"kind": "user_scope", "key": SCOPED.public, "role": "r", "description": "",
             "template": {"pub": {"allow": ["s.>"]}, "sub": {}, "subs": 3, "data": -1, "payload": 64}}
    token = account_jwt(ACCOUNT, OPERATOR, limits=account_limits(conn=2, mem_storage=1024, disk_storage=-1, streams=2),
                        signing_keys=[ACCOUNT_SIGNER.public, scope], revocations={USER.public: 100, "*": 50})
    claims = account_claims(token)
    assert claims.conn == 2 and claims.jetstream.enabled and claims.jetstream.streams == 2
    assert claims.issuer_scope(ACCOUNT.public) == (True, None)
    assert claims.issuer_scope(ACCOUNT_SIGNER.public) == (True, None)
    known, template = claims.issuer_scope(SCOPED.public)
    assert known and template is not None and template.limits.subs == 3 and template.limits.payload == 64
    assert claims.issuer_scope(Key.new("A").public) == (False, None)
    assert claims.revoked(USER.public, 100) and not claims.revoked(USER.public, 101)
    assert claims.revoked(Key.new("U").public, 50) and not claims.revoked(Key.new("U").public, 51)
    assert not account_claims(account_jwt(ACCOUNT, OPERATOR)).jetstream.enabled


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_decode_never_raises_anything_but_jwt_error(text: str) -> None:
    try:
        decode(text)
    except JWTError:
        pass


@settings(max_examples=100, deadline=None)
@given(st.binary(min_size=1, max_size=64))
def test_any_changed_claims_byte_fails(change: bytes) -> None:
    token = user_jwt(USER, ACCOUNT)
    head, body, sig = token.split(".")
    raw = bytearray(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    for index, byte in enumerate(change):
        raw[index % len(raw)] ^= byte or 1
    forged = f"{head}.{base64.urlsafe_b64encode(bytes(raw)).decode().rstrip('=')}.{sig}"
    with pytest.raises(JWTError):
        decode(forged)


def test_parse_decorated_reads_creds_files() -> None:
    token = user_jwt(USER, ACCOUNT)
    assert parse_decorated(creds(token, USER)) == token
    assert parse_decorated(token) == token


def test_config_builds_accounts_from_preload() -> None:
    preload = base_preload(**{ACCOUNT.public: account_jwt(
        ACCOUNT, OPERATOR_SIGNER, limits=account_limits(mem_storage=-1, disk_storage=1 << 20, streams=3))})
    options = options_from_text(config(preload), filename="op.conf")
    assert options.system_account == SYSTEM.public  # from the operator JWT
    assert options.trust.trusted_keys == [OPERATOR.public, OPERATOR_SIGNER.public]
    account = options.accounts[ACCOUNT.public]
    assert account.jetstream.enabled and account.jetstream.max_store == 1 << 20 and account.jetstream.max_streams == 3
    assert not options.accounts[SYSTEM.public].jetstream.enabled


def test_operator_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "op.jwt"
    path.write_text(f"-----BEGIN NATS OPERATOR JWT-----\n{operator_jwt(OPERATOR)}\n------END NATS OPERATOR JWT------\n")
    options = options_from_text(f"operator: {path}\nresolver: MEM\n", filename="f.conf")
    assert options.trust.trusted_keys == [OPERATOR.public]


@pytest.mark.parametrize(("text", "problem"), [
    ("operator: /nonexistent/op.jwt\nresolver: MEMORY\n",
     "f.conf:1:0: error parsing operator JWT: open /nonexistent/op.jwt: no such file or directory"),
    (f"operator: {user_jwt(USER, ACCOUNT)}\nresolver: MEMORY\n", "f.conf:1:0: error parsing operator JWT: not operator claim"),
    (f"operator: {operator_jwt(OPERATOR)}\n", "f.conf:1:1: operators require an account resolver to be configured"),
    (f"operator: {operator_jwt(OPERATOR)}\nresolver: MEMORY\naccounts {{ A {{}} }}\n",
     "f.conf:1:1: operators do not allow Accounts to be configured directly"),
    (f"operator: {operator_jwt(OPERATOR)}\nresolver: MEMORY\nauthorization {{ users = [ {{user: a, password: b}} ] }}\n",
     "f.conf:1:1: operators do not allow users to be configured directly"),
    (f"operator: {operator_jwt(OPERATOR, system_account=SYSTEM.public)}\nresolver: MEMORY\nsystem_account: {ACCOUNT.public}\n",
     "f.conf:1:1: system_account in config and operator JWT must be identical"),
    (f"operator: {operator_jwt(OPERATOR)}\nresolver: BOGUS\n", "f.conf:2:1: error parsing account resolver, should be MEM or "),
    (f"operator: {operator_jwt(OPERATOR)}\nresolver: MEMORY\nresolver_preload: {{ {ACCOUNT.public}: nope }}\n",
     "f.conf:3:21: invalid account JWT"),
    (f"operator: {operator_jwt(OPERATOR)}\nresolver: MEMORY\nresolver_preload: x\n",
     "f.conf:3:1: preload should be a map of account_public_key:account_jwt"),
    (f"operator: {operator_jwt(OPERATOR)}\nresolver {{ type: cache, dir: /nonexistent/x }}\n",
     'f.conf:2:1: field "resolver" of type CACHE is known to nats-server but not supported by appliance'),
    (f"operator: {operator_jwt(OPERATOR)}\nresolver: MEMORY\nresolver_pinned_accounts: [{USER.public}]\n",
     f'f.conf:1:1: pinned account key "{USER.public}" is not a valid public account nkey'),
    (f"operator: {operator_jwt(OPERATOR)}\nresolver: MEMORY\nno_auth_user: bob\n",
     "f.conf:3:1: no_auth_user not compatible with Trusted Operator"),
    (f"operator: {operator_jwt(OPERATOR)}\nresolver {{ type: full }}\n",
     "f.conf:2:1: dir has no value and needs to point to a directory"),
    (f"operator: {operator_jwt(OPERATOR)}\nresolver {{ type: bogus, dir: /nonexistent/x }}\n",
     "f.conf:2:1: error parsing account resolver, should be MEM or "),
])
def test_config_problems_name_file_and_line(text: str, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        options_from_text(text, filename="f.conf")
    assert any(p.startswith(problem) for p in caught.value.problems), caught.value.problems


def authenticator(**accounts: str) -> JWTAuthenticator:
    return JWTAuthenticator(options_from_text(config(base_preload(**accounts)), filename="op.conf"))


def connect_as(auth: JWTAuthenticator, token: str, key: Key | None, *, now_s: float | None = None,
               host: str = "127.0.0.1") -> JWTUser | str:
    nonce = new_nonce()
    fields: dict[str, object] = {"jwt": token}
    if key is not None:
        fields["sig"] = sign(nonce, key)
    return auth.authenticate(fields, nonce, host, time.time() if now_s is None else now_s)


def test_user_chain_outcomes() -> None:
    untrusted, unknown, other = Key.new("A"), Key.new("A"), Key.new("U")
    now = time.time()
    auth = authenticator(**{
        ACCOUNT.public: account_jwt(ACCOUNT, OPERATOR, signing_keys=[ACCOUNT_SIGNER.public],
                                    revocations={other.public: int(now) + 10},
                                    limits=account_limits(subs=5, payload=1000, conn=7)),
        untrusted.public: account_jwt(untrusted, OTHER_OPERATOR),
    })
    good = connect_as(auth, user_jwt(USER, ACCOUNT, limits={"subs": 10, "data": -1, "payload": 100}), USER)
    assert isinstance(good, JWTUser)
    assert (good.account, good.max_subs, good.max_payload, good.max_account_connections) == (ACCOUNT.public, 5, 100, 7)
    signer = connect_as(auth, user_jwt(USER, ACCOUNT_SIGNER, issuer_account=ACCOUNT.public), USER)
    assert isinstance(signer, JWTUser) and signer.account == ACCOUNT.public
    cases = [
        (user_jwt(USER, ACCOUNT), other, "Signature not verified"),
        (user_jwt(USER, ACCOUNT), None, "Signature missing"),
        (user_jwt(USER, ACCOUNT, expires=int(now) - 5), USER, "User JWT no longer valid: claim is expired"),
        (user_jwt(other, ACCOUNT), other, "User authentication revoked"),
        (user_jwt(USER, unknown), USER, "Account JWT lookup error: account missing"),
        (user_jwt(USER, untrusted), USER, "Account JWT lookup error: account validation failed"),
        (user_jwt(USER, Key.new("A"), issuer_account=ACCOUNT.public), USER, "User JWT issuer is not known"),
        ("garbage", USER, "User JWT not valid: expected 3 chunks"),
    ]
    for token, key, reason in cases:
        assert connect_as(auth, token, key) == reason
    assert isinstance(connect_as(auth, user_jwt(USER, ACCOUNT, bearer=True), None), JWTUser)


def test_scoped_signing_key_grants_its_template() -> None:
    scope = {"kind": "user_scope", "key": SCOPED.public, "role": "r", "description": "",
             "template": {"pub": {"allow": ["s.>"]}, "sub": {"deny": ["x"]}, "subs": 2, "data": -1, "payload": 16}}
    auth = authenticator(**{ACCOUNT.public: account_jwt(ACCOUNT, OPERATOR, signing_keys=[scope])})
    granted = connect_as(auth, user_jwt(USER, SCOPED, issuer_account=ACCOUNT.public, scoped=True), USER)
    assert isinstance(granted, JWTUser) and granted.max_subs == 2 and granted.max_payload == 16
    assert granted.permissions is not None and granted.permissions.publish is not None
    assert granted.permissions.publish.allow == ["s.>"]
    refused = connect_as(auth, user_jwt(USER, SCOPED, issuer_account=ACCOUNT.public), USER)
    assert refused == "User JWT is not valid: scoped users require no permissions or limits set"


def test_bearer_disallowed_and_src() -> None:
    auth = authenticator(**{ACCOUNT.public: account_jwt(ACCOUNT, OPERATOR, limits=account_limits(disallow_bearer=True))})
    assert connect_as(auth, user_jwt(USER, ACCOUNT, bearer=True), None) == "Account does not allow bearer tokens"
    token = user_jwt(USER, ACCOUNT, limits={"subs": -1, "data": -1, "payload": -1, "src": ["10.0.0.0/8"]})
    assert connect_as(auth, token, USER) == "Bad src Ip 127.0.0.1"
    assert isinstance(connect_as(auth, token, USER, host="10.1.2.3"), JWTUser)


def test_account_default_permissions_apply_to_users_without_any() -> None:
    auth = authenticator(**{ACCOUNT.public: account_jwt(ACCOUNT, OPERATOR, default_permissions={"pub": {"deny": ["d.>"]}})})
    granted = connect_as(auth, user_jwt(USER, ACCOUNT), USER)
    assert isinstance(granted, JWTUser) and granted.permissions is not None
    assert granted.permissions.publish is not None and granted.permissions.publish.deny == ["d.>"]


def test_nkeys_prefix_sanity() -> None:
    assert USER.public.startswith("U") and nkeys.from_seed(bytearray(USER.seed.encode())).public_key.decode() == USER.public


def test_reload_takes_new_account_jwts_but_not_new_operators() -> None:
    from appliance.server.reload import diff_options

    before = options_from_text(config(base_preload(**{ACCOUNT.public: account_jwt(ACCOUNT, OPERATOR)})), filename="a.conf")
    revoked = account_jwt(ACCOUNT, OPERATOR, revocations={USER.public: int(time.time())})
    after = options_from_text(config(base_preload(**{ACCOUNT.public: revoked})), filename="a.conf")
    assert diff_options(before, after).error is None
    other = options_from_text(config(base_preload(**{ACCOUNT.public: revoked})), filename="a.conf")
    other.trust.operator_jwts = [operator_jwt(OTHER_OPERATOR)]
    assert diff_options(before, other).error == "config reload not supported for TrustedOperators"


def test_full_resolver_config(tmp_path: Path) -> None:
    directory = tmp_path / "jwts"
    text = f"operator: {operator_jwt(OPERATOR, system_account=SYSTEM.public)}\nresolver {{ type: full, dir: '{directory}' }}\n"
    stored = account_jwt(ACCOUNT, OPERATOR)
    options = options_from_text(text, filename="f.conf")
    assert directory.is_dir() and options.trust.resolver == "FULL"  # created, as nats-server does
    (directory / f"{ACCOUNT.public}.jwt").write_text(stored)
    assert options_from_text(text, filename="f.conf").accounts[ACCOUNT.public].jwt == stored  # known at start
    for extra, problem in (
        ("", "using nats based account resolver - the system account needs to be specified in configuration "
             "or the operator jwt"),
        (", ttl: '1m'", "FULL does not accept ttl"),
        (", hard_delete: true", "hard_delete has no effect without delete"),
    ):
        operator = operator_jwt(OPERATOR) if not extra else operator_jwt(OPERATOR, system_account=SYSTEM.public)
        with pytest.raises(ConfigError) as caught:
            options_from_text(f"operator: {operator}\nresolver {{ type: full, dir: '{directory}'{extra} }}\n",
                              filename="f.conf")
        assert any(problem in p for p in caught.value.problems), caught.value.problems


def test_connect_windows_as_nats_server_validate_times() -> None:
    from appliance.server.jwt_auth import connect_window

    noon = datetime.datetime(2026, 11, 27, 12, 0, 0, tzinfo=datetime.timezone.utc).timestamp()
    assert connect_window((), "", noon) == (True, 0.0)
    assert connect_window((("11:00:00", "13:00:00"),), "UTC", noon) == (True, 3600.0)
    assert connect_window((("13:00:00", "14:00:00"),), "UTC", noon) == (False, 0.0)
    assert connect_window((("11:00:00", "12:30:00"), ("10:00:00", "15:00:00")), "UTC", noon) == (True, 3 * 3600.0)
    assert connect_window((("22:00:00", "13:00:00"),), "UTC", noon) == (True, 3600.0)  # spans midnight
    assert connect_window((("22:00:00", "11:00:00"),), "UTC", noon) == (False, 0.0)
    assert connect_window((("11:00:00", "13:00:00"),), "Europe/Berlin", noon) == (False, 0.0)  # 13:00 there
    assert connect_window((("11:00:00", "13:00:00"),), "No/Such_Zone", noon) == (False, 0.0)


def test_reload_lets_jwt_accounts_come_and_turn_jetstream_on() -> None:
    from appliance.server.reload import diff_options

    before = options_from_text(config(base_preload()), filename="a.conf")
    with_js = account_jwt(ACCOUNT, OPERATOR, limits=account_limits(mem_storage=-1, disk_storage=-1))
    after = options_from_text(config(base_preload(**{ACCOUNT.public: with_js})), filename="a.conf")
    assert diff_options(before, after).error is None  # a new account JWT
    without_js = options_from_text(config(base_preload(**{ACCOUNT.public: account_jwt(ACCOUNT, OPERATOR)})),
                                   filename="a.conf")
    assert diff_options(without_js, after).error is None  # JetStream turned on
    assert diff_options(after, without_js).error is None  # and off again: live, as for configured accounts


def test_full_resolver_reads_an_account_it_has_not_seen_from_the_directory(tmp_path: Path) -> None:
    directory = tmp_path / "jwts"
    text = (f"operator: {operator_jwt(OPERATOR, system_account=SYSTEM.public)}\n"
            f"resolver {{ type: full, dir: '{directory}' }}\n")
    auth = JWTAuthenticator(options_from_text(text, filename="f.conf"))
    token = user_jwt(USER, ACCOUNT)
    assert connect_as(auth, token, USER) == "Account JWT lookup error: account missing"
    (directory / f"{ACCOUNT.public}.jwt").write_text(account_jwt(ACCOUNT, OPERATOR))  # pushed meanwhile
    granted = connect_as(auth, token, USER)
    assert isinstance(granted, JWTUser) and granted.account == ACCOUNT.public and granted.shown_jwt == token
    (directory / f"{SCOPED.public}.jwt").write_text(account_jwt(SCOPED, OTHER_OPERATOR))
    assert connect_as(auth, user_jwt(USER, SCOPED), USER) == "Account JWT lookup error: account validation failed"
    system_user = connect_as(auth, user_jwt(USER, SYSTEM), USER)  # the bootstrapping system account
    assert isinstance(system_user, JWTUser) and system_user.account == SYSTEM.public


def test_strict_signing_key_usage_refuses_users_of_the_account_key() -> None:
    strict = operator_jwt(OPERATOR, signing_keys=[OPERATOR_SIGNER.public], system_account=SYSTEM.public,
                          strict_signing_key_usage=True)
    preload = {SYSTEM.public: account_jwt(SYSTEM, OPERATOR_SIGNER, name="SYS"),
               ACCOUNT.public: account_jwt(ACCOUNT, OPERATOR_SIGNER, signing_keys=[ACCOUNT_SIGNER.public])}
    entries = "\n".join(f"  {key}: {token}" for key, token in preload.items())
    auth = JWTAuthenticator(options_from_text(f"operator: {strict}\nresolver: MEMORY\nresolver_preload: {{\n{entries}\n}}\n",
                                              filename="s.conf"))
    assert auth.trusted_keys == {OPERATOR_SIGNER.public}
    assert connect_as(auth, user_jwt(USER, ACCOUNT), USER) == "User JWT issuer is not known"
    assert isinstance(connect_as(auth, user_jwt(USER, ACCOUNT_SIGNER, issuer_account=ACCOUNT.public), USER), JWTUser)


def test_scoped_templates_expand_as_nats_server() -> None:
    template = {"pub": {"allow": ["{{name()}}.>", "t.{{tag(team)}}", "a.{{account-name()}}.{{account-tag(zone)}}"],
                        "deny": ["{{subject()}}"]},
                "sub": {"allow": ["{{tag(missing)}}.x"]}, "subs": -1, "data": -1, "payload": -1}
    scope = {"kind": "user_scope", "key": SCOPED.public, "role": "r", "description": "", "template": template}
    auth = authenticator(**{ACCOUNT.public: account_jwt(ACCOUNT, OPERATOR, name="ACC", signing_keys=[scope],
                                                        tags=["zone:eu", "zone:us"])})
    token = user_jwt(USER, SCOPED, issuer_account=ACCOUNT.public, scoped=True, name="bob", tags=["Team:Red", "team:blue"])
    granted = connect_as(auth, token, USER)
    assert isinstance(granted, JWTUser) and granted.permissions is not None
    publish, subscribe = granted.permissions.publish, granted.permissions.subscribe
    assert publish is not None and subscribe is not None
    assert publish.allow == ["bob.>", "t.red", "t.blue", "a.ACC.eu", "a.ACC.us"]
    assert publish.deny == [USER.public]
    assert subscribe.allow is None and subscribe.deny == [">"]  # the only allowed subject had no value
    bad = dict(template, pub={"deny": ["{{nope()}}"]})
    auth = authenticator(**{ACCOUNT.public: account_jwt(ACCOUNT, OPERATOR, signing_keys=[
        {"kind": "user_scope", "key": SCOPED.public, "role": "r", "description": "", "template": bad}])})
    assert connect_as(auth, token, USER) == "User JWT generated invalid permissions"


def test_operator_asserting_a_newer_server_is_refused() -> None:
    with pytest.raises(ConfigError) as caught:
        options_from_text(f"operator: {operator_jwt(OPERATOR, assert_server_version='2.16.0')}\nresolver: MEMORY\n",
                          filename="v.conf")
    assert caught.value.problems == [f"v.conf:1:1: operator {OPERATOR.public} expected minor version 16 > "
                                     "server minor version 15"]
    assert options_from_text(f"operator: {operator_jwt(OPERATOR, assert_server_version='2.15.0')}\n"
                             "resolver: MEMORY\n", filename="v.conf").trust.enabled


def test_account_gate_counts_an_account_over_workers(tmp_path: Path) -> None:
    from appliance.server.account_gate import AccountGate

    path = str(tmp_path / "accounts")
    first, second = AccountGate(path, 0, 2), AccountGate(path, 1, 2)
    assert first.admit(1, ACCOUNT.public, 2, 0) and second.admit(2, ACCOUNT.public, 2, 0)
    assert not first.admit(3, ACCOUNT.public, 2, 1) and not second.admit(4, ACCOUNT.public, 2, 1)
    assert first.admit(5, SYSTEM.public, 1, 0)  # another account, its own count
    second.release(2)
    assert first.admit(6, ACCOUNT.public, 2, 1)
    assert not second.admit(7, ACCOUNT.public, 2, 0)
    restarted = AccountGate(path, 0, 2)  # worker 0 again, after a crash: its connections are gone
    assert restarted.admit(8, ACCOUNT.public, 2, 0) and second.admit(9, ACCOUNT.public, 2, 0)
    for gate in (first, second, restarted):
        gate.close()


def test_an_account_deleted_from_the_full_resolver_directory_refuses_users_at_once(tmp_path: Path) -> None:
    """A sibling worker deleted the account (CLAIMS.DELETE): this worker's next authentication sees its
    file gone, before its directory watch runs (CI let a fresh user of a deleted account in)."""
    from appliance.config.jwt_store import JWTDirectory

    directory = JWTDirectory(str(tmp_path))
    directory.save(ACCOUNT.public, account_jwt(ACCOUNT, OPERATOR))
    text = config(base_preload()).replace("resolver: MEMORY",
                                          f"resolver {{ type: full, dir: '{tmp_path}', allow_delete: true }}")
    auth = JWTAuthenticator(options_from_text(text, filename="op.conf"))
    assert isinstance(connect_as(auth, user_jwt(USER, ACCOUNT), USER), JWTUser)
    directory.delete(ACCOUNT.public, hard=False)
    assert connect_as(auth, user_jwt(USER, ACCOUNT), USER) == "Account JWT lookup error: account missing"
