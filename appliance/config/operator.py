"""Operator mode in a NATS config: `operator` (a JWT or a file holding one), `resolver` and
`resolver_preload`, as nats-server reads them (opts.go) and checks them at start
(validateTrustedOperators in jwt.go).

The preloaded account JWTs (and, with the FULL resolver, those in its directory) become the
server's accounts, named by their public keys, with the JetStream limits of their claims, so the
rest of the server treats them as configured accounts. The resolver itself is read by resolver.py.
"""

from __future__ import annotations

import nkeys

from appliance import NATS_VERSION
from appliance.config.convert import BadValue, type_name
from appliance.config.jwt import JetStreamLimits, JWTError, account_claims, operator_claims, parse_decorated
from appliance.config.jwt_store import JWTDirectory, newer
from appliance.config.nkey import decode_public_key
from appliance.config.options import Account, AccountJetStreamLimits, ServerOptions
from appliance.config.parser import ConfigMap, Entry, Position
from appliance.config.sections import LoadState

# what an operator's assert_server_version is compared with: the nats-server version we speak as
SERVER_VERSION = tuple(int(part) for part in NATS_VERSION.split("."))


def _read_operator(text: str) -> str:
    """nats-server's readOperatorJWT: a file's contents, or the text itself when it is a JWT."""
    try:
        with open(text, encoding="utf-8", errors="replace") as handle:
            contents = handle.read()
    except OSError as error:
        if not text.startswith("eyJ"):
            raise JWTError(f"open {text}: {error.strerror.lower() if error.strerror else error}") from None
        contents = text
    return parse_decorated(contents).strip()


def load_operator(entry: Entry, state: LoadState) -> None:
    data = entry.value.data
    if isinstance(data, str):
        names = [data]
    elif isinstance(data, list):
        names = []
        for item in data:
            if not isinstance(item.data, str):
                raise BadValue(entry.key_position,
                               f"error parsing operators: unsupported type {type_name(item.data)} where string is expected")
            names.append(item.data)
    else:
        raise BadValue(entry.key_position, f"error parsing operators: unsupported type {type_name(data)}")
    trust = state.options.trust
    trust.operator_jwts = []
    for name in names:
        try:
            token = _read_operator(name)
            claims = operator_claims(token)
        except JWTError as error:  # nats-server's position for it: the line, column 0
            where = Position(entry.key_position.file, entry.key_position.line, 0)
            state.problems.error(where, f"error parsing operator JWT: {error}")
            continue
        trust.operator_jwts.append(token)
        if len(names) == 1 and state.options.system_account == "$SYS" and claims.system_account:
            state.options.system_account = claims.system_account


def load_preload(entry: Entry, state: LoadState) -> None:
    if not isinstance(entry.value.data, ConfigMap):
        raise BadValue(entry.key_position, "preload should be a map of account_public_key:account_jwt")
    preload = state.options.trust.preload
    preload.clear()
    for item in entry.value.data.values():
        if not isinstance(item.value.data, str):
            state.problems.error(item.value.position, "preload map value should be a string JWT")
            continue
        try:
            account_claims(item.value.data)
        except JWTError:
            state.problems.error(item.key_position, "invalid account JWT")  # at the key, as nats-server
            continue
        preload[item.key] = item.value.data


def load_pinned(entry: Entry, state: LoadState) -> None:
    data = entry.value.data
    if isinstance(data, str):
        state.options.trust.pinned = [data]
        return
    if not isinstance(data, list):
        raise BadValue(entry.key_position, f"error parsing resolver_pinned_accounts: unsupported type {type_name(data)}")
    pinned: list[str] = []
    for item in data:
        if isinstance(item.data, str):
            pinned.append(item.data)
        else:
            state.problems.error(item.position, "error parsing resolver_pinned_accounts: unsupported type in array "
                                 f"{type_name(item.data)}")
    state.options.trust.pinned = pinned


def _version_problem(subject: str, wanted: str) -> str:
    if not wanted:
        return ""
    parts = wanted.lstrip("v").split(".")
    try:
        numbers = tuple(int(p) for p in parts)
        if len(numbers) != 3:
            raise ValueError
    except ValueError:
        return f"operator {subject} expects version {wanted} got error instead: invalid version string"
    for index, kind in enumerate(("major", "minor", "update")):
        if numbers[index] > SERVER_VERSION[index]:
            return (f"operator {subject} expected {kind} version {numbers[index]} > server {kind} version "
                    f"{SERVER_VERSION[index]}")
        if numbers[index] < SERVER_VERSION[index]:
            return ""
    return ""


def trust_problems(options: ServerOptions, *, accounts_configured: bool) -> list[str]:
    """validateTrustedOperators: empty when operator mode (if any) is consistent. Fills
    trust.trusted_keys."""
    trust = options.trust
    if not trust.enabled:
        return []  # nats-server ignores a resolver without operators
    if not trust.resolver:
        return ["operators require an account resolver to be configured"]
    if accounts_configured:
        return ["operators do not allow Accounts to be configured directly"]
    if options.authorization.users:
        return ["operators do not allow users to be configured directly"]
    if trust.resolver == "FULL" and options.system_account == "$SYS":
        return ["using nats based account resolver - the system account needs to be specified in configuration "
                "or the operator jwt"]
    operators = [operator_claims(token) for token in trust.operator_jwts]
    if options.system_account != "$SYS":
        named = [op.system_account for op in operators if op.system_account]
        if named and options.system_account not in named:
            return ["system_account in config and operator JWT must be identical"]
    for operator in operators:
        problem = _version_problem(operator.subject, operator.assert_server_version)
        if problem:
            return [problem]
    keys: list[str] = []
    for operator in operators:
        if not operator.strict_signing_key_usage:
            keys.append(operator.subject)
        keys.extend(operator.signing_keys)
    for key in keys:
        if decode_public_key(key, nkeys.PREFIX_BYTE_OPERATOR) is None:
            return [f'trusted Keys "{key}" are required to be a valid public operator nkey']
    if trust.pinned:
        for key in trust.pinned:
            if decode_public_key(key, nkeys.PREFIX_BYTE_ACCOUNT) is None:
                return [f'pinned account key "{key}" is not a valid public account nkey']
        if options.system_account != "$SYS" and options.system_account not in trust.pinned:
            trust.pinned.append(options.system_account)
    trust.trusted_keys = keys
    return []


def account_option(key: str, token: str, trusted_keys: list[str] | frozenset[str]) -> Account | None:
    """The account an account JWT makes (named by its key, JetStream per its limits, as nats-server's
    UpdateAccountClaims); None when no trusted key signed it or it is not the JWT of `key`."""
    try:
        claims = account_claims(token)
    except JWTError:
        return None
    if claims.issuer not in trusted_keys or claims.subject != key:
        return None  # nats-server fails its lookup: "account validation failed"
    tiers = claims.jetstream_tiers
    # jwt's IsJSEnabled: with tiered_limits, any tier with storage; then (UpdateAccountClaims) the
    # untiered limits win when they have storage, else the tiers are the account's limits
    enabled = any(tier.enabled for tier in tiers.values()) if tiers else claims.jetstream.enabled
    limits = AccountJetStreamLimits(enabled=False)
    if enabled and claims.jetstream.enabled:
        limits = _jetstream_limits(claims.jetstream)
    elif enabled:
        limits = AccountJetStreamLimits(enabled=True, tiers={name: _jetstream_limits(t) for name, t in tiers.items()})
    return Account(name=key, jetstream=limits, jwt=token, exports=list(claims.exports), imports=list(claims.imports))


def _jetstream_limits(js: JetStreamLimits) -> AccountJetStreamLimits:
    return AccountJetStreamLimits(
        enabled=True, max_memory=js.memory_storage, max_store=js.disk_storage,
        max_streams=js.streams, max_consumers=js.consumer,
        max_ack_pending=js.max_ack_pending if js.max_ack_pending > 0 else -1,
        memory_max_stream_bytes=js.memory_max_stream_bytes if js.memory_max_stream_bytes > 0 else -1,
        storage_max_stream_bytes=js.disk_max_stream_bytes if js.disk_max_stream_bytes > 0 else -1,
        max_bytes_required=js.max_bytes_required)


def preload_accounts(options: ServerOptions) -> None:
    """The accounts known at start: the preloaded JWTs and, with the FULL resolver, those kept in
    its directory (the newer of the two when both have one)."""
    trust = options.trust
    tokens = dict(trust.preload)
    if trust.resolver == "FULL":
        for key, token in JWTDirectory(trust.resolver_dir).all().items():
            tokens[key] = newer(tokens.get(key), token)
    for key, token in tokens.items():
        account = account_option(key, token, trust.trusted_keys)
        if account is not None:
            options.accounts[key] = account
    if trust.resolver == "FULL" and options.system_account not in options.accounts:
        # nats-server's "Using bootstrapping system account" until the system account's JWT is pushed
        options.accounts[options.system_account] = Account(name=options.system_account)
