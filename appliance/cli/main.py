"""The `appliance` command: a click group whose commands live one module each, loaded on use.

Loading on use keeps `appliance status` fast and working even when heavy modules are broken.
"""

from __future__ import annotations

import importlib

import click

# command name -> "module:attribute" of a click.Command
COMMANDS: dict[str, str] = {
    "store": "appliance.cli.store:store",
    "run": "appliance.cli.run:run",
    "check-config": "appliance.cli.check_config:check_config",
    "sim": "appliance.cli.sim:sim",
    "chaos": "appliance.cli.chaos:chaos",
    "status": "appliance.cli.status:status",
    "bench": "appliance.cli.bench:bench",
    "stream": "appliance.cli.stream:stream",
    "consumer": "appliance.cli.consumer:consumer",
    "pub": "appliance.cli.core_verbs:pub",
    "sub": "appliance.cli.core_verbs:sub",
    "req": "appliance.cli.core_verbs:req",
    "server": "appliance.cli.server_verbs:server",
    "service": "appliance.cli.service:service",
    "reload": "appliance.cli.reload:reload",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, _, attribute = target.partition(":")
        command = getattr(importlib.import_module(module_name), attribute)
        assert isinstance(command, click.Command)
        return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """appliance: a JetStream-clustering NATS server."""
