"""Operator mode: a client's user JWT checked against the trusted operators and the accounts'
JWTs, as nats-server's processClientOrLeafAuthentication (auth.go, the `juc != nil` branch).

No sockets, the time is passed in; with the FULL resolver an account not seen yet is read from
its directory (nats-server's Fetch). The chain: the user JWT's signature verifies (jwt.py);
its account (`issuer_account`, else its issuer) is a known account whose JWT a trusted key
signed; the user's issuer is that account or one of its signing keys (a scoped key gives its
template's permissions and limits); neither is expired; bearer tokens only where the account
allows them; otherwise the nonce signature verifies with the user's key; not revoked; `src`
allows the client's address. The reasons are nats-server's debug lines; the client only ever
sees 'Authorization Violation'.
"""

from __future__ import annotations

import datetime
import ipaddress
import zoneinfo
from dataclasses import dataclass, replace

from appliance.config.jwt import (
    NO_LIMIT,
    AccountClaims,
    JWTError,
    Limits,
    UserClaims,
    account_claims,
    operator_claims,
    user_claims,
)
from appliance.config.jwt_store import JWTDirectory
from appliance.config.nkey import signature_valid
from appliance.server.jwt_template import TemplateError, apply_template
from appliance.config.options import Permissions, ServerOptions

REVOKED = "User authentication revoked"
_CONNECTION_TYPES = frozenset({"STANDARD", "WEBSOCKET", "LEAFNODE", "LEAFNODE_WS", "MQTT", "MQTT_WS", "IN_PROCESS"})


@dataclass(frozen=True, slots=True)
class JWTUser:
    """Who a valid user JWT makes the client, and the limits nats-server's applyAccountLimits sets."""

    public_key: str
    account: str
    permissions: Permissions | None
    max_payload: int  # -1: the server's max_payload
    max_subs: int  # -1: unlimited
    expires: float  # unix seconds the user (its JWT, or its connect-time window) expires at; 0: never
    max_account_connections: int  # the account's `conn`; -1: unlimited
    account_expires: int = 0  # unix seconds the account's JWT expires at; 0: never
    shown_jwt: str = ""  # the user JWT as /connz shows it ("" for a bearer token)
    issuer_key: str = ""  # the JWT's issuer: the account, or its signing key
    name_tag: str = ""  # the account JWT's name


def _min_limit(value: int, limit: int) -> int:
    """nats-server's minLimit: the smaller of two limits where -1 is none."""
    if value == NO_LIMIT:
        return limit
    if limit == NO_LIMIT:
        return value
    return min(value, limit)


def _src_allowed(cidrs: tuple[str, ...], host: str) -> bool:
    if not cidrs:
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    for cidr in cidrs:
        try:
            if address in ipaddress.ip_network(cidr, strict=False):
                return True
        except ValueError:
            return False
    return False


def _clock(text: str) -> datetime.time | None:
    try:
        return datetime.datetime.strptime(text, "%H:%M:%S").time()
    except ValueError:
        return None


def connect_window(times: tuple[tuple[str, str], ...], location: str, now_s: float) -> tuple[bool, float]:
    """nats-server's validateTimes: whether `now_s` is inside one of the windows, and for how many
    seconds still (the longest); (True, 0) without windows. A window may span midnight."""
    if not times:
        return True, 0.0
    try:
        zone = zoneinfo.ZoneInfo(location) if location else None
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return False, 0.0
    now = datetime.datetime.fromtimestamp(now_s, zone) if zone else datetime.datetime.fromtimestamp(now_s).astimezone()
    best: float | None = None
    for start_text, end_text in times:
        start_clock, end_clock = _clock(start_text), _clock(end_text)
        if start_clock is None or end_clock is None:
            return False, 0.0
        start, end = now.replace(hour=start_clock.hour, minute=start_clock.minute, second=start_clock.second,
                                 microsecond=0), \
            now.replace(hour=end_clock.hour, minute=end_clock.minute, second=end_clock.second, microsecond=0)
        inside = start < now < end
        if not inside and start > end:
            if end > now:
                inside = True
            else:
                end += datetime.timedelta(days=1)
                inside = start < now < end
        if inside:
            left = (end - now).total_seconds()
            best = left if best is None else max(best, left)
    return best is not None, best or 0.0


class JWTAuthenticator:
    def __init__(self, options: ServerOptions) -> None:
        self.trusted_keys = frozenset(options.trust.trusted_keys)
        # signing keys of operators with strict_signing_key_usage: accounts they sign cannot sign users
        # with their own key (nats-server's strictSigningKeyUsage)
        self.strict_keys = frozenset(key for token in options.trust.operator_jwts
                                     for claims in [operator_claims(token)] if claims.strict_signing_key_usage
                                     for key in claims.signing_keys)
        self.accounts: dict[str, AccountClaims] = {}
        for name, account in options.accounts.items():
            if account.jwt:
                self.accounts[name] = account_claims(account.jwt)
        self.refused = frozenset(options.trust.preload) - frozenset(self.accounts)  # untrusted signer
        # FULL resolver: an account missing here is read from its directory (nats-server's Fetch)
        self.directory = JWTDirectory(options.trust.resolver_dir) if options.trust.resolver == "FULL" else None
        # accounts whose JWT this worker took from the directory or an update: one whose file is gone
        # was deleted, maybe by a sibling worker whose change our directory watch has not seen yet
        self.stored: set[str] = set()
        if self.directory is not None:  # read from the directory at start (preloads may not be there yet)
            self.stored = set(self.accounts) - set(options.trust.preload)
        # FULL resolver without the system account's JWT yet: nats-server's bootstrapping system
        # account (its own key signs its users; no limits)
        self.bootstrap = ""
        system = options.system_account
        if self.directory is not None and system in options.accounts and not options.accounts[system].jwt:
            self.bootstrap = system
            self.accounts[system] = AccountClaims(subject=system, issuer="")
        self.pinned = frozenset(options.trust.pinned) if options.trust.pinned is not None else None
        self.pinned_fails = 0  # refused for an account not pinned (/varz pinned_account_fails)
        self.max_payload = options.max_payload or NO_LIMIT
        self.max_subs = options.max_subscriptions or NO_LIMIT

    def set_account(self, key: str, token: str) -> bool:
        """A new JWT for account `key` (FULL resolver); False when it is not one a trusted key signed."""
        try:
            claims = account_claims(token)
        except JWTError:
            return False
        if claims.subject != key or claims.issuer not in self.trusted_keys:
            return False
        self.accounts[key] = claims
        if self.directory is not None:
            self.stored.add(key)
        if key == self.bootstrap:
            self.bootstrap = ""
        return True

    def authenticate(self, connect: dict[str, object], nonce: str, host: str, now_s: float, *,
                     websocket: bool = False) -> JWTUser | str:
        """The user, or the reason (a nats-server debug line) it is not allowed."""
        token = connect.get("jwt")
        if not isinstance(token, str) or not token:
            return "Authentication requires a user JWT"
        try:
            user = user_claims(token)
        except JWTError as error:
            return f"User JWT not valid: {error}"
        problem = user.problem_at(now_s)
        if problem:
            return f"User JWT no longer valid: {problem}"
        if self.pinned is not None and user.account not in self.pinned:
            self.pinned_fails += 1
            return f"Account {user.account} not listed as operator pinned account"
        account = self.accounts.get(user.account)
        if account is not None and user.account in self.stored and self.directory is not None \
                and self.directory.load(user.account) is None:  # deleted ($SYS.REQ.CLAIMS.DELETE) meanwhile
            del self.accounts[user.account]
            self.stored.discard(user.account)
            account = None
        if account is None and self.directory is not None:
            stored = self.directory.load(user.account)
            if stored is not None and not self.set_account(user.account, stored):
                return "Account JWT lookup error: account validation failed"
            account = self.accounts.get(user.account)
        if account is None:
            if user.account in self.refused:
                return "Account JWT lookup error: account validation failed"
            return "Account JWT lookup error: account missing"
        if account.problem_at(now_s):
            return "Account JWT lookup error: account validation failed"
        if account.issuer not in self.trusted_keys and account.subject != self.bootstrap:
            return "Account JWT not signed by trusted operator"
        known, scope = account.issuer_scope(user.issuer, strict=account.issuer in self.strict_keys)
        if not known:
            return "User JWT issuer is not known"
        permissions, limits, bearer, types = (user.permissions, user.limits, user.bearer_token,
                                              user.allowed_connection_types)
        if scope is not None:
            if not user.empty_permissions:
                return "User JWT is not valid: scoped users require no permissions or limits set"
            permissions, limits, bearer, types = (scope.permissions, scope.limits, scope.bearer_token,
                                                  scope.allowed_connection_types)
            try:
                permissions = apply_template(permissions, user, account)
            except TemplateError:
                return "User JWT generated invalid permissions"
        if bearer and account.disallow_bearer:
            return "Account does not allow bearer tokens"
        known_types = [t.upper() for t in types if t.upper() in _CONNECTION_TYPES]
        if types and not known_types:
            return f"invalid connection types {list(types)}"
        if known_types and ("WEBSOCKET" if websocket else "STANDARD") not in known_types:
            return "Connection type not allowed"
        if not bearer:
            if not connect.get("sig"):
                return "Signature missing"
            if not signature_valid(user.subject, nonce, connect.get("sig")):
                return "Signature not verified"
        if account.revoked(user.subject, user.issued_at):
            return REVOKED
        if not _src_allowed(user.src, host):
            return f"Bad src Ip {host}"
        allowed, valid_for_s = connect_window(user.times, user.times_location, now_s)
        if not allowed:
            return "Outside connect times"
        granted = self._grant(user, account, permissions, limits, token, bearer)
        if valid_for_s > 0:
            until = now_s + valid_for_s
            granted = replace(granted, expires=min(granted.expires, until) if granted.expires else until)
        return granted

    def _grant(self, user: UserClaims, account: AccountClaims, permissions: Permissions | None,
               limits: Limits, token: str, bearer: bool) -> JWTUser:
        if permissions is None:
            permissions = account.default_permissions
        payload = _min_limit(_min_limit(limits.payload, account.limits.payload), self.max_payload)
        subs = _min_limit(_min_limit(limits.subs, account.limits.subs), self.max_subs)
        return JWTUser(public_key=user.subject, account=account.subject, permissions=permissions,
                       max_payload=payload, max_subs=subs, expires=user.expires,
                       max_account_connections=account.conn, account_expires=account.expires, shown_jwt="" if user.bearer_token else token,
                       issuer_key=user.issuer if user.issuer_account else account.subject,
                       name_tag=account.name)
