"""`/varz`: server identity, configuration and counters, with nats-server's keys in its order.

Keys nats-server omits when empty (omitempty) are omitted here under the same rule; blocks for
features we do not have (gateway, leaf, mqtt) are `{}` exactly as an unconfigured
nats-server shows them. `disk_io_wait_stats` (Go's disk semaphore) has no counterpart and is left out.
"""

from __future__ import annotations

import platform
from collections.abc import Sequence
from urllib.parse import urlsplit

from appliance.config.jwt import JWTError, decode

from . import jsinfo
from appliance.durations import rfc3339_nano, uptime, wall_ns
from .endpoint import PART_COUNTERS, PART_PROCESS, Endpoint, RequestContext, Response, json_response
from .gojson import JsonValue
from .view import ByKindCounts, ServerView

PROTO = 1  # client protocol level with INFO `proto`
TLS_TIMEOUT_S = 2.0  # nats-server's default TLS handshake timeout, shown even without TLS


def route_hosts(routes: Sequence[str]) -> list[str]:
    """Configured route URLs as nats-server lists them: host:port, credentials dropped."""
    return [urlsplit(url).netloc.rpartition("@")[2] for url in routes]


def _by_kind(counts: ByKindCounts) -> dict[str, JsonValue]:
    return {
        "clients": counts.clients,
        "routes": counts.routes,
        "gateways": counts.gateways,
        "leafs": counts.leafs,
    }


def cluster_json(view: ServerView) -> dict[str, JsonValue]:
    cluster = view.options.cluster
    if not cluster.enabled:
        return {}
    out: dict[str, JsonValue] = {}
    if view.cluster_name:
        out["name"] = view.cluster_name
    if cluster.host:
        out["addr"] = cluster.host
    out["cluster_port"] = cluster.port
    out["auth_timeout"] = cluster.auth_timeout_s
    if cluster.routes:
        out["urls"] = list[JsonValue](route_hosts(cluster.routes))
    out["tls_timeout"] = TLS_TIMEOUT_S
    if cluster.pool_size:
        out["pool_size"] = cluster.pool_size
    return out


def _identity(view: ServerView) -> dict[str, JsonValue]:
    options = view.options
    out: dict[str, JsonValue] = {
        "server_id": view.server_id,
        "server_name": view.server_name,
        "version": view.version,
        "proto": PROTO,
    }
    if view.git_commit:
        out["git_commit"] = view.git_commit
    out["go"] = f"{platform.python_implementation().lower()}{platform.python_version()}"
    out["host"] = view.client_host
    out["port"] = view.client_port
    if view.auth_required:
        out["auth_required"] = True
    if options.tls is not None:
        out["tls_required"] = True
        if options.tls.verify:
            out["tls_verify"] = True
    if view.connect_urls:
        out["connect_urls"] = list(view.connect_urls)
    out["max_connections"] = options.max_connections
    if options.max_subscriptions > 0:
        out["max_subscriptions"] = options.max_subscriptions
    return out


def _limits(view: ServerView) -> dict[str, JsonValue]:
    options = view.options
    return {
        "ping_interval": wall_ns(options.ping_interval_s),
        "ping_max": options.ping_max,
        "http_host": view.http_host,
        "http_port": 0 if options.https_port else view.http_port,
        "http_base_path": "",
        "https_port": view.http_port if options.https_port else 0,
        "auth_timeout": options.authorization.timeout_s,
        "max_control_line": options.max_control_line,
        "max_payload": options.max_payload,
        "max_pending": options.max_pending,
        "cluster": cluster_json(view),
        "gateway": {},
        "leaf": {},
        "mqtt": {},
        "websocket": websocket_json(view),
        "jetstream": jsinfo.varz_json(view.jetstream()),
        "tls_timeout": options.tls.timeout_s if options.tls is not None else TLS_TIMEOUT_S,
        "write_deadline": wall_ns(options.write_deadline_s),
    }


def websocket_json(view: ServerView) -> dict[str, JsonValue]:
    """nats-server's WebsocketOptsVarz: every key omitempty, `{}` when not configured."""
    ws = view.options.websocket
    if ws.port == 0:
        return {}
    out: dict[str, JsonValue] = {"host": ws.host, "port": ws.port, "advertise": ws.advertise,
                                 "no_auth_user": ws.no_auth_user, "jwt_cookie": ws.jwt_cookie,
                                 "handshake_timeout": wall_ns(ws.handshake_timeout_s),
                                 "auth_timeout": ws.auth_timeout_s, "no_tls": ws.no_tls,
                                 "tls_map": ws.tls is not None and ws.tls.map,
                                 "same_origin": ws.same_origin, "allowed_origins": list(ws.allowed_origins),
                                 "compression": ws.compression}
    return {key: value for key, value in out.items() if value}


def _runtime(view: ServerView, http_req_stats: dict[str, int]) -> dict[str, JsonValue]:
    now_ns = wall_ns(view.now_wall_s())
    start_ns = wall_ns(view.start_wall_s)
    usage = view.process_usage()
    counters = view.counters()
    out: dict[str, JsonValue] = {
        "start": rfc3339_nano(start_ns),
        "now": rfc3339_nano(now_ns),
        "uptime": uptime(now_ns - start_ns),
        "mem": usage.rss_bytes,
        "cores": usage.cores,
        "gomaxprocs": usage.max_procs,
        "cpu": usage.cpu_percent,
        "connections": counters.connections,
        "total_connections": counters.total_connections,
        "routes": counters.routes,
        "remotes": counters.remotes,
        "leafnodes": counters.leafnodes,
        "in_msgs": counters.in_msgs,
        "in_bytes": counters.in_bytes,
        "in_client_msgs": counters.in_client_msgs,
        "in_client_bytes": counters.in_client_bytes,
        "out_msgs": counters.out_msgs,
        "out_bytes": counters.out_bytes,
        "out_client_msgs": counters.out_client_msgs,
        "out_client_bytes": counters.out_client_bytes,
        "slow_consumers": counters.slow_consumers,
        "stale_connections": counters.stale_connections,
        "stalled_clients": counters.stalled_clients,
        "subscriptions": counters.subscriptions,
        "http_req_stats": dict[str, JsonValue](http_req_stats),
        "config_load_time": rfc3339_nano(wall_ns(view.config_load_wall_s)),
        "config_digest": view.config_digest,
    }
    if view.options.server_tags:
        out["tags"] = list(view.options.server_tags)
    if view.feature_flags:
        out["feature_flags"] = dict[str, JsonValue](sorted(view.feature_flags.items()))
    if view.options.trust.operator_jwts:  # operator mode: the trusted operators, as JWTs and decoded
        out["trusted_operators_jwt"] = list[JsonValue](view.options.trust.operator_jwts)
        out["trusted_operators_claim"] = [_claims_json(token) for token in view.options.trust.operator_jwts]
    if view.system_account:
        out["system_account"] = view.system_account
    out["slow_consumer_stats"] = _by_kind(counters.slow_consumer_stats)
    out["stale_connection_stats"] = _by_kind(counters.stale_connection_stats)
    return out


def _claims_json(token: str) -> JsonValue:
    """The operator JWT's claims (verified when the config was loaded)."""
    try:
        claims: JsonValue = decode(token)[1]  # type: ignore[assignment]
    except JWTError:
        return None
    return claims


def varz_json(view: ServerView, http_req_stats: dict[str, int]) -> dict[str, JsonValue]:
    return _identity(view) | _limits(view) | _runtime(view, http_req_stats)


def handle(ctx: RequestContext) -> Response:
    ctx.count()  # nats-server counts this request in the stats it returns
    return json_response(varz_json(ctx.view, ctx.stats.snapshot()))


ENDPOINT = Endpoint(paths=("/varz",), handle=handle, title="General",
                    needs=lambda query: frozenset({PART_COUNTERS, PART_PROCESS}))
