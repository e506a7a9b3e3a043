"""`appliance check-config FILE`: the `nats-server -t -c FILE` of appliance.

Prints `configuration file FILE test is successful` and exits 0, or prints every problem as
`appliance: file:line:col: text` (one per line, on stderr) and exits 1. Like `nats-server -t`,
warnings (an integer where a duration belongs, a duplicate route, ...) count as problems; the
cross-field checks nats-server only makes at start-up are made here too.
"""

from __future__ import annotations

import sys

import click

from appliance.config import load_config
from appliance.errors import ConfigError

EXIT_INVALID = 1


@click.command("check-config")
@click.argument("file", type=click.Path(path_type=str))
def check_config(file: str) -> None:
    """Test the configuration FILE and exit (like `nats-server -t -c FILE`)."""
    try:
        load_config(file, pedantic=True)
    except ConfigError as error:
        for problem in error.problems:
            click.echo(f"appliance: {problem}", err=True)
        sys.exit(EXIT_INVALID)
    click.echo(f"configuration file {file} test is successful")
