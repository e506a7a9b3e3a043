"""Configuration reload (SIGHUP, `appliance reload`), as nats-server's server/reload.go.

`diff_options(old, new)` is pure: the `Reloaded: ...` lines nats-server logs for what changed, or
the error it refuses the whole reload with (`config reload not supported for Port: old=4222,
new=4333`); nothing is applied then and the server keeps its old config. What can change live:
logging and trace flags, pid_file, ports_file_dir, max_payload, max_control_line,
max_connections, ping_interval, ping_max, write_deadline, tags, authorization (user, password,
token, timeout, users, default permissions), accounts (added, removed, their users, permissions,
JetStream on or off and limits, imports, exports, mappings: nats-server never compares them and
always logs `Reloaded: accounts`), no_auth_user (as nats-server: only removed together with its
user), and the cluster block (server/reload_cluster.py: all of it but the listener, as
nats-server's clusterOption and routesOption).

Not in this build (refused, with the reason): turning JetStream on or off for the whole server, and
the appliance {} block (workers and pinning are placed at start). Imports and exports are rebuilt
from the new file (server/imports.py: shadow subscriptions made again for the clients' subscriptions,
pending service responses dropped); mappings are kept as the file says but route nothing (not built).

Certificates: new `tls {}` / `cluster { tls {} }` files (new contents in the same paths count: the
loader keeps a digest of them) log `Reloaded: tls = enabled` / `Reloaded: cluster`; new client and
route connections use them, connections already up keep the session they verified.

`apply_reload(server, new)` (on every worker's loop) swaps the options, the authenticator and the
accounts (server/accounts.py), sets the new limits on open connections, and re-checks every client
as nats-server's reloadAuthorization does: a client whose user is gone or moved to another account
(a removed account's users are gone) is closed without a word (Client Closed: it reconnects where it
now belongs), one whose password no longer matches gets -ERR 'Authorization Violation' and is
closed; the others get their new permissions. Then the account listeners run (`Server.account_listeners`:
the sibling links insert interest they kept for an account new here, the routes tell their peers
that the interest in a removed account is gone, JetStream opens or closes accounts' JetStream).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, fields, replace
from typing import Any

from appliance.config.options import Authorization, ServerOptions, TrustOptions
from appliance.config.tls_context import TLSConfigError
from appliance.server import auth
from appliance.durations import go_duration
from appliance.server.reload_cluster import cluster_changes
from appliance.server.tls import serving_from_options

logger = logging.getLogger(__name__)

# ServerOptions field -> nats-server's Options field name (the name its error texts use)
GO_NAMES = {
    "server_name": "ServerName", "host": "Host", "port": "Port", "client_advertise": "ClientAdvertise",
    "http_host": "HTTPHost", "http_port": "HTTPPort", "max_subscriptions": "MaxSubs",
    "lame_duck_duration_s": "LameDuckDuration", "lame_duck_grace_period_s": "LameDuckGracePeriod",
    "system_account": "SystemAccount", "no_system_account": "NoSystemAccount", "no_auth_user": "NoAuthUser",
    "max_pending": "MaxPending", "log_size_limit": "LogSizeLimit", "log_max_num": "LogMaxFiles",
}
IGNORED = {"config_file", "variables", "config_warnings", "config_anchors", "mappings"}
AUTHORIZATION_LINES = {"user": ("Username", "Reloaded: authorization username"),
                       "password": ("Password", "Reloaded: authorization password"),
                       "token": ("Authorization", "Reloaded: authorization token")}


@dataclass(frozen=True, slots=True)
class ReloadDiff:
    changes: list[str]  # nats-server's `Reloaded: ...` lines, in its order of fields
    error: str | None = None  # the whole reload is refused


def _go(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


# nats-server's Options fields in declaration order: it diffs them in this order, so its `Reloaded:`
# lines come in it and the first unsupported field is the one its error names
GO_ORDER = ("ServerName", "Host", "Port", "ClientAdvertise", "Trace", "Debug", "TraceVerbose", "Logtime", "MaxConn",
            "MaxSubs", "Users", "Accounts", "TrustedOperators", "AccountResolver", "NoAuthUser", "SystemAccount", "NoSystemAccount", "Username", "Password",
            "Authorization", "PingInterval", "MaxPingsOut", "HTTPHost", "HTTPPort", "AuthTimeout", "MaxControlLine",
            "MaxPayload", "MaxPending", "Cluster", "JetStream", "PidFile", "PortsFileDir", "LogFile", "LogSizeLimit",
            "Routes", "LogMaxFiles", "WriteDeadline", "LameDuckDuration", "LameDuckGracePeriod", "Tags", "TLSConfig",
            "appliance")
FIELD_GO_NAME = {
    **GO_NAMES, "debug": "Debug", "trace": "Trace", "trace_verbose": "TraceVerbose", "logtime": "Logtime",
    "max_connections": "MaxConn", "ping_interval_s": "PingInterval", "ping_max": "MaxPingsOut",
    "max_control_line": "MaxControlLine", "max_payload": "MaxPayload", "cluster": "Cluster",
    "jetstream": "JetStream", "pid_file": "PidFile", "ports_file_dir": "PortsFileDir", "log_file": "LogFile",
    "write_deadline_s": "WriteDeadline", "server_tags": "Tags", "appliance": "appliance",
}
ALWAYS = [("Users", "Reloaded: authorization users"), ("Accounts", "Reloaded: accounts")]  # nats-server never
# compares users and accounts (they hold live state), so every reload reports both


def _rank(go_name: str) -> int:
    return GO_ORDER.index(go_name) if go_name in GO_ORDER else len(GO_ORDER)


def _not_supported_text(name: str, old: Any, new: Any) -> str:
    return f"config reload not supported for {name}: old={_go(old)}, new={_go(new)}"


def diff_options(old: ServerOptions, new: ServerOptions) -> ReloadDiff:
    found: list[tuple[str, str]] = list(ALWAYS)  # (Go field, `Reloaded:` line)
    errors: list[tuple[str, str]] = []  # (Go field, error text)
    for spec in fields(ServerOptions):
        name = spec.name
        before, after = getattr(old, name), getattr(new, name)
        if name in IGNORED or before == after:
            continue
        if name == "port" and after in (0, -1):  # a random port stays the one bound at start
            continue
        go_name = FIELD_GO_NAME.get(name, name)
        line = _scalar_change(name, after)
        if line is not None:
            found.append((go_name, line))
        elif name == "authorization":
            found += _authorization_changes(before, after)
        elif name == "accounts":  # always reported (ALWAYS); all of it applies live
            continue
        elif name == "no_auth_user":
            if not (before and not after and not _has_user(new, before)):
                errors.append(("NoAuthUser", _not_supported_text("NoAuthUser", before, after)))
        elif name == "jetstream":
            refused = _jetstream_refusal(before, after)
            if refused is not None:
                errors.append(("JetStream", refused))
            if before.max_memory != after.max_memory:
                found.append(("JetStream", f"Reloaded: JetStream max_mem_store = {friendly_bytes(after.max_memory)}"))
            if before.max_storage != after.max_storage:
                found.append(("JetStream", f"Reloaded: JetStream max_file_store = {friendly_bytes(after.max_storage)}"))
        elif name == "tls":  # new certificates (or settings) for new client connections
            found.append(("TLSConfig", f"Reloaded: tls = {'enabled' if after is not None else 'disabled'}"))
        elif name == "cluster":
            lines, refused = cluster_changes(before, after)
            found += lines
            if refused is not None:
                errors.append(("Cluster", refused))
        elif name == "trust":  # operator mode: new account JWTs apply live, new operators do not
            refused = _trust_refusal(before, after)
            if refused is not None:
                errors.append(("TrustedOperators", refused))
        elif name == "appliance":
            errors.append(("appliance", "config reload not supported for appliance: workers, pinning, NUMA store "
                                        "dirs and ring sizes are placed at start (restart the server)"))
        else:
            errors.append((go_name, _not_supported_text(go_name, _shown(name, before), _shown(name, after))))
    if errors:
        return ReloadDiff([], min(errors, key=lambda error: _rank(error[0]))[1])
    return ReloadDiff([line for _, line in sorted(found, key=lambda item: _rank(item[0]))])


def friendly_bytes(count: int) -> str:
    """nats-server's friendlyBytes: "512 B", "2.00 GB"."""
    if count < 1024:
        return f"{count} B"
    exponent = min(int(math.log(count) / math.log(1024)), 6)
    return f"{count / 1024 ** exponent:.2f} {'KMGTPE'[exponent - 1]}B"


def _shown(name: str, value: Any) -> Any:
    return go_duration(int(value * 1e9)) if name.endswith("_s") and isinstance(value, float) else value


def _scalar_change(name: str, value: Any) -> str | None:
    simple = {"debug": "debug", "trace": "trace", "trace_verbose": "trace_verbose", "logtime": "logtime",
              "log_file": "log_file", "pid_file": "pid_file", "ports_file_dir": "ports_file_dir",
              "max_connections": "max_connections", "max_control_line": "max_control_line",
              "max_payload": "max_payload", "ping_max": "ping_max"}
    if name in simple:
        return f"Reloaded: {simple[name]} = {_go(value)}"
    if name == "ping_interval_s":
        return f"Reloaded: ping_interval = {go_duration(int(value * 1e9))}"
    if name == "write_deadline_s":
        return f"Reloaded: write_deadline = {go_duration(int(value * 1e9))}"
    if name == "server_tags":
        return "Reloaded: tags"
    return None


def _authorization_changes(before: Authorization, after: Authorization) -> list[tuple[str, str]]:
    """Users and default permissions are in the always-reported `authorization users` line."""
    lines = [(go_name, text) for key, (go_name, text) in AUTHORIZATION_LINES.items()
             if getattr(before, key) != getattr(after, key)]
    if before.timeout_s != after.timeout_s:
        lines.append(("AuthTimeout", f"Reloaded: authorization timeout = {_go(after.timeout_s)}"))
    return lines


def _trust_refusal(before: TrustOptions, after: TrustOptions) -> str | None:
    """nats-server reloads the MEMORY resolver's preloaded account JWTs (reloadAuthorization), never
    the operators or the resolver."""
    if before.operator_jwts != after.operator_jwts or before.trusted_keys != after.trusted_keys:
        return "config reload not supported for TrustedOperators"
    if before.resolver != after.resolver:
        return "config reload not supported for AccountResolver"
    return None


def _has_user(options: ServerOptions, username: str) -> bool:
    users = [*options.authorization.users, *(u for a in options.accounts.values() for u in a.users)]
    return any(user.username == username for user in users)


def _jetstream_refusal(before: Any, after: Any) -> str | None:
    if before.enabled != after.enabled:
        return "config reload not supported for JetStream: turning it on or off needs a restart in this build"
    if before.strict != after.strict:  # nats-server's field is the negation
        return _not_supported_text("NoJetStreamStrict", not before.strict, not after.strict)
    for limit in ("max_memory", "max_storage"):
        old, new = getattr(before, limit), getattr(after, limit)
        if old == new:
            continue
        if old == -1 and new != -1:
            return "config reload not supported for jetstream dynamic max memory and store"
        if new == -1 or new < old:
            return "config reload not supported for decreasing jetstream max memory and store"
    # the rest in nats-server's Options order, with its field names (JetStreamDomain, ..., SyncAlways)
    if before.domain != after.domain:
        return _not_supported_text("JetStreamDomain", before.domain, after.domain)
    if before.unique_tag != after.unique_tag:
        return _not_supported_text("JetStreamUniqueTag", before.unique_tag, after.unique_tag)
    if before.store_dir != after.store_dir:
        return "config reload not supported for jetstream storage directory"
    if before.sync_interval_s != after.sync_interval_s:
        return _not_supported_text("SyncInterval", go_duration(round(before.sync_interval_s * 1e9)),
                                   go_duration(round(after.sync_interval_s * 1e9)))
    if before.sync_always != after.sync_always:
        return _not_supported_text("SyncAlways", before.sync_always, after.sync_always)
    others = replace(after, max_memory=before.max_memory, max_storage=before.max_storage)
    if others != before:
        return "config reload not supported for JetStream: only max_memory and max_store grow live"
    return None


# --- applying, on a worker ------------------------------------------------------------------------


def apply_reload(server: Any, new: ServerOptions) -> int:
    """Swap in `new` on a running Server; returns how many clients were disconnected."""
    old = server.options
    new.port, new.host = old.port, old.host  # the bound listener is the server's, whatever the file says
    server.options = new
    server.trace = new.trace
    server.auth = auth.Authenticator(new)
    added, removed = server.accounts.update(new)
    try:  # the supervisor read these files a moment ago; one gone since keeps the old certificates
        if new.tls != old.tls:  # new client connections use the new certificates; open ones keep theirs
            server.tls = serving_from_options(new)
        if new.cluster.tls != old.cluster.tls and server.routes is not None:
            server.routes.reload_tls(new.cluster.tls)
    except TLSConfigError as error:
        logger.error("reloaded TLS configuration not applied, keeping the previous certificates: %s", error)
    if server.connection_gate is not None:
        server.connection_gate.limit = new.max_connections
    _register_jwt_accounts(server, new)
    closed = 0
    for conn in list(server.clients.values()):
        conn.parser.set_limits(max_control_line=new.max_control_line, max_payload=new.max_payload)
        if not conn.recheck_authorization():
            closed += 1
    if closed:
        logger.info("Disconnected %d client(s) no longer authorized by the reloaded configuration", closed)
    if new.cluster != old.cluster and server.routes is not None:
        server.routes.reload(new.cluster)
    server.imports.configure_from_options(new)  # nats-server reloads imports and exports too
    for listener in server.account_listeners:  # every time: JetStream follows the accounts' flags too
        listener(added, removed)
    if new.max_connections < old.max_connections:
        closed += _fall_within_max_connections(server, new.max_connections)
    return closed


def _register_jwt_accounts(server: Any, new: ServerOptions) -> None:
    """Operator mode: accounts of JWTs new in this config are served from now on (JetStream too,
    through the server's account listeners)."""
    for name, option in new.accounts.items():
        if not option.jwt:
            continue
        account = server.accounts.known(name)
        if account is None:
            account = server.accounts.add(name, jetstream=option.jetstream.enabled)
        elif option.jetstream.enabled and not account.jetstream:
            account.jetstream = True
        else:
            continue
        for listener in server.account_listeners:
            listener(account)


def _fall_within_max_connections(server: Any, limit: int) -> int:
    """A lowered max_connections closes the newest clients beyond it, as nats-server. With several
    workers each closes its share of the server-wide excess (by its part of the connections)."""
    gate = server.connection_gate
    mine = sorted(server.clients.values(), key=lambda conn: conn.cid, reverse=True)
    total = gate.total() if gate is not None else len(mine)
    excess = total - limit
    if excess <= 0 or not mine:
        return 0
    share = excess if gate is None else min(len(mine), math.ceil(excess * len(mine) / total))
    for conn in mine[:share]:
        conn.close_over_max_connections()
    logger.info("Closed %d connections to fall within max_connections", share)
    return share
