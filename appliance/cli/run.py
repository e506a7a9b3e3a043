"""`appliance run`: start the server (supervisor + workers), nats-server's flags accepted as-is.

With no arguments, the embedded default: a single JetStream server on 127.0.0.1:4222 storing under
the user's data dir (its options name 127.0.0.1 explicitly). With any flag or `-c`, nats-server's
defaults: without `-a` or a `listen`/`host` setting the server listens on 0.0.0.0, as nats-server
does (tools that start "nats-server" rely on it).
"""

from __future__ import annotations

import os
import sys

import click

from appliance import NATS_VERSION, __version__
from appliance.config import parse_run_args, resolve_run_options
from appliance.config.defaults import embedded_default_options, user_data_dir
from appliance.config.flags import USAGE
from appliance.config.options import ServerOptions
from appliance.errors import ConfigError
from appliance.log import stderr_is_journal

def options_for(argv: list[str]) -> tuple[ServerOptions, bool]:
    """Options for these flags; second item: only test the config (`-t`). Raises ConfigError."""
    args = parse_run_args(argv)
    # bare `appliance run` (what `make run` does): the embedded default of DESIGN.md §1, a single
    # JetStream server on 127.0.0.1:4222 storing under the user's data dir; with any flag or -c,
    # nats-server's defaults apply as they would to nats-server (host 0.0.0.0).
    defaults = embedded_default_options(data_dir=user_data_dir(os.environ)) if not argv else None
    options = resolve_run_options(args, pedantic=args.check_config, defaults=defaults)
    if args.config_file is None:
        options.http_host = options.host
    if args.logtime is None and "logtime" not in options.config_anchors and not options.log_file \
            and stderr_is_journal():
        options.logtime = False  # journald stamps each line itself; an explicit logtime wins
    return options, args.check_config


@click.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True,
                                 "help_option_names": []})
@click.argument("argv", nargs=-1, type=click.UNPROCESSED)
def run(argv: tuple[str, ...]) -> None:
    """Run the server. Takes nats-server's flags (-c, -p, -a, -n, -m, -js, -sd, --cluster, ...)."""
    flags = list(argv)
    try:
        args = parse_run_args(flags)
    except ConfigError as exc:
        _fail(exc)
    if args.show_help:
        click.echo(USAGE)
        sys.exit(0)
    if args.show_version:
        click.echo(f"appliance: v{__version__} (nats-server v{NATS_VERSION} protocol)")
        sys.exit(0)
    try:
        options, test_only = options_for(flags)
    except ConfigError as exc:
        _fail(exc)
    for warning in options.config_warnings:
        click.echo(f"appliance: warning: {warning}", err=True)
    if test_only:
        click.echo(f"appliance: configuration file {options.config_file} test is successful")
        sys.exit(0)
    from appliance.supervisor.supervisor import run_supervisor

    sys.exit(run_supervisor(options, reload_options=lambda: options_for(flags)[0]))


def _fail(exc: ConfigError) -> None:
    for problem in exc.problems:
        click.echo(f"appliance: {problem}", err=True)
    sys.exit(1)
