"""`appliance stream cluster step-down|peer-remove`: move or shrink a stream's RAFT group.

Speaks `$JS.API.STREAM.LEADER.STEPDOWN.<s>` and `$JS.API.STREAM.PEER.REMOVE.<s>`, printing the
seeds' time-stamped progress lines (`Requesting leader step down of "n1-c1" in a 3 peer RAFT
group`, `New leader elected "n4-c1"`, `Removing peer "n4-c1"`, `Requested removal of peer ...`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime

import click
from nats.aio.client import Client

from appliance import limits
from appliance.cli import jsapi, prompts
from appliance.cli.jsapi import (
    API_NAME,
    ApiError,
    CommandError,
    Connection,
    JsonDict,
    api_request,
    connection_options,
)
from appliance.cli.render_stream import stream_info_text

API = "$JS.API.STREAM"


def log_line(text: str) -> None:
    """A progress line prefixed with the local wall-clock time, as Go's log with Ltime."""
    click.echo(f"{datetime.now().strftime('%H:%M:%S')} {text}")


@click.group()
def cluster() -> None:
    """Manage a clustered stream's RAFT group."""


async def _info(client: Client, name: str, conn: Connection) -> JsonDict:
    return await api_request(client, f"{API}.INFO.{name}", None, timeout_s=conn.timeout_s)


@cluster.command("step-down")
@click.argument("name", type=API_NAME)
@click.option("--preferred", default=None, help="Ask for this server as the new leader (2.11+).")
@click.option("--json", "as_json", is_flag=True, help="Print the stream's JSON info afterwards.")
@connection_options
def step_down(name: str, preferred: str | None, as_json: bool, conn: Connection) -> None:
    """Force a new leader election for a stream."""

    async def verb(client: Client) -> None:
        info = await _info(client, name, conn)
        group = info.get("cluster") or {}
        if not group.get("replicas"):
            raise CommandError(f'stream "{name}" is not clustered')
        leader = group.get("leader", "")
        if not leader:
            raise CommandError(f'stream "{name}" has no current leader')
        peers = len(group["replicas"]) + 1
        log_line(f'Requesting leader step down of "{leader}" in a {peers} peer RAFT group')
        body = {"placement": {"preferred": preferred}} if preferred else None
        await api_request(client, f"{API}.LEADER.STEPDOWN.{name}", body, timeout_s=conn.timeout_s)
        info = await await_new_leader(lambda: _info(client, name, conn), leader, "Stream")
        click.echo()
        if as_json:
            jsapi.print_json(info)
        else:
            click.echo(stream_info_text(info, tz=None))

    jsapi.run(verb, conn)


async def await_new_leader(fetch: Callable[[], Awaitable[JsonDict]], old_leader: str, what: str) -> JsonDict:
    """Poll `fetch` (a stream's or consumer's info) until its group reports another leader, as natscli
    does; prints natscli's lines. `what` is "Stream" or "Consumer"."""
    info: JsonDict = {}
    for _ in range(limits.CLI_STEPDOWN_POLLS_MAX):
        await asyncio.sleep(limits.CLI_STEPDOWN_POLL_S)
        try:
            info = await fetch()
        except (ApiError, CommandError) as exc:
            log_line(f"Failed to retrieve {what} State: {exc}")
            continue
        leader = (info.get("cluster") or {}).get("leader", "")
        if not leader:
            log_line("No leader elected")
        elif leader != old_leader:
            log_line(f'New leader elected "{leader}"')
            return info
    if not info:
        raise CommandError(f"{what.lower()} did not elect a new leader in time")
    log_line(f"Leader did not change after {limits.CLI_STEPDOWN_POLLS_MAX * limits.CLI_STEPDOWN_POLL_S:.1f}s")
    return info


@cluster.command("peer-remove")
@click.argument("name", type=API_NAME)
@click.argument("peer", required=False)
@connection_options
def peer_remove(name: str, peer: str | None, conn: Connection) -> None:
    """Remove PEER (a server name) from the stream's group; JetStream picks a replacement.

    Without PEER: on a terminal, choose one of the stream's peers; otherwise they are listed and
    the verb fails (a script never waits for an answer)."""

    async def verb(client: Client) -> None:
        chosen = peer or await _choose_peer(client, name, conn)
        log_line(f'Removing peer "{chosen}"')
        await api_request(client, f"{API}.PEER.REMOVE.{name}", {"peer": chosen}, timeout_s=conn.timeout_s)
        log_line(f'Requested removal of peer "{chosen}"')

    jsapi.run(verb, conn)


async def _choose_peer(client: Client, name: str, conn: Connection) -> str:
    group = (await _info(client, name, conn)).get("cluster") or {}
    peers = [str(group["leader"])] if group.get("leader") else []
    peers += [str(replica["name"]) for replica in group.get("replicas") or []]
    if not peers:
        raise CommandError(f'stream "{name}" is not clustered')
    peers.sort()
    if not prompts.on_terminal():
        raise CommandError(f"a peer is required (not a terminal); the peers of stream {name}: {', '.join(peers)}")
    return str(click.prompt("? Select a Peer", type=click.Choice(peers), show_choices=True))
