"""`appliance consumer cluster step-down STREAM CONSUMER`: move a consumer's RAFT group leadership.

Speaks `$JS.API.CONSUMER.LEADER.STEPDOWN.<stream>.<consumer>` and prints natscli's time-stamped lines
(`Requesting leader step down of "n1-c1" in a 3 peer RAFT group`, `New leader elected "n2-c1"`),
then the consumer's info with its Cluster Information.
"""

from __future__ import annotations

from datetime import UTC, datetime

import click
from nats.aio.client import Client

from appliance.cli import jsapi
from appliance.cli.render_consumer import consumer_info_text
from appliance.cli.jsapi import API_NAME, CommandError, Connection, JsonDict, api_request, connection_options
from appliance.cli.stream_cluster import await_new_leader, log_line

API = "$JS.API.CONSUMER"


@click.group()
def cluster() -> None:
    """Manage a clustered consumer's RAFT group."""


@cluster.command("step-down")
@click.argument("stream", type=API_NAME)
@click.argument("name", type=API_NAME)
@click.option("--preferred", default=None, help="Ask for this server as the new leader (2.11+).")
@click.option("--json", "as_json", is_flag=True, help="Print the consumer's JSON info afterwards.")
@connection_options
def step_down(stream: str, name: str, preferred: str | None, as_json: bool, conn: Connection) -> None:
    """Force a new leader election for a consumer."""

    async def info(client: Client) -> JsonDict:
        return await api_request(client, f"{API}.INFO.{stream}.{name}", None, timeout_s=conn.timeout_s)

    async def verb(client: Client) -> None:
        group = (await info(client)).get("cluster") or {}
        if not group.get("replicas"):
            raise CommandError(f'consumer "{stream}" > "{name}" is not clustered')
        leader = group.get("leader", "")
        if not leader:
            raise CommandError("consumer has no current leader")
        peers = len(group["replicas"]) + 1
        log_line(f'Requesting leader step down of "{leader}" in a {peers} peer RAFT group')
        body = {"placement": {"preferred": preferred}} if preferred else None
        await api_request(client, f"{API}.LEADER.STEPDOWN.{stream}.{name}", body, timeout_s=conn.timeout_s)
        after = await await_new_leader(lambda: info(client), leader, "Consumer")
        click.echo()
        if as_json:
            jsapi.print_json(after)
        else:
            click.echo(consumer_info_text(after, tz=None, now=datetime.now(UTC)))

    jsapi.run(verb, conn)
