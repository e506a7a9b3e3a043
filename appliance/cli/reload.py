"""`appliance reload`: re-read the running server's config (what SIGHUP and `systemctl reload` do), and say
what changed or why nothing did. Finds the server as `appliance status` does (-p, -c, --socket, or the
one registered on this host)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from appliance.cli.status import control_socket_for
from appliance.errors import BrokenError

RELOAD_TIMEOUT_S = 30.0  # the supervisor reads and checks the whole config file before it answers


@click.command()
@click.option("-c", "--config", "config_file", type=click.Path(dir_okay=False, path_type=Path),
              help="The server's config file (its client port names the control socket).")
@click.option("-p", "--port", type=int, help="The server's client port (default: the one server registered here).")
@click.option("--socket", "socket_path", type=click.Path(path_type=Path), help="The control socket itself.")
def reload(config_file: Path | None, port: int | None, socket_path: Path | None) -> None:
    """Reload the server's configuration (as SIGHUP); exit 0 when applied, 1 when refused."""
    from appliance.supervisor.control import request

    path = control_socket_for(config_file, port, socket_path)
    try:
        answer = request(path, {"request": "reload"}, timeout_s=RELOAD_TIMEOUT_S)
    except BrokenError as exc:
        click.echo(f"appliance: {exc}", err=True)
        sys.exit(2)
    if "error" in answer:
        click.echo(f"appliance: Failed to reload server configuration: {answer['error']}", err=True)
        sys.exit(1)
    changes = answer.get("reloaded")
    lines = [str(line) for line in changes] if isinstance(changes, list) else []
    click.echo("\n".join(lines) if lines else "Reloaded server configuration (nothing changed)")
