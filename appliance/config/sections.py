"""The `jetstream {}`, `cluster {}` and `appliance {}` blocks of a NATS config.

Each loader takes the block's entry, fills its part of `ServerOptions` and records problems;
keys nats-server knows but appliance does not implement are reported as unsupported, never
ignored. Shapes follow nats-server's `parseJetStream` and `parseCluster` (server/opts.go).
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass

from appliance import limits
from appliance.config.auth import parse_authorization
from appliance.config.convert import (
    BadValue,
    Problems,
    as_bool,
    as_duration,
    as_duration_string,
    as_int,
    as_list,
    as_listen,
    as_map,
    as_port,
    as_size,
    as_str,
    as_str_list,
)
from appliance.config.options import ServerOptions
from appliance.config.parser import Entry, Position
from appliance.config.tls import parse_tls
from appliance.config.tls_context import TLSConfigError, files_digest, route_contexts

ROUTE_PING_INTERVAL_MAX_S = 30.0  # nats-server routeMaxPingInterval
_JETSTREAM_UNSUPPORTED = frozenset({
    "key", "ek", "encryption_key", "prev_key", "prev_ek", "prev_encryption_key", "cipher", "extension_hint",
    "limits", "tpm", "max_outstanding_catchup", "max_buffered_size", "max_buffered_msgs", "request_queue_limit",
    "info_queue_limit", "meta_compact", "meta_compact_size", "meta_compact_sync", "max_concurrent_io",
})
_CLUSTER_UNSUPPORTED = frozenset({"permissions", "connect_backoff", "write_deadline", "write_timeout"})


@dataclass(slots=True)
class LoadState:
    """What one load shares between sections: the options being filled and the problems."""

    options: ServerOptions
    problems: Problems
    store_dir_at: Position | None = None

    def set_store_dir(self, entry: Entry) -> None:
        if self.store_dir_at is not None:
            self.problems.error(entry.key_position, "Duplicate 'store_dir' configuration")
            return
        self.options.jetstream.store_dir = as_str(entry.key, entry.value)
        self.store_dir_at = entry.key_position


# --- jetstream --------------------------------------------------------------------------------
def load_jetstream(entry: Entry, state: LoadState) -> None:
    data = entry.value.data
    jetstream = state.options.jetstream
    if isinstance(data, bool):
        jetstream.enabled = data
        return
    if isinstance(data, str):
        lowered = data.lower()
        if lowered not in ("enabled", "enable", "disabled", "disable"):
            raise BadValue(entry.value.position, f"Expected 'enabled' or 'disabled' for string value, got '{data}'")
        jetstream.enabled = lowered.startswith("enable")
        return
    block = as_map(entry.key, entry.value)
    enabled = True
    for item in block.values():
        try:
            enabled = _jetstream_key(item, state, enabled)
        except BadValue as error:
            state.problems.bad(error)
    jetstream.enabled = enabled


def _jetstream_key(item: Entry, state: LoadState, enabled: bool) -> bool:
    key, value = item.key.lower(), item.value
    jetstream = state.options.jetstream
    if key == "strict":
        jetstream.strict = as_bool(key, value)
    elif key in ("store", "store_dir", "storedir"):
        state.set_store_dir(item)
    elif key in ("sync", "sync_interval"):
        if isinstance(value.data, str) and value.data.lower() == "always":
            jetstream.sync_always = True
        else:
            jetstream.sync_interval_s = as_duration(item.key, value, state.problems)
    elif key in ("max_memory_store", "max_mem_store", "max_mem"):
        jetstream.max_memory = _size("max_mem_store", item)
    elif key in ("max_file_store", "max_file"):
        jetstream.max_storage = _size("max_file_store", item)
    elif key == "domain":
        jetstream.domain = as_str(key, value)
    elif key in ("enable", "enabled"):
        return as_bool(key, value)
    elif key == "unique_tag":
        jetstream.unique_tag = as_str(key, value).strip().lower()
    elif key in _JETSTREAM_UNSUPPORTED:
        state.problems.unsupported(item)
    else:
        state.problems.unknown(item)
    return enabled


def _size(name: str, item: Entry) -> int:
    size = as_size(name, item.value)
    if size < -1:
        raise BadValue(item.value.position, f"{name} must not be negative")
    return size


# --- cluster ----------------------------------------------------------------------------------
def load_cluster(entry: Entry, state: LoadState) -> None:
    for item in as_map(entry.key, entry.value).values():
        try:
            _cluster_key(item, state)
        except BadValue as error:
            state.problems.bad(error)


def _cluster_key(item: Entry, state: LoadState) -> None:
    key, value = item.key.lower(), item.value
    cluster = state.options.cluster
    if key == "name":
        name = as_str(key, value)
        if " " in name:
            raise BadValue(value.position, "cluster name cannot contain spaces")
        cluster.name = name
    elif key == "listen":
        host, cluster.port = as_listen(key, value)
        cluster.host = host if host is not None else cluster.host
    elif key == "port":
        cluster.port = as_port(key, value)
    elif key in ("host", "net"):
        cluster.host = as_str(key, value)
    elif key == "authorization":
        _cluster_authorization(item, state)
    elif key == "routes":
        cluster.routes = _routes(item, state.problems)
    elif key in ("cluster_advertise", "advertise"):
        cluster.advertise = as_str(key, value)
    elif key == "no_advertise":
        cluster.no_advertise = as_bool(key, value)
    elif key == "connect_retries":
        cluster.connect_retries = as_int(key, value)
    elif key == "pool_size":
        cluster.pool_size = as_int(key, value)
    elif key == "accounts":
        cluster.pinned_accounts = as_str_list(key, value)
    elif key == "compression":
        cluster.compression = _compression(item, state.problems)
    elif key == "ping_interval":
        cluster.ping_interval_s = as_duration(key, value, state.problems)
        if cluster.ping_interval_s > ROUTE_PING_INTERVAL_MAX_S:
            state.problems.note(value.position, "Cluster 'ping_interval' will reset to 30s which is the max for routes")
            cluster.ping_interval_s = ROUTE_PING_INTERVAL_MAX_S
    elif key == "ping_max":
        cluster.ping_max = as_int(key, value)
    elif key == "tls":
        tls = parse_tls(item, client_context=False)
        try:
            route_contexts(tls)  # the certificate files are read now, as nats-server does at load
        except TLSConfigError as error:
            raise BadValue(item.key_position, str(error)) from None
        tls.files_digest = files_digest(tls)
        cluster.tls = tls
        if not cluster.auth_timeout_given:
            cluster.auth_timeout_s = tls.timeout_s + 1.0  # nats-server's getDefaultAuthTimeout
    elif key in _CLUSTER_UNSUPPORTED:
        state.problems.unsupported(item)
    else:
        state.problems.unknown(item)


def _cluster_authorization(item: Entry, state: LoadState) -> None:
    auth, has_users = parse_authorization(item, state.problems)
    if has_users:
        raise BadValue(item.key_position, "Cluster authorization does not allow multiple users")
    if auth.token:
        raise BadValue(item.key_position, "Cluster authorization does not support tokens")
    if auth.default_permissions is not None:
        state.problems.unsupported(item)
    cluster = state.options.cluster
    cluster.user, cluster.password = auth.user, auth.password
    cluster.auth_timeout_given = auth.timeout_given
    if auth.timeout_given or cluster.tls is None:
        cluster.auth_timeout_s = auth.timeout_s
    else:
        cluster.auth_timeout_s = cluster.tls.timeout_s + 1.0  # nats-server's getDefaultAuthTimeout


def _routes(item: Entry, problems: Problems) -> list[str]:
    routes: list[str] = []
    for route in as_list(item.key, item.value):
        url = as_str("routes", route).strip()
        if url in routes:
            problems.warn(route.position, url, "Duplicate route entry detected")
            continue
        try:
            parsed = urllib.parse.urlsplit(url)
            _ = parsed.port  # raises on a non-numeric or out-of-range port
        except ValueError:
            problems.error(route.position, f'error parsing route url ["{url}"]')
            continue
        routes.append(url)
    return routes


def _compression(item: Entry, problems: Problems) -> str:
    data = item.value.data
    if isinstance(data, bool):
        return "s2_fast" if data else "off"
    if isinstance(data, str):
        return data
    mode = "accept"
    for entry in as_map(item.key, item.value).values():
        key = entry.key.lower()
        if key == "mode":
            mode = as_str(key, entry.value)
        elif key in ("rtt_thresholds", "thresholds", "rtts", "rtt"):
            problems.unsupported(entry)
        elif not entry.value.used_as_variable:
            problems.error(entry.key_position, f'unknown field "{entry.key}"')
    return mode


# --- appliance --------------------------------------------------------------------------------
def load_appliance(entry: Entry, state: LoadState) -> None:
    settings = state.options.appliance
    for item in as_map(entry.key, entry.value).values():
        key, value = item.key.lower(), item.value
        try:
            if key == "workers":
                workers = as_int(key, value)
                if not 0 <= workers <= limits.CONFIG_WORKERS_MAX:
                    raise BadValue(value.position, f"workers must be 0 (one per core) .. {limits.CONFIG_WORKERS_MAX}")
                settings.workers = workers
            elif key == "cpu_pinning":
                settings.cpu_pinning = as_bool(key, value)
            elif key == "numa_store_dirs":
                settings.numa_store_dirs = _numa_store_dirs(item)
            elif key == "ring_bytes":
                settings.ring_bytes = _ring_bytes(item)
            elif key == "peer_remove_timeout":
                seconds = as_duration_string(key, value)
                if seconds <= 0:
                    raise BadValue(value.position, "peer_remove_timeout must be a positive duration")
                settings.peer_remove_timeout_s = seconds
            else:
                state.problems.unknown(item)
        except BadValue as error:
            state.problems.bad(error)


def _numa_store_dirs(item: Entry) -> dict[int, str]:
    dirs: dict[int, str] = {}
    for node, entry in as_map(item.key, item.value).items():
        if not node.isdigit() or not node.isascii():
            raise BadValue(entry.key_position, f'numa_store_dirs: NUMA node "{node}" is not a number')
        dirs[int(node)] = as_str(f"numa_store_dirs.{node}", entry.value)
    return dirs


def _ring_bytes(item: Entry) -> int:
    size = as_size("ring_bytes", item.value)
    low, high = limits.CONFIG_RING_BYTES_MIN, limits.CONFIG_RING_BYTES_MAX
    if size & (size - 1) or not low <= size <= high:
        raise BadValue(item.value.position, f"ring_bytes must be a power of two in {low}..{high}, got {size}")
    return size
