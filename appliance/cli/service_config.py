"""The /etc/appliance/appliance.conf that `appliance service install` writes from its flags. Pure.

A NATS config file nats-server reads too. One command per host makes the seed's three-server
cluster (server names n1-c1..n3-c1, cluster C1, each host routing to the other two):

    appliance service install --name n1-c1 --cluster C1 --route nats://host_b:6222 --route nats://host_c:6222
"""

from __future__ import annotations

from dataclasses import dataclass, field

from appliance.cli.service_unit import STATE_DIR


@dataclass(frozen=True, slots=True)
class ConfigSpec:
    server_name: str = ""
    client_listen: str = "0.0.0.0:4222"
    http_listen: str = "127.0.0.1:8222"  # monitoring (and /metrics): local by default
    store_dir: str = STATE_DIR
    cluster_name: str = ""
    cluster_listen: str = "0.0.0.0:6222"
    routes: tuple[str, ...] = field(default_factory=tuple)


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render_config(spec: ConfigSpec) -> str:
    lines = ["# appliance (and nats-server) configuration, written by `appliance service install`.",
             "# Check a change with `appliance check-config FILE`; apply it with `systemctl reload appliance`.",
             "# Under systemd the log goes to the journal without timestamps (journald adds its own).", ""]
    if spec.server_name:
        lines.append(f"server_name: {_quote(spec.server_name)}")
    lines.append(f"listen: {_quote(spec.client_listen)}")
    if spec.http_listen:
        lines.append(f"http: {_quote(spec.http_listen)}")
    lines += ["", "jetstream {", f"  store_dir: {_quote(spec.store_dir)}", "}"]
    if spec.cluster_name or spec.routes:
        lines += ["", "cluster {"]
        if spec.cluster_name:
            lines.append(f"  name: {_quote(spec.cluster_name)}")
        lines.append(f"  listen: {_quote(spec.cluster_listen)}")
        if spec.routes:
            lines.append("  routes: [")
            lines += [f"    {_quote(route)}" for route in spec.routes]
            lines.append("  ]")
        lines.append("}")
    return "\n".join(lines) + "\n"


EXAMPLE = ConfigSpec(server_name="n1-c1", cluster_name="C1",
                     routes=("nats://host_b:6222", "nats://host_c:6222"))
