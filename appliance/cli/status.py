"""`appliance status`: the health of the local server, from its supervisor's control socket.

Exit codes: 0 healthy, 1 degraded (a worker starting, restarting, late or in lame duck mode),
2 down (no worker serves, the supervisor is stopping, or it cannot be reached within
limits.STATUS_CLIENT_TIMEOUT_S). The supervisor answers on its own, so this works while workers
are wedged. Which socket: `--socket PATH`, else the rule of appliance/supervisor/control.py for
`--port` or the port of `-c FILE`; with none of these, the one supervisor registered on this host
(appliance/supervisor/registry.py). Several registered: exit 2 with the list and how to choose;
none: exit 2 saying that no server runs.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

import click

from appliance import limits
from appliance.errors import BrokenError, ConfigError
from appliance.supervisor.control import JsonObject, find_socket_path, request, run_dirs
from appliance.supervisor.registry import running

EXIT_DOWN = 2
EXIT_CODES = {"ok": 0, "degraded": 1, "down": 2}


@click.command()
@click.option("-c", "--config", "config_file", type=click.Path(dir_okay=False, path_type=Path),
              help="The server's config file (its client port names the control socket).")
@click.option("-p", "--port", type=int, help="The server's client port (default: the one server registered here).")
@click.option("--socket", "socket_path", type=click.Path(path_type=Path), help="The control socket itself.")
@click.option("--json", "as_json", is_flag=True, help="Print the supervisor's answer as JSON.")
@click.option("--timeout", "timeout_s", type=float, default=limits.STATUS_CLIENT_TIMEOUT_S, show_default=True,
              help="Seconds to wait for the supervisor.")
def status(config_file: Path | None, port: int | None, socket_path: Path | None, as_json: bool,
           timeout_s: float) -> None:
    """Show the health of the local server; exit 0 healthy, 1 degraded, 2 down."""
    try:
        path = socket_path or (find_socket_path(_port(config_file, port)) if config_file or port is not None
                               else _registered_socket(as_json=as_json))
    except ConfigError as exc:
        for problem in exc.problems:
            click.echo(f"appliance: {problem}", err=True)
        sys.exit(EXIT_DOWN)
    except OSError as exc:
        click.echo(f"appliance: {exc}", err=True)
        sys.exit(EXIT_DOWN)
    try:
        answer = request(path, {"request": "status"}, timeout_s=timeout_s)
    except BrokenError as exc:
        _print_down(str(exc), as_json=as_json, path=path)
        sys.exit(EXIT_DOWN)
    if "error" in answer:
        _print_down(f"supervisor at {path} refused: {answer['error']}", as_json=as_json, path=path)
        sys.exit(EXIT_DOWN)
    click.echo(json.dumps(answer, indent=2) if as_json else render(answer))
    sys.exit(EXIT_CODES.get(str(answer.get("health")), EXIT_DOWN))


def control_socket_for(config_file: Path | None, port: int | None, socket_path: Path | None) -> Path:
    """The control socket `appliance status` would ask (exits 2 when it cannot tell), for other verbs."""
    try:
        return socket_path or (find_socket_path(_port(config_file, port)) if config_file or port is not None
                               else _registered_socket(as_json=False))
    except ConfigError as exc:
        for problem in exc.problems:
            click.echo(f"appliance: {problem}", err=True)
        sys.exit(EXIT_DOWN)
    except OSError as exc:
        click.echo(f"appliance: {exc}", err=True)
        sys.exit(EXIT_DOWN)


def _registered_socket(*, as_json: bool) -> Path:
    """The control socket of the only supervisor registered on this host; exits 2 when there is
    none or more than one (listing them)."""
    servers = running()
    if len(servers) == 1:
        return Path(servers[0].control_socket)
    if not servers:
        searched = ", ".join(str(d) for d in run_dirs())
        reason = f"no appliance server runs on this host (no live registration in {searched})"
        if as_json:
            click.echo(json.dumps({"health": "down", "reasons": [reason], "servers": []}, indent=2))
        else:
            click.echo(f"Health: DOWN\n  - {reason}")
        sys.exit(EXIT_DOWN)
    choose = "choose one with -p PORT (its client port), -c FILE (its config) or --socket PATH"
    if as_json:
        click.echo(json.dumps({"health": "unknown", "reasons": [f"{len(servers)} servers run: {choose}"],
                               "servers": [asdict(server) for server in servers]}, indent=2))
    else:
        click.echo(f"{len(servers)} appliance servers run on this host; {choose}:")
        click.echo("\n".join(f"  {server.describe()}" for server in servers))
    sys.exit(EXIT_DOWN)


def _port(config_file: Path | None, port: int | None) -> int:
    if port is not None:
        return port
    assert config_file is not None, "called with -p or -c"
    from appliance.config.load import load_config

    configured = load_config(str(config_file)).port
    if configured <= 0:
        raise ConfigError([f"{config_file}: the server uses a random client port; pass --socket"])
    return configured


def _print_down(reason: str, *, as_json: bool, path: Path) -> None:
    if as_json:
        click.echo(json.dumps({"health": "down", "reasons": [reason], "control_socket": str(path)}, indent=2))
    else:
        click.echo(f"Health: DOWN\n  - {reason}")


def render(answer: JsonObject) -> str:
    """The human view of a status answer (see appliance/supervisor/report.py for its shape)."""
    supervisor = _dict(answer.get("supervisor"))
    lines = [
        f"Server:     {answer.get('server_name')}",
        f"ID:         {answer.get('server_id')}",
        f"Version:    {answer.get('version')} (appliance {answer.get('appliance_version')})",
        f"Clients:    {answer.get('client_url')}" + (f"   Monitoring: {answer['http_url']}"
                                                      if answer.get("http_url") else ""),
        f"Uptime:     {_duration(_float(answer.get('uptime_s')))} (since {answer.get('start')})",
        (f"Supervisor: pid {supervisor.get('pid')}, {supervisor.get('state')}, "
         f"cpu {_float(supervisor.get('cpu_percent')):.1f}%, rss {_size(_int(supervisor.get('rss_bytes')))}, "
         f"restarts {supervisor.get('restarts_in_window')}/{supervisor.get('restart_budget')} "
         f"in {_float(supervisor.get('restart_window_s')):g}s"),
        "",
        _table([_dict(worker) for worker in _list(answer.get("workers"))]),
        "",
        *_routes([_dict(route) for route in _list(answer.get("routes"))]),
        *_jetstream(answer.get("jetstream")),
        f"Health: {str(answer.get('health')).upper()}",
    ]
    lines += [f"  - {reason}" for reason in _list(answer.get("reasons"))]
    return "\n".join(lines)


def _routes(routes: list[JsonObject]) -> list[str]:
    """One line per route: peer, state (for how long), rtt; nothing when not clustered."""
    if not routes:
        return []
    lines = ["Routes:"]
    for route in routes:
        rtt = route.get("rtt_ms")
        detail = f", rtt {_float(rtt):.3f}ms" if rtt is not None else ""
        reason = f" ({route['reason']})" if route.get("reason") and route.get("state") != "up" else ""
        peer = route.get("peer") or "?"
        lines.append(f"  {route.get('url')}  {peer}  {route.get('state')} for "
                     f"{_duration(_float(route.get('for_s')))}{detail}{reason}")
    return [*lines, ""]


def _jetstream(summary: object) -> list[str]:
    """Clustered JetStream from this server's view: meta leader, replicated groups held here and
    those without quorum, lagging or under-replicated; nothing unless JetStream runs clustered."""
    if not isinstance(summary, dict):
        return []
    leader = summary.get("meta_leader") or "none (no quorum)"
    problems = {key: _list(summary.get(key)) for key in ("no_quorum", "lagging", "under_replicated")}
    lines = ["JetStream cluster:", f"  Meta leader: {leader}",
             f"  RAFT groups held here: {summary.get('groups')}, without quorum: {len(problems['no_quorum'])}, "
             f"lagging: {len(problems['lagging'])}, under-replicated: {len(problems['under_replicated'])}"]
    for key, title in (("no_quorum", "Without quorum"), ("lagging", "Lagging"),
                       ("under_replicated", "Under-replicated")):
        lines += [f"  {title}: {item}" for item in problems[key]]
    return [*lines, ""]


_COLUMNS = ("#", "PID", "STATE", "CORE", "NODE", "CPU%", "RSS", "CONNS", "MSGS IN", "MSGS OUT", "HEARTBEAT",
            "RING", "RESTARTS")


def _table(workers: list[JsonObject]) -> str:
    rows = [_COLUMNS]
    for worker in workers:
        age = worker.get("heartbeat_age_s")
        rows.append((
            str(worker.get("index")), str(worker.get("pid") or "-"), str(worker.get("state")),
            str(worker.get("core")), str(worker.get("numa_node")), f"{_float(worker.get('cpu_percent')):.1f}",
            _size(_int(worker.get("rss_bytes"))), str(worker.get("connections")), str(worker.get("msgs_in")),
            str(worker.get("msgs_out")), "-" if age is None else f"{_float(age):.2f}s ago",
            f"{_float(worker.get('ring_fill')) * 100:.0f}%", str(worker.get("restarts")),
        ))
    widths = [max(len(row[column]) for row in rows) for column in range(len(_COLUMNS))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows)


def _duration(seconds: float) -> str:
    whole = int(seconds)
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    text = f"{hours}h{minutes:02d}m{secs:02d}s" if hours or days else f"{minutes}m{secs:02d}s"
    return f"{days}d{text}" if days else text


def _size(size_bytes: int) -> str:
    value = float(size_bytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _dict(value: object) -> JsonObject:
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list[object]:
    return value if isinstance(value, list) else []


def _float(value: object) -> float:
    return float(value) if isinstance(value, (int, float)) else 0.0


def _int(value: object) -> int:
    return int(value) if isinstance(value, (int, float)) else 0
