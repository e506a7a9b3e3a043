"""What a reload does with the `cluster {}` block, as nats-server's clusterOption and routesOption.

nats-server refuses only a new listener (validateClusterOpts: host, port) and an advertise address it
cannot parse; everything else of the block applies live and is logged `Reloaded: cluster` (after
`Cluster name updated to NAME` when the name changed). What that means here (`RouteManager.reload`):
the name is the one sent and checked from then on (routes up stay, as nats-server's), new route
credentials are checked on the next CONNECT and routes accepted with the old ones are closed with
'Authorization Violation' (its reloadAuthorization), advertise/no_advertise show in the route INFO
sent from then on, ping_interval/ping_max take effect at the next PING, auth timeout and
connect_retries for the next route. pool_size, pinned accounts and compression are accepted as
nats-server does; this server keeps one uncompressed route per peer whatever they say (at start too).

Still refused in this build, with our own reason: turning route TLS on or off (routes up would have to
go), and routes on a server started without a cluster (no route manager runs to solicit them).
"""

from __future__ import annotations

import re
from dataclasses import fields

from appliance.config.convert import split_host_port
from appliance.config.options import ClusterOptions

# what only the routes option covers (Reloaded: cluster routes), and the new route certificates (tls)
_NOT_CLUSTER_OPTION = {"routes", "auth_timeout_given"}


def cluster_changes(before: ClusterOptions, after: ClusterOptions) -> tuple[list[tuple[str, str]], str | None]:
    """(the (Go field, line) pairs to log, the refusal or None)."""
    refused = _refusal(before, after)
    if refused is not None:
        return [], refused
    found: list[tuple[str, str]] = []
    changed = [spec.name for spec in fields(ClusterOptions)
               if spec.name not in _NOT_CLUSTER_OPTION and getattr(before, spec.name) != getattr(after, spec.name)]
    if changed:
        if after.name and after.name != before.name:
            found.append(("Cluster", f"Cluster name updated to {after.name}"))
        found.append(("Cluster", "Reloaded: cluster"))
    if before.routes != after.routes:
        found.append(("Routes", "Reloaded: cluster routes"))
    return found, None


def _refusal(before: ClusterOptions, after: ClusterOptions) -> str | None:
    if before.host != after.host:  # nats-server's validateClusterOpts texts
        return f"config reload not supported for cluster host: old={before.host}, new={after.host}"
    if before.port != after.port:
        return f"config reload not supported for cluster port: old={before.port}, new={after.port}"
    if after.advertise:
        problem = host_port_problem(after.advertise)
        if problem is not None:
            return f"invalid Cluster.Advertise value of {after.advertise}, err={problem}"
    if after.routes and not before.routes and before.port == 0:  # no RouteManager runs to solicit them
        return ("config reload not supported for cluster routes: this server started without a cluster "
                "(restart the server to join one)")
    if (before.tls is None) != (after.tls is None):  # routes up in plain text (or TLS) would have to go
        return ("config reload not supported for cluster tls: turning route TLS on or off needs a restart "
                "in this build")
    return None


def host_port_problem(text: str) -> str | None:
    """Go's parseHostPort(text, 0) error text (nats-server validates advertise addresses with it)."""
    try:
        _, port = split_host_port(text)
    except ValueError as missing:
        if "missing port" not in str(missing):
            return f"address {text}: {missing}"
        try:
            _, port = split_host_port(f"{text}:0")
        except ValueError as exc:
            return f"address {text}:0: {exc}"
    port = port.strip()
    if not re.fullmatch(r"[+-]?\d+", port):
        return f'strconv.Atoi: parsing "{port}": invalid syntax'
    if not -(1 << 63) <= int(port) < 1 << 63:
        return f'strconv.Atoi: parsing "{port}": value out of range'
    return None
