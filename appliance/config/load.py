"""NATS config text or file -> `ServerOptions`, with every problem of the file reported at once.

`options_from_text` / `load_config` parse (parser.py), walk the top-level keys (the table
below; keys are case-insensitive, aliases as nats-server), fill the typed options, then run the
cross-field checks nats-server makes when it starts (`validate_options`). Problems are
'file:line:col: text' and are raised together as `ConfigError(problems)`.

Warnings (an integer duration, a duplicate route, an empty file) do not stop a load; they are
kept in `options.config_warnings`. With `pedantic=True` they are errors, as with `nats-server -t`.
With `validate=False` the cross-field checks are skipped: `appliance run` loads that way, overlays
the command-line flags (which can fix them, e.g. `-n NAME`) and validates the result.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from appliance import limits
from appliance.config.auth import check_authorization, check_users, parse_accounts, parse_authorization
from appliance.config.imports import check_accounts as check_imports
from appliance.config.convert import (
    BadValue,
    Problems,
    as_bool,
    as_duration,
    as_duration_string,
    as_int,
    as_listen,
    as_map,
    as_port,
    as_str,
    as_str_list,
)
from appliance.config.operator import load_operator, load_pinned, load_preload, preload_accounts, trust_problems
from appliance.config.resolver import load_resolver
from appliance.config.options import ServerOptions, default_auth_timeout
from appliance.config.parser import ConfigMap, Entry, Position, ReadFile, parse_text, read_text_file, to_plain
from appliance.config.sections import LoadState, load_appliance, load_cluster, load_jetstream
from appliance.config.tls import parse_tls
from appliance.config.tls_context import TLSConfigError, files_digest, server_context
from appliance.config.websocket import parse_websocket, websocket_problems
from appliance.errors import ConfigError

DEFAULT_CLIENT_PORT = 4222
INT32_MAX = 2**31 - 1

# keys nats-server knows that appliance does not implement: an error, never silently ignored
UNSUPPORTED_KEYS = frozenset({
    "leafnodes", "leaf", "gateway", "mqtt", "resolver_tls", "trusted", "trusted_keys", "ocsp", "ocsp_cache",
    "http_base_path", "syslog", "remote_syslog", "prof_port", "prof_block_rate", "proxy_protocol",
    "proxies", "default_sentinel", "server_metadata", "feature_flags", "default_js_domain",
    "no_header_support", "connect_error_reports", "reconnect_error_reports",
    "no_fast_producer_stall", "max_traced_msg_len", "disable_sublist_cache", "no_sublist_cache",
    "trace_headers",
    "logtime_utc", "write_timeout", "max_sub_tokens", "max_subscription_tokens",
})

Handler = Callable[[Entry, LoadState], None]


def _set(attribute: str, read: Callable[[str, Entry, LoadState], object]) -> Handler:
    def handler(entry: Entry, state: LoadState) -> None:
        setattr(state.options, attribute, read(entry.key, entry, state))

    return handler


def _str(key: str, entry: Entry, state: LoadState) -> object:
    return as_str(key, entry.value)


def _bool(key: str, entry: Entry, state: LoadState) -> object:
    return as_bool(key, entry.value)


def _int(key: str, entry: Entry, state: LoadState) -> object:
    return as_int(key, entry.value)


def _duration(key: str, entry: Entry, state: LoadState) -> object:
    return as_duration(key.lower(), entry.value, state.problems)


def _positive_int32(key: str, entry: Entry, state: LoadState) -> object:
    number = as_int(key, entry.value)
    if number > INT32_MAX:
        raise BadValue(entry.value.position, f"{key} value is too big")
    if number < 0:
        raise BadValue(entry.value.position, f"{key} value can not be negative")
    return number


def _max_pending(key: str, entry: Entry, state: LoadState) -> object:
    number = as_int(key, entry.value)
    if number < 0:
        raise BadValue(entry.value.position, f"{key} value can not be negative")
    return number or limits.PENDING_BYTES_MAX


def _max_connections(key: str, entry: Entry, state: LoadState) -> object:
    number = as_int(key, entry.value)
    return -1 if number == 0 else number  # nats-server: 0 means "no connections", stored as -1


def _max_closed_clients(key: str, entry: Entry, state: LoadState) -> object:
    number = as_int(key, entry.value)
    if number < 0:  # nats-server makes a ring of that size: a negative one crashes it at start
        raise BadValue(entry.value.position, f"{key} value can not be negative")
    return number or limits.CLOSED_CONNECTIONS_MAX  # nats-server: 0 is the default, 10,000


def _client_port(key: str, entry: Entry, state: LoadState) -> object:
    return as_port(key, entry.value) or DEFAULT_CLIENT_PORT


def _listen(entry: Entry, state: LoadState) -> None:
    host, port = as_listen(entry.key, entry.value)
    state.options.host = host if host is not None else state.options.host
    state.options.port = port or DEFAULT_CLIENT_PORT


def _http(entry: Entry, state: LoadState) -> None:
    host, state.options.http_port = as_listen(entry.key, entry.value)
    state.options.http_host = host if host is not None else state.options.http_host


def _https(entry: Entry, state: LoadState) -> None:
    host, state.options.https_port = as_listen(entry.key, entry.value)
    state.options.http_host = host if host is not None else state.options.http_host


def _server_name(entry: Entry, state: LoadState) -> None:
    name = as_str(entry.key, entry.value)
    if " " in name:
        raise BadValue(entry.value.position, "server name cannot contain spaces")
    state.options.server_name = name


def _lame_duck_duration(entry: Entry, state: LoadState) -> None:
    seconds = as_duration_string(entry.key, entry.value)
    if seconds < limits.LAME_DUCK_DURATION_MIN_S:
        raise BadValue(entry.value.position, f"invalid lame_duck_duration of {entry.value.data}, minimum is 30 seconds")
    state.options.lame_duck_duration_s = seconds


def _lame_duck_grace_period(entry: Entry, state: LoadState) -> None:
    seconds = as_duration_string(entry.key, entry.value)
    if seconds < 0:
        raise BadValue(entry.value.position, "invalid lame_duck_grace_period, needs to be positive")
    state.options.lame_duck_grace_period_s = seconds


def _trace_verbose(entry: Entry, state: LoadState) -> None:
    state.options.trace_verbose = as_bool(entry.key, entry.value)
    state.options.trace = state.options.trace_verbose


def _authorization(entry: Entry, state: LoadState) -> None:
    auth, has_users = parse_authorization(entry, state.problems)
    check_authorization(entry, auth, has_users, state.problems)
    state.options.authorization = auth


def _accounts(entry: Entry, state: LoadState) -> None:
    state.options.accounts = parse_accounts(entry, state.problems)
    if not state.problems.errors:  # nats-server checks imports only once every account parsed cleanly
        check_imports(state.options.accounts, state.problems, entry.key_position)


def _mappings(entry: Entry, state: LoadState) -> None:
    as_map(entry.key, entry.value)
    plain = to_plain(entry.value)
    assert isinstance(plain, dict)
    state.options.mappings = plain


def _websocket(entry: Entry, state: LoadState) -> None:
    """The WebSocket port's block; its certificate files are read now, as for the client port."""
    ws = parse_websocket(entry, state.problems)
    if ws.tls is not None:
        try:
            server_context(ws.tls)
        except TLSConfigError as error:
            raise BadValue(entry.key_position, str(error)) from None
    state.options.websocket = ws


def _tls(entry: Entry, state: LoadState) -> None:
    """The client port's TLS; the certificate files are read now, as nats-server does at load."""
    tls = parse_tls(entry)
    try:
        server_context(tls)
    except TLSConfigError as error:
        raise BadValue(entry.key_position, str(error)) from None
    tls.files_digest = files_digest(tls)
    state.options.tls = tls


def _server_tags(entry: Entry, state: LoadState) -> None:
    """Trimmed, lower-cased and de-duplicated, as nats-server stores them (/varz shows these)."""
    for raw in as_str_list(entry.key, entry.value):
        tag = raw.strip().lower()
        if tag and tag not in state.options.server_tags:
            state.options.server_tags.append(tag)


def _store_dir(entry: Entry, state: LoadState) -> None:
    state.set_store_dir(entry)


def _ignore(entry: Entry, state: LoadState) -> None:
    """Handled before the walk (system_account is read first, as nats-server does)."""


HANDLERS: dict[str, Handler] = {
    "listen": _listen,
    "port": _set("port", _client_port),
    "host": _set("host", _str),
    "net": _set("host", _str),
    "client_advertise": _set("client_advertise", _str),
    "server_name": _server_name,
    "http": _http,
    "http_port": _set("http_port", lambda key, entry, state: as_port(key, entry.value)),
    "monitor_port": _set("http_port", lambda key, entry, state: as_port(key, entry.value)),
    "https": _https,
    "https_port": _set("https_port", lambda key, entry, state: as_port(key, entry.value)),
    "jetstream": load_jetstream,
    "store_dir": _store_dir,
    "storedir": _store_dir,
    "cluster": load_cluster,
    "accounts": _accounts,
    "authorization": _authorization,
    "system_account": _ignore,
    "system": _ignore,
    "no_system_account": _set("no_system_account", _bool),
    "no_system": _set("no_system_account", _bool),
    "no_sys_acc": _set("no_system_account", _bool),
    "no_auth_user": _set("no_auth_user", _str),
    "max_payload": _set("max_payload", _positive_int32),
    "max_control_line": _set("max_control_line", _positive_int32),
    "max_pending": _set("max_pending", _max_pending),
    "max_connections": _set("max_connections", _max_connections),
    "max_closed_clients": _set("max_closed_clients", _max_closed_clients),
    "max_conn": _set("max_connections", _max_connections),
    "max_subscriptions": _set("max_subscriptions", _int),
    "max_subs": _set("max_subscriptions", _int),
    "ping_interval": _set("ping_interval_s", _duration),
    "ping_max": _set("ping_max", _int),
    "write_deadline": _set("write_deadline_s", _duration),
    "lame_duck_duration": _lame_duck_duration,
    "lame_duck_grace_period": _lame_duck_grace_period,
    "debug": _set("debug", _bool),
    "trace": _set("trace", _bool),
    "trace_verbose": _trace_verbose,
    "logtime": _set("logtime", _bool),
    "logfile": _set("log_file", _str),
    "log_file": _set("log_file", _str),
    "pidfile": _set("pid_file", _str),
    "pid_file": _set("pid_file", _str),
    "logfile_size_limit": _set("log_size_limit", _int),
    "log_size_limit": _set("log_size_limit", _int),
    "logfile_max_num": _set("log_max_num", _int),
    "log_max_num": _set("log_max_num", _int),
    "ports_file_dir": _set("ports_file_dir", _str),
    "server_tags": _server_tags,
    "mappings": _mappings,
    "maps": _mappings,
    "appliance": load_appliance,
    "tls": _tls,
    "websocket": _websocket,
    "ws": _websocket,
    "allow_non_tls": _set("allow_non_tls", _bool),
    "operator": load_operator,
    "operators": load_operator,
    "roots": load_operator,
    "root": load_operator,
    "root_operators": load_operator,
    "root_operator": load_operator,
    "resolver": load_resolver,
    "account_resolver": load_resolver,
    "accounts_resolver": load_resolver,
    "resolver_preload": load_preload,
    "resolver_pinned_accounts": load_pinned,
}


def _system_account(tree: ConfigMap, state: LoadState) -> None:
    """Read before the other keys, as nats-server does: other sections may depend on it."""
    for entry in tree.values():
        if entry.key.lower() in ("system_account", "system"):
            if not isinstance(entry.value.data, str):
                state.problems.error(entry.key_position, "system account name must be a string")
            else:
                state.options.system_account = entry.value.data


def options_from_tree(tree: ConfigMap, *, filename: str, pedantic: bool = False, validate: bool = True) -> ServerOptions:
    """Typed options of a parsed tree; raises ConfigError with every problem found."""
    state = LoadState(options=ServerOptions(config_file=filename), problems=Problems())
    problems = state.problems
    if not tree:
        problems.warnings.append(f"{filename}: config has no values or is empty")
    _system_account(tree, state)
    anchors: dict[str, Position] = {}
    for entry in tree.values():
        key = entry.key.lower()
        anchors.setdefault(key, entry.key_position)
        handler = HANDLERS.get(key)
        try:
            if handler is not None:
                handler(entry, state)
            elif key in UNSUPPORTED_KEYS:
                problems.unsupported(entry)
            elif entry.value.used_as_variable:
                state.options.variables[entry.key] = to_plain(entry.value)
            else:
                problems.unknown(entry)
        except BadValue as error:
            problems.bad(error)
    users_anchor = next((e for e in tree.values() if e.key.lower() in ("accounts", "authorization")), None)
    check_users(users_anchor, state.options.authorization, state.options.accounts, problems)
    state.options.config_anchors = {key: str(position) for key, position in anchors.items()}
    _operator_mode(state, anchors)
    default_auth_timeout(state.options)
    if validate:
        problems.errors.extend(_located(state.options, cross_field_problems(state.options)))
    errors = (problems.warnings if pedantic else []) + problems.errors
    if errors and problems.dropped:
        errors.append(f"{filename}: {problems.dropped} more problems not shown")
    if errors:
        raise ConfigError(errors)
    state.options.config_warnings = list(problems.warnings)
    return state.options


def _operator_mode(state: LoadState, anchors: dict[str, Position]) -> None:
    """validateTrustedOperators, then the preloaded accounts become accounts (operator.py)."""
    options = state.options
    if not options.trust.enabled or state.problems.errors:  # checks of the operator mode as a whole come last
        return
    where = next((anchors[k] for k in ("operator", "operators", "roots", "root", "root_operators", "root_operator")
                  if k in anchors), None)
    for text in trust_problems(options, accounts_configured=bool(options.accounts)):
        state.problems.error(where, text)
    if not state.problems.errors:
        preload_accounts(options)


def cross_field_problems(options: ServerOptions) -> list[tuple[str, str]]:
    """(top-level key to point at, text) for the checks nats-server makes when it starts."""
    found: list[tuple[str, str]] = []
    if options.max_payload > options.max_pending:
        found.append(("max_payload", f"max_payload ({options.max_payload}) cannot be higher than max_pending ({options.max_pending})"))
    if options.lame_duck_duration_s > 0 and options.lame_duck_grace_period_s >= options.lame_duck_duration_s:
        found.append((
            "lame_duck_grace_period",
            f"lame duck grace period ({options.lame_duck_grace_period_s:g}s) should be strictly lower than "
            f"lame duck duration ({options.lame_duck_duration_s:g}s)",
        ))
    if " " in options.server_name:
        found.append(("server_name", "server name cannot contain spaces"))
    for name, port in (("port", options.port), ("http_port", options.http_port), ("cluster", options.cluster.port)):
        if not -1 <= port <= 65535:
            found.append((name, f"{name} {port} out of range (-1 for random, 1..65535)"))
    if options.jetstream.enabled and options.cluster.port != 0:
        if options.server_name == "":
            found.append(("cluster", "jetstream cluster requires `server_name` to be set"))
        if options.cluster.name == "":
            found.append(("cluster", "jetstream cluster requires `cluster.name` to be set"))
        if not options.cluster.routes:
            found.append(("cluster", "JetStream cluster requires configured routes or solicited leafnode for the system account"))
    if options.system_account != "$SYS" and options.system_account not in options.accounts:
        anchor = "system" if "system" in options.config_anchors else "system_account"
        found.append((anchor, "error resolving system account: account missing"))
    if options.http_port != 0 and options.https_port != 0:
        found.append(("https_port", f"can't specify both HTTP ({options.http_port}) and HTTPs ({options.https_port}) ports"))
    elif options.https_port != 0 and options.tls is None:
        found.append(("https_port", "TLS cert and key required for HTTPS"))
    found.extend(_no_auth_user_problems(options))
    has_users = bool(options.authorization.users or any(a.users for a in options.accounts.values()))
    ws_no_auth_user = [text for _, text in _no_auth_user_problems(options, options.websocket.no_auth_user)]
    found.extend(("websocket", text) for text in websocket_problems(
        options.websocket, trusted=options.trust.enabled, has_users=has_users, no_auth_user_problems=ws_no_auth_user))
    return found


def _located(options: ServerOptions, found: list[tuple[str, str]]) -> list[str]:
    where = options.config_file or "<command line>"
    return [f"{options.config_anchors.get(key, where)}: {text}" for key, text in found]


def validate_options(options: ServerOptions) -> None:
    """The cross-field checks of a final options object (config + flags); raises ConfigError."""
    problems = _located(options, cross_field_problems(options))
    if problems:
        raise ConfigError(problems)


def _no_auth_user_problems(options: ServerOptions, name: str | None = None) -> list[tuple[str, str]]:
    name = options.no_auth_user if name is None else name
    if name == "":
        return []
    if options.trust.enabled:
        return [("no_auth_user", "no_auth_user not compatible with Trusted Operator")]
    users = [*options.authorization.users, *(u for a in options.accounts.values() for u in a.users)]
    if not users:
        return [("no_auth_user", f'no_auth_user: "{name}" present, but users/nkeys are not defined')]
    if all(user.username != name and user.nkey != name for user in users):
        return [(
            "no_auth_user",
            f'no_auth_user: "{name}" not present as user or nkey in authorization block or account configuration',
        )]
    return []


def options_from_text(
    text: str,
    *,
    filename: str,
    env: Mapping[str, str] | None = None,
    read_file: ReadFile = read_text_file,
    pedantic: bool = False,
    validate: bool = True,
) -> ServerOptions:
    """Typed options of a config text; `filename` names it in problems and anchors includes."""
    tree = parse_text(text, filename=filename, read_file=read_file, env=env)
    return options_from_tree(tree, filename=filename, pedantic=pedantic, validate=validate)


def load_config(
    path: str,
    *,
    env: Mapping[str, str] | None = None,
    read_file: ReadFile = read_text_file,
    pedantic: bool = False,
    validate: bool = True,
) -> ServerOptions:
    """Typed options of the config file at `path`; raises ConfigError listing every problem."""
    return options_from_text(
        read_file(path), filename=path, env=env, read_file=read_file, pedantic=pedantic, validate=validate
    )

