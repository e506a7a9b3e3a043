"""`authorization {}`, users, permissions and `accounts {}` of a NATS config, into typed options.

Shapes accepted, as nats-server (`parseAuthorization`, `parseUsers`, `parseUserPermissions`,
`parseAccounts` in server/opts.go):
* permissions: `publish`/`subscribe` (aliases pub/sub, import/export) are a subject, a list of
  subjects (= allow), or `{allow, deny}`; `allow_responses` is `true` or `{max, expires}`;
* users: `{user|username, pass|password, permissions|permission|authorization,
  allowed_connection_types|connection_types|clients}`;
* accounts: a map of name -> `{users, jetstream, imports, exports, mappings, default_permissions}`
  or an array of names. Users defined in an account are bound to it; imports/exports/mappings
  are kept raw for the server to route later.
"""

from __future__ import annotations

from appliance.config.convert import (
    BadValue,
    Problems,
    as_int,
    as_map,
    as_str,
    as_str_list,
    parse_go_duration,
    type_name,
)
from appliance.config.options import (
    Account,
    AccountJetStreamLimits,
    Authorization,
    Permissions,
    ResponsePermission,
    SubjectPermission,
    User,
)
from appliance.config.imports import parse_exports, parse_imports
from appliance.config.nkey import is_valid_user_key
from appliance.config.parser import ConfigMap, Entry, Value, to_plain

GLOBAL_ACCOUNT = "$G"
_UNSUPPORTED_USER_KEYS = frozenset({"proxy_required"})
_UNSUPPORTED_AUTH_KEYS = frozenset({"auth_callout", "auth_hook", "proxy_required"})
_UNSUPPORTED_ACCOUNT_KEYS = frozenset({"nkey", "limits", "msg_trace", "trace_dest"})
_CONNECTION_TYPES = frozenset({"STANDARD", "WEBSOCKET", "LEAFNODE", "LEAFNODE_WS", "MQTT", "MQTT_WS", "IN_PROCESS"})


def _valid_subject(subject: str) -> bool:
    """nats-server's IsValidSubject: non-empty tokens, no whitespace, nothing after a `>` token."""
    if subject == "":
        return False
    after_full_wildcard = False
    for token in subject.split("."):
        if token == "" or after_full_wildcard:
            return False
        if any(c in token for c in "\t\n\f\r "):
            return False
        after_full_wildcard = token == ">"
    return True


def _subjects(name: str, value: Value, *, allow_queue: bool) -> list[str]:
    if isinstance(value.data, str):
        subjects = [value.data]
    elif isinstance(value.data, list):
        subjects = []
        for item in value.data:
            if not isinstance(item.data, str):
                raise BadValue(item.position, "Subject in permissions array cannot be cast to string")
            subjects.append(item.data)
    else:
        raise BadValue(
            value.position,
            f"Expected subject permissions to be a subject, or array of subjects, got {type_name(value.data)}",
        )
    for subject in subjects:
        parts = subject.split()
        queue_form = allow_queue and len(parts) == 2 and all(_valid_subject(p) for p in parts)
        if not _valid_subject(subject) and not queue_form:
            raise BadValue(value.position, f'subject "{subject}" is not a valid subject')
    return subjects


def _subject_permission(name: str, value: Value, problems: Problems, *, allow_queue: bool) -> SubjectPermission | None:
    if not isinstance(value.data, ConfigMap):
        return SubjectPermission(allow=_subjects(name, value, allow_queue=allow_queue))
    if not value.data:
        return None
    permission = SubjectPermission()
    for entry in value.data.values():
        key = entry.key.lower()
        try:
            if key == "allow":
                permission.allow = _subjects(key, entry.value, allow_queue=allow_queue)
            elif key == "deny":
                permission.deny = _subjects(key, entry.value, allow_queue=allow_queue)
            elif not entry.value.used_as_variable:
                problems.error(
                    entry.key_position,
                    f"Unknown field name \"{entry.key}\" parsing subject permissions, only 'allow' or 'deny' are permitted",
                )
        except BadValue as error:
            problems.bad(error)
    return permission


def _response_permission(value: Value, problems: Problems) -> ResponsePermission | None:
    if isinstance(value.data, bool):
        return ResponsePermission() if value.data else None
    if not isinstance(value.data, ConfigMap):
        raise BadValue(value.position, "error parsing response permissions, expected a boolean or a map")
    response = ResponsePermission()
    for entry in value.data.values():
        key = entry.key.lower()
        if key in ("max", "max_msgs", "max_messages", "max_responses"):
            maximum = as_int(key, entry.value)
            response.max_msgs = maximum if maximum != 0 else response.max_msgs
        elif key in ("expires", "expiration", "ttl"):
            if not isinstance(entry.value.data, str):
                raise BadValue(entry.value.position, "error parsing expires, not a duration string")
            try:
                expires_s = parse_go_duration(entry.value.data)
            except ValueError as error:
                raise BadValue(entry.value.position, f"error parsing expires: {error}") from None
            response.expires_s = expires_s if expires_s != 0 else response.expires_s
        elif not entry.value.used_as_variable:
            problems.error(entry.key_position, f'Unknown field "{entry.key}" parsing permissions')
    return response


def parse_permissions(value: Value, problems: Problems) -> Permissions:
    if not isinstance(value.data, ConfigMap):
        raise BadValue(value.position, f"Expected permissions to be a map/struct, got {type_name(value.data)}")
    permissions = Permissions()
    for entry in value.data.values():
        key = entry.key.lower()
        try:
            if key in ("pub", "publish", "import"):
                permissions.publish = _subject_permission(key, entry.value, problems, allow_queue=False)
            elif key in ("sub", "subscribe", "export"):
                permissions.subscribe = _subject_permission(key, entry.value, problems, allow_queue=True)
            elif key in ("publish_allow_responses", "allow_responses"):
                permissions.allow_responses = _response_permission(entry.value, problems)
            elif not entry.value.used_as_variable:
                problems.error(entry.key_position, f'Unknown field "{entry.key}" parsing permissions')
        except BadValue as error:
            problems.bad(error)
    if permissions.allow_responses is not None:
        # nats-server: allowing responses turns off the blanket publish allow
        if permissions.publish is None:
            permissions.publish = SubjectPermission()
        if permissions.publish.allow is None:
            permissions.publish.allow = []
    return permissions


def _user(value: Value, problems: Problems, *, account: str) -> User | None:
    if not isinstance(value.data, ConfigMap):
        problems.error(value.position, f"Expected user entry to be a map/struct, got {type_name(value.data)}")
        return None
    user = User(account=account)
    for entry in value.data.values():
        key = entry.key.lower()
        try:
            if key in ("user", "username"):
                user.username = as_str(key, entry.value)
            elif key in ("pass", "password"):
                user.password = as_str(key, entry.value)
            elif key == "nkey":
                user.nkey = as_str(key, entry.value)
            elif key in ("permission", "permissions", "authorization"):
                user.permissions = parse_permissions(entry.value, problems)
            elif key in ("allowed_connection_types", "connection_types", "clients"):
                types = [t.upper() for t in as_str_list(key, entry.value)]
                unknown = [t for t in types if t not in _CONNECTION_TYPES]
                if unknown:
                    raise BadValue(entry.value.position, f'invalid connection types ["{unknown[0]}"]')
                user.allowed_connection_types = types
            elif key in _UNSUPPORTED_USER_KEYS:
                problems.unsupported(entry)
            else:
                problems.unknown(entry)
        except BadValue as error:
            problems.bad(error)
    if user.nkey:
        if not is_valid_user_key(user.nkey):
            problems.error(value.position, "Not a valid public nkey for a user")
            return None
        if user.username or user.password:
            problems.error(value.position, "Nkey users do not take usernames or passwords")
            return None
        return user
    if user.username == "":
        problems.error(value.position, "User entry requires a user")
        return None
    return user


def parse_users(value: Value, problems: Problems, *, account: str) -> list[User]:
    if not isinstance(value.data, list):
        raise BadValue(value.position, f"Expected users field to be an array, got {type_name(value.data)}")
    users = [_user(item, problems, account=account) for item in value.data]
    return [user for user in users if user is not None]


def _apply_default_permissions(users: list[User], defaults: Permissions | None) -> None:
    if defaults is None:
        return
    for user in users:
        if user.permissions is None:
            user.permissions = defaults


def _timeout_s(value: Value, problems: Problems, name: str) -> float:
    data = value.data
    if isinstance(data, bool):
        raise BadValue(value.position, "error parsing authorization config, 'timeout' wrong type")
    if isinstance(data, int | float):
        seconds = float(data)
    elif isinstance(data, str):
        try:
            seconds = parse_go_duration(data)
        except ValueError as error:
            raise BadValue(value.position, f"error parsing authorization config, 'timeout' {error}") from None
    else:
        raise BadValue(value.position, "error parsing authorization config, 'timeout' wrong type")
    if seconds > 60:
        problems.warn(
            value.position,
            name,
            f"timeout of {data} ({seconds:f} seconds) is high, consider keeping it under 60 seconds. "
            "possibly caused by unquoted duration; use '1m' instead of 1m, for example",
        )
    return seconds


def parse_authorization(entry: Entry, problems: Problems) -> tuple[Authorization, bool]:
    """The block and whether it had a `users` array (even empty: nats-server cares)."""
    block = as_map(entry.key, entry.value)
    auth = Authorization()
    has_users = False
    for item in block.values():
        key = item.key.lower()
        try:
            if key in ("user", "username"):
                auth.user = as_str(key, item.value)
            elif key in ("pass", "password"):
                auth.password = as_str(key, item.value)
            elif key == "token":
                auth.token = as_str(key, item.value)
            elif key == "timeout":
                auth.timeout_s = _timeout_s(item.value, problems, item.key)
                auth.timeout_given = True
            elif key == "users":
                has_users = True
                auth.users = parse_users(item.value, problems, account=GLOBAL_ACCOUNT)
            elif key in ("default_permission", "default_permissions", "permissions"):
                auth.default_permissions = parse_permissions(item.value, problems)
            elif key in _UNSUPPORTED_AUTH_KEYS:
                problems.unsupported(item)
            else:
                problems.unknown(item)
        except BadValue as error:
            problems.bad(error)
    _apply_default_permissions(auth.users, auth.default_permissions)
    return auth, has_users


def check_authorization(entry: Entry, auth: Authorization, has_users: bool, problems: Problems) -> None:
    where = entry.key_position
    if (auth.user or auth.password) and auth.token:
        problems.error(where, "Cannot have a user/pass and token")
    if has_users and auth.user:
        problems.error(where, "Can not have a single user/pass and a users array")
    if has_users and auth.token:
        problems.error(where, "Can not have a token and a users array")


# --- accounts ---------------------------------------------------------------------------------
def _account_jetstream(value: Value) -> AccountJetStreamLimits:
    data = value.data
    if isinstance(data, bool):
        return AccountJetStreamLimits(enabled=data)
    if isinstance(data, str):
        lowered = data.lower()
        if lowered in ("enabled", "enable"):
            return AccountJetStreamLimits(enabled=True)
        if lowered in ("disabled", "disable"):
            return AccountJetStreamLimits(enabled=False)
        raise BadValue(value.position, f"Expected 'enabled' or 'disabled' for string value, got '{data}'")
    if not isinstance(data, ConfigMap):
        raise BadValue(value.position, f"Expected map, bool or string to define JetStream, got {type_name(data)}")
    limits_ = AccountJetStreamLimits(enabled=True)
    for entry in data.values():
        key = entry.key.lower()
        if key in ("max_memory", "max_mem", "mem", "memory"):
            limits_.max_memory = _account_size(entry)
        elif key in ("max_store", "max_file", "max_disk", "store", "disk"):
            limits_.max_store = _account_size(entry)
        elif key in ("max_streams", "streams"):
            limits_.max_streams = _account_size(entry)
        elif key in ("max_consumers", "consumers"):
            limits_.max_consumers = _account_size(entry)
        elif key == "max_ack_pending":
            limits_.max_ack_pending = _account_size(entry)
        elif key in ("mem_max_stream_bytes", "memory_max_stream_bytes"):
            limits_.memory_max_stream_bytes = _account_size(entry)
        elif key in ("disk_max_stream_bytes", "store_max_stream_bytes"):
            limits_.storage_max_stream_bytes = _account_size(entry)
        elif key == "cluster_traffic":
            limits_.cluster_traffic = str(entry.value.data)
        elif key in ("max_bytes_required", "max_stream_bytes", "max_bytes"):
            if not isinstance(entry.value.data, bool):
                raise BadValue(entry.key_position, f'Expected a parseable bool for "{entry.key}", got {entry.value.data}')
            limits_.max_bytes_required = entry.value.data
        elif not entry.value.used_as_variable:
            raise BadValue(entry.key_position, f'unknown field "{entry.key}"')
    return limits_


def _account_size(entry: Entry) -> int:
    data = entry.value.data
    if isinstance(data, bool) or not isinstance(data, int):
        raise BadValue(entry.key_position, f'Expected a parseable size for "{entry.key}", got {to_plain(entry.value)}')
    return data


def _raw_map(name: str, value: Value) -> dict[str, object]:
    plain = to_plain(Value(as_map(name, value), value.position))
    assert isinstance(plain, dict)
    return plain


def _account(name: str, entry: Entry, problems: Problems) -> Account:
    account = Account(name=name)
    defaults: Permissions | None = None
    for item in as_map(name, entry.value).values():
        key = item.key.lower()
        try:
            if key == "users":
                account.users = parse_users(item.value, problems, account=name)
            elif key == "jetstream":
                account.jetstream = _account_jetstream(item.value)
            elif key == "imports":
                account.imports = parse_imports(item.value, problems)
            elif key == "exports":
                account.exports = parse_exports(item.value, problems)
            elif key in ("mappings", "maps"):
                account.mappings = _raw_map(key, item.value)
            elif key == "default_permissions":
                defaults = parse_permissions(item.value, problems)
            elif key in _UNSUPPORTED_ACCOUNT_KEYS:
                problems.unsupported(item)
            else:
                problems.unknown(item)
        except BadValue as error:
            problems.bad(error)
    _apply_default_permissions(account.users, defaults)
    return account


def parse_accounts(entry: Entry, problems: Problems) -> dict[str, Account]:
    accounts: dict[str, Account] = {}
    data = entry.value.data
    if isinstance(data, list):
        for item in data:
            try:
                name = as_str("accounts", item)
            except BadValue as error:
                problems.bad(error)
                continue
            if name == GLOBAL_ACCOUNT:
                problems.error(item.position, f'"{name}" is a Reserved Account')
            elif name in accounts:
                problems.error(item.position, f"Duplicate Account Entry: {name}")
            else:
                accounts[name] = Account(name=name)
        return accounts
    for name, account_entry in as_map(entry.key, entry.value).items():
        if account_entry.value.used_as_variable:
            continue
        if not isinstance(account_entry.value.data, ConfigMap):
            problems.error(account_entry.key_position, "Expected map entries for accounts")
            continue
        if name == GLOBAL_ACCOUNT:
            problems.error(account_entry.key_position, f'"{name}" is a Reserved Account')
            continue
        accounts[name] = _account(name, account_entry, problems)
    return accounts


def check_users(entry: Entry | None, auth: Authorization, accounts: dict[str, Account], problems: Problems) -> None:
    """Users are unique across `authorization` and every account; single user/token excludes them."""
    seen: set[str] = set()
    seen_nkeys: set[str] = set()
    for user in [*auth.users, *(u for account in accounts.values() for u in account.users)]:
        if user.nkey:
            if user.nkey in seen_nkeys:
                problems.error(entry.key_position if entry else None, f'Duplicate nkey "{user.nkey}" detected')
            seen_nkeys.add(user.nkey)
            continue
        if user.username in seen:
            problems.error(entry.key_position if entry else None, f'Duplicate user "{user.username}" detected')
        seen.add(user.username)
    account_users = any(account.users for account in accounts.values())
    if entry is not None and account_users and auth.user:
        problems.error(entry.key_position, "Can not have a single user/pass and accounts")
    if entry is not None and account_users and auth.token:
        problems.error(entry.key_position, "Can not have a token and accounts")

