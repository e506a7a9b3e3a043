"""Authentication outcomes and permission decisions, without sockets."""

from __future__ import annotations

import bcrypt

from appliance.config.options import (
    Account,
    Permissions,
    ResponsePermission,
    ServerOptions,
    SubjectPermission,
    User,
)
from appliance.server.auth import (
    Authenticator,
    ClientPermissions,
    Denied,
    Granted,
    NeedsBcrypt,
    bcrypt_matches,
    is_bcrypt,
)


def test_no_auth_configured_grants_global_account() -> None:
    auth = Authenticator(ServerOptions())
    assert not auth.required
    assert auth.authenticate({}) == Granted(None, "$G")


def test_plain_users_and_accounts() -> None:
    options = ServerOptions()
    options.authorization.users = [User(username="a", password="pa")]
    options.accounts = {"APP": Account(name="APP", users=[User(username="b", password="pb")])}
    auth = Authenticator(options)
    assert auth.required
    granted = auth.authenticate({"user": "a", "pass": "pa"})
    assert isinstance(granted, Granted) and granted.account == "$G"
    granted = auth.authenticate({"user": "b", "pass": "pb"})
    assert isinstance(granted, Granted) and granted.account == "APP"
    assert isinstance(auth.authenticate({"user": "b", "pass": "nope"}), Denied)
    assert isinstance(auth.authenticate({"user": "zz", "pass": "pb"}), Denied)
    assert isinstance(auth.authenticate({}), Denied)


def test_token() -> None:
    options = ServerOptions()
    options.authorization.token = "s3cr3t"
    auth = Authenticator(options)
    assert auth.authenticate({"auth_token": "s3cr3t"}) == Granted(None, "$G")
    assert isinstance(auth.authenticate({"auth_token": "x"}), Denied)


def test_bcrypt_is_deferred_and_checks() -> None:
    hashed = bcrypt.hashpw(b"a very long s3cr3t! password", bcrypt.gensalt(rounds=4)).decode()
    assert is_bcrypt(hashed)
    options = ServerOptions()
    options.accounts = {"$SYS": Account(name="$SYS", users=[User(username="admin", password=hashed)])}
    outcome = Authenticator(options).authenticate({"user": "admin", "pass": "a very long s3cr3t! password"})
    assert isinstance(outcome, NeedsBcrypt)
    assert outcome.account == "$SYS"
    assert bcrypt_matches(outcome.given, outcome.hashed)
    assert not bcrypt_matches("wrong", outcome.hashed)


def test_no_auth_user() -> None:
    options = ServerOptions()
    options.authorization.users = [User(username="anon", password="x")]
    options.no_auth_user = "anon"
    granted = Authenticator(options).authenticate({})
    assert isinstance(granted, Granted) and granted.user is not None and granted.user.username == "anon"


def test_publish_and_subscribe_permissions() -> None:
    perms = ClientPermissions(Permissions(
        publish=SubjectPermission(allow=["foo.>"], deny=["foo.secret"]),
        subscribe=SubjectPermission(allow=["_INBOX.>", "bar.*"], deny=["bar.x"]),
    ))
    assert perms.can_publish(b"foo.a", 0)
    assert not perms.can_publish(b"foo.secret", 0)
    assert not perms.can_publish(b"baz", 0)
    assert perms.can_subscribe(b"bar.y")
    assert perms.can_subscribe(b"bar.*")
    assert not perms.can_subscribe(b"bar.x")
    assert not perms.can_subscribe(b"bar.>")
    assert perms.can_subscribe(b"_INBOX.abc.*")


def test_allow_responses_grants_one_reply() -> None:
    perms = ClientPermissions(Permissions(publish=SubjectPermission(allow=[]),
                                          allow_responses=ResponsePermission(max_msgs=1, expires_s=0)))
    assert not perms.can_publish(b"_INBOX.r1", 0)
    perms.note_reply(b"_INBOX.r1", 0)
    assert perms.can_publish(b"_INBOX.r1", 1)
    assert not perms.can_publish(b"_INBOX.r1", 2)
