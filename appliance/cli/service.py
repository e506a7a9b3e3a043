"""`appliance service install|uninstall`: appliance as a systemd service (appliance/cli/service_install.py).

    appliance service install [--config FILE | --name N --cluster C --route URL ...] [--store-dir DIR]
                              [--user NAME] [--root DIR] [--force] [--dry-run]
    appliance service uninstall [--purge] [--root DIR] [--dry-run]
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from appliance.cli.service_config import ConfigSpec, render_config
from appliance.cli.service_install import InstallError, apply, install_plan, this_host, uninstall_plan
from appliance.cli.service_unit import DEFAULT_USER, STATE_DIR
from appliance.config import options_from_text
from appliance.errors import ConfigError


def default_executable() -> str:
    """The `appliance` script next to the running interpreter (a venv's bin/), else argv[0]."""
    beside = Path(sys.executable).parent / "appliance"
    return str(beside if beside.exists() else Path(sys.argv[0]).resolve())


@click.group()
def service() -> None:
    """Install or remove appliance as a systemd service."""


@service.command()
@click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Install this config file (else one is written from the flags below).")
@click.option("--name", "server_name", default="", help="server_name of the generated config.")
@click.option("--cluster", "cluster_name", default="", help="Cluster name of the generated config.")
@click.option("--route", "routes", multiple=True, help="A route URL (repeat), e.g. nats://host_b:6222.")
@click.option("--listen", default="0.0.0.0:4222", show_default=True, help="Client listen address.")
@click.option("--http", "http_listen", default="127.0.0.1:8222", show_default=True,
              help="Monitoring listen address ('' for none).")
@click.option("--cluster-listen", default="0.0.0.0:6222", show_default=True, help="Route listen address.")
@click.option("--store-dir", default=STATE_DIR, show_default=True, help="JetStream store directory.")
@click.option("--user", default=DEFAULT_USER, show_default=True, help="System user the service runs as.")
@click.option("--executable", default=None, help="The appliance command ExecStart= runs.")
@click.option("--root", type=click.Path(file_okay=False, path_type=Path), default=Path("/"), show_default=True,
              help="Install into this root (an image, a test dir) instead of the running system.")
@click.option("--force", is_flag=True, help="Replace a config that differs (the old one is kept as .bak).")
@click.option("--dry-run", is_flag=True, help="Say what would be done; change nothing.")
def install(config_file: str | None, server_name: str, cluster_name: str, routes: tuple[str, ...], listen: str,
            http_listen: str, cluster_listen: str, store_dir: str, user: str, executable: str | None, root: Path,
            force: bool, dry_run: bool) -> None:
    """Install the unit, its user and directories and a config; enable and start it."""
    if config_file is not None:
        if server_name or cluster_name or routes:
            _fail("--config and --name/--cluster/--route do not go together")
        text = Path(config_file).read_text()
    else:
        text = render_config(ConfigSpec(server_name=server_name, client_listen=listen, http_listen=http_listen,
                                        store_dir=store_dir, cluster_name=cluster_name,
                                        cluster_listen=cluster_listen, routes=routes))
    try:  # the config is checked as `appliance check-config` would, before anything is installed
        options = options_from_text(text, filename=config_file or "appliance.conf", pedantic=True)
    except ConfigError as exc:
        _fail("the config does not load:\n" + "\n".join(exc.problems))
    if config_file is not None and options.jetstream.store_dir:
        store_dir = options.jetstream.store_dir
    host = this_host(root)
    try:
        steps = install_plan(host, config_text=text, store_dir=store_dir, user=user,
                             executable=executable or default_executable())
        _report(apply(host, steps, force=force, dry_run=dry_run))
    except (InstallError, OSError) as exc:
        _fail(str(exc))


@service.command()
@click.option("--purge", is_flag=True, help="Also remove /etc/appliance and the store directory.")
@click.option("--store-dir", default=STATE_DIR, show_default=True, help="The store directory --purge removes.")
@click.option("--root", type=click.Path(file_okay=False, path_type=Path), default=Path("/"), show_default=True)
@click.option("--dry-run", is_flag=True, help="Say what would be done; change nothing.")
def uninstall(purge: bool, store_dir: str, root: Path, dry_run: bool) -> None:
    """Stop and disable the service and remove its unit (and with --purge its config and store)."""
    host = this_host(root)
    try:
        _report(apply(host, uninstall_plan(host, purge=purge, store_dir=store_dir), force=False, dry_run=dry_run))
    except (InstallError, OSError) as exc:
        _fail(str(exc))


def _report(lines: list[str]) -> None:
    for line in lines:
        click.echo(line)


def _fail(message: str) -> None:
    click.echo(f"appliance: {message}", err=True)
    sys.exit(1)
