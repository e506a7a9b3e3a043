"""Authentication (users, passwords, bcrypt, tokens, no_auth_user) and per-user permissions.

Pure: no sockets, no event loop. A bcrypt comparison is expensive (~0.1-0.3 s at cost 11), so
`authenticate` never runs one itself: it returns `NeedsBcrypt` and the connection runs
`bcrypt_matches` off the event loop.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass

import bcrypt

from appliance.config.options import Permissions, ResponsePermission, ServerOptions, User
from appliance.config.nkey import signature_valid
from appliance.protocol.subjects import match_tokens, pattern_covers
from appliance.server.jwt_auth import JWTAuthenticator, JWTUser
from appliance.server.tls_map import PeerIdentity, map_user

_BCRYPT = re.compile(r"^\$2[abxy]\$\d{2}\$")
PERMISSION_CACHE_ENTRIES_MAX = 1024
RESPONSE_SUBJECTS_MAX = 4096


def is_bcrypt(password: str) -> bool:
    return bool(_BCRYPT.match(password))


@dataclass(frozen=True, slots=True)
class Granted:
    user: User | None  # None: token or anonymous
    account: str
    jwt: JWTUser | None = None  # operator mode: the user JWT's limits and expiry


@dataclass(frozen=True, slots=True)
class NeedsBcrypt:
    user: User
    account: str
    given: str
    hashed: str


@dataclass(frozen=True, slots=True)
class Denied:
    reason: str


Outcome = Granted | NeedsBcrypt | Denied


def bcrypt_matches(given: str, hashed: str) -> bool:
    try:
        return bcrypt.checkpw(given.encode(), hashed.encode())
    except ValueError:
        return False


def _secret_equal(given: str, expected: str) -> bool:
    return hmac.compare_digest(hashlib.sha256(given.encode()).digest(), hashlib.sha256(expected.encode()).digest())


@dataclass(frozen=True, slots=True)
class PortAuth:
    """What the clients of one port (the client port or the WebSocket port) authenticate against."""

    users: dict[str, User]  # by username: the `users` lists and the single `user`
    token: str
    no_auth_user: str
    tls_map: bool  # verify_and_map of this port's own `tls {}`
    required: bool
    timeout_s: float


class Authenticator:
    """Who may connect, and to which account each user is bound.

    As nats-server: when the `websocket {}` block's `authorization` sets a username or a token, or
    the block sets no_auth_user, those replace the server's single user, token and no_auth_user for
    WebSocket clients (the `users` lists and NKey users still apply); `verify_and_map` is each
    port's own.
    """

    def __init__(self, options: ServerOptions) -> None:
        auth = options.authorization
        self.nkeys: dict[str, User] = {}  # public key -> NKey user
        listed: dict[str, User] = {}
        default_permissions = auth.default_permissions
        for user in auth.users:
            self._add(user, "$G", default_permissions, listed)
        for account in options.accounts.values():
            for user in account.users:
                self._add(user, account.name, default_permissions, listed)
        self.jwt = JWTAuthenticator(options) if options.trust.enabled else None  # operator mode
        self.nonce_required = bool(self.nkeys or self.jwt)  # INFO carries a nonce for the client to sign
        self.standard = self._port(listed, auth.user, auth.password, auth.token, options.no_auth_user,
                                   options.tls is not None and options.tls.map, auth.timeout_s, default_permissions)
        ws = options.websocket
        ws_map = ws.tls is not None and ws.tls.map
        ws_timeout = ws.auth_timeout_s or auth.timeout_s
        if ws.auth_override:
            self.websocket = self._port(listed, ws.username, ws.password, ws.token, ws.no_auth_user, ws_map,
                                        ws_timeout, default_permissions)
        else:
            self.websocket = PortAuth(self.standard.users, self.standard.token, self.standard.no_auth_user,
                                      ws_map, self.standard.required, ws_timeout)
        self.required = self.standard.required  # the client port's (INFO, /varz)

    def _port(self, listed: dict[str, User], single: str, password: str, token: str, no_auth_user: str,
              tls_map: bool, timeout_s: float, default: Permissions | None) -> PortAuth:
        users = dict(listed)
        if single:  # as before the lists: a listed user of the same name wins
            users = {single: User(username=single, password=password, account="$G", permissions=default), **listed}
        required = bool(token or users or self.nkeys or self.jwt)
        return PortAuth(users, token, no_auth_user, tls_map, required, timeout_s)

    def port(self, websocket: bool) -> PortAuth:
        return self.websocket if websocket else self.standard

    def _add(self, user: User, account: str, default: Permissions | None, listed: dict[str, User]) -> None:
        into = self.nkeys if user.nkey else listed
        into[user.nkey or user.username] = User(
            username=user.username,
            password=user.password,
            account=account if user.account in ("", "$G") else user.account,
            permissions=user.permissions if user.permissions is not None else default,
            allowed_connection_types=user.allowed_connection_types,
            nkey=user.nkey,
        )

    def authenticate(self, connect: dict[str, object], identity: PeerIdentity | None = None,
                     nonce: str = "", *, websocket: bool = False, host: str = "", now_s: float = 0.0) -> Outcome:
        """`identity`: the client certificate, when TLS verified one (used with verify_and_map);
        `nonce`: what the INFO to this client carried (signed by NKey and JWT users); `host` and
        `now_s` (wall seconds): what a user JWT's `src` and expiry are checked against."""
        port = self.port(websocket)
        if not port.required:
            return Granted(None, "$G")
        if self.jwt is not None:  # operator mode: a user JWT is the only way in
            granted = self.jwt.authenticate(connect, nonce, host, now_s, websocket=websocket)
            if isinstance(granted, str):
                return Denied(granted)
            user = User(username=granted.public_key, account=granted.account, permissions=granted.permissions,
                        nkey=granted.public_key)
            return Granted(user, granted.account, granted)
        no_auth_user = port.no_auth_user
        if self.nkeys:
            nkey = connect.get("nkey")
            if not nkey and no_auth_user in self.nkeys and not connect.get("user") \
                    and not connect.get("auth_token"):
                user = self.nkeys[no_auth_user]
                return Granted(user, user.account)
            if nkey:
                user = self.nkeys.get(nkey) if isinstance(nkey, str) else None
                if user is None:
                    return Denied(f"unknown nkey {nkey!r}")
                if not connect.get("sig"):
                    return Denied("signature missing")
                if not signature_valid(user.nkey, nonce, connect.get("sig")):
                    return Denied("signature not verified")
                return Granted(user, user.account)
        if port.tls_map and port.users:
            return self._authenticate_by_certificate(connect, identity, port.users)
        token = connect.get("auth_token")
        username = connect.get("user")
        password = connect.get("pass")
        if port.token:
            if isinstance(token, str) and _secret_equal(token, port.token):
                return Granted(None, "$G")
            return Denied("bad token")
        if not username and not token and no_auth_user:
            user = port.users.get(no_auth_user)
            if user is not None:
                return Granted(user, user.account)
        if not isinstance(username, str) or not isinstance(password, str):
            return Denied("no credentials")
        user = port.users.get(username)
        if user is None:
            return Denied(f"unknown user {username!r}")
        if is_bcrypt(user.password):
            return NeedsBcrypt(user, user.account, password, user.password)
        if _secret_equal(password, user.password):
            return Granted(user, user.account)
        return Denied(f"bad password for {username!r}")


    def _authenticate_by_certificate(self, connect: dict[str, object], identity: PeerIdentity | None,
                                     users: dict[str, User]) -> Outcome:
        """verify_and_map: the certificate names the user; a password configured for it must match."""
        if identity is None:
            return Denied("user required in cert, no peer certificates found")
        user = map_user(identity, users)
        if user is None:
            return Denied(f"user in cert [{identity.subject!r}], not found")
        given = connect.get("pass")
        given = given if isinstance(given, str) else ""
        if is_bcrypt(user.password):
            return NeedsBcrypt(user, user.account, given, user.password)
        if _secret_equal(given, user.password):
            return Granted(user, user.account)
        return Denied(f"bad password for {user.username!r}")


def _tokens(patterns: list[str]) -> list[list[bytes]]:
    return [p.encode().split(b".") for p in patterns]


def _any_match(patterns: list[list[bytes]], subject: bytes) -> bool:
    tokens = subject.split(b".")
    return any(match_tokens(p, tokens) for p in patterns)


class ClientPermissions:
    """Compiled publish/subscribe allow/deny lists of one user, with bounded decision caches."""

    def __init__(self, permissions: Permissions) -> None:
        pub, sub = permissions.publish, permissions.subscribe
        self.pub_allow = _tokens(pub.allow) if pub is not None and pub.allow is not None else None
        self.pub_deny = _tokens(pub.deny) if pub is not None else []
        self.sub_allow = _tokens(sub.allow) if sub is not None and sub.allow is not None else None
        self.sub_deny = _tokens(sub.deny) if sub is not None else []
        self.responses: ResponsePermission | None = permissions.allow_responses
        self._pub_cache: dict[bytes, bool] = {}
        # reply subjects this client may answer: subject -> [messages left, expiry (monotonic s) or 0]
        self._replies: dict[bytes, list[float]] = {}

    def can_publish(self, subject: bytes, now_s: float) -> bool:
        allowed = self._pub_cache.get(subject)
        if allowed is None:
            allowed = (self.pub_allow is None or _any_match(self.pub_allow, subject)) and not _any_match(
                self.pub_deny, subject)
            if len(self._pub_cache) >= PERMISSION_CACHE_ENTRIES_MAX:
                self._pub_cache.clear()
            self._pub_cache[subject] = allowed
        if allowed:
            return True
        return self._use_reply(subject, now_s)

    def _use_reply(self, subject: bytes, now_s: float) -> bool:
        grant = self._replies.get(subject)
        if grant is None:
            return False
        left, expires = grant
        if expires and now_s > expires:
            del self._replies[subject]
            return False
        if left <= 1:
            del self._replies[subject]
        else:
            grant[0] = left - 1
        return True

    def note_reply(self, reply: bytes, now_s: float) -> None:
        """A message with this reply subject was delivered to the client (allow_responses)."""
        if self.responses is None or len(self._replies) >= RESPONSE_SUBJECTS_MAX:
            return
        expires = now_s + self.responses.expires_s if self.responses.expires_s > 0 else 0.0
        self._replies[reply] = [float(self.responses.max_msgs or 1), expires]

    def can_subscribe(self, subject: bytes) -> bool:
        tokens = subject.split(b".")
        if self.sub_allow is not None and not any(pattern_covers(p, tokens) for p in self.sub_allow):
            return False
        return not any(pattern_covers(p, tokens) for p in self.sub_deny)

    def deliver_denied(self, subject: bytes) -> bool:
        """A wildcard subscription may still not receive subjects its deny list names."""
        return bool(self.sub_deny) and _any_match(self.sub_deny, subject)
