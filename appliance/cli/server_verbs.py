"""`appliance server ls | report jetstream | raft step-down | raft peer-remove`: system-account verbs.

They need a user of the system account (as in nats-server): `server ls` gathers
`$SYS.REQ.SERVER.PING` answers, `server report jetstream` `$SYS.REQ.SERVER.PING.JSZ {"raft":true}`
answers; the raft verbs find the meta leader with
`$SYS.REQ.SERVER.PING.JSZ {"leader_only":true}` and then call `$JS.API.META.LEADER.STEPDOWN`
or `$JS.API.SERVER.REMOVE`.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

import click
from nats.aio.client import Client

from appliance import limits
from appliance.cli import jsapi
from appliance.cli.jsapi import CommandError, Connection, JsonDict, api_request, connection_options
from appliance.cli.render_report import SORTS, jetstream_report
from appliance.cli.render_server import meta_group, server_list_table
from appliance.cli.stream_cluster import log_line

NO_SYSTEM_ANSWER = (
    "no results received, ensure the account used has system privileges and appropriate permissions"
)


@click.group()
def server() -> None:
    """Server and cluster administration (system account)."""


@server.command("ls")
@click.argument("expect", type=click.IntRange(min=0), default=0)
@click.option("--json", "as_json", is_flag=True, help="Print the servers' JSON answers.")
@connection_options
def ls(expect: int, as_json: bool, conn: Connection) -> None:
    """List the servers that answer `$SYS.REQ.SERVER.PING` (stop early after EXPECT answers)."""

    async def verb(client: Client) -> None:
        answers = await gather(client, "$SYS.REQ.SERVER.PING", b"", expect=expect, timeout_s=conn.timeout_s)
        if not answers:
            raise CommandError(NO_SYSTEM_ANSWER)
        if as_json:
            jsapi.print_json([answer for answer, _ in answers])
        else:
            click.echo(server_list_table(answers), nl=False)

    jsapi.run(verb, conn)


async def gather(
    client: Client, subject: str, payload: bytes, *, expect: int, timeout_s: float
) -> list[tuple[JsonDict, int]]:
    """Answers to one request from many servers, with their round-trip times in ns.

    Stops at `expect` answers, at `timeout_s`, or once no answer came for CLI_GATHER_QUIET_S
    after the first one.
    """
    inbox = client.new_inbox()
    subscription = await client.subscribe(inbox, pending_msgs_limit=limits.CLI_SUB_PENDING_MSGS_MAX)
    started = time.perf_counter_ns()
    deadline = time.monotonic() + timeout_s
    answers: list[tuple[JsonDict, int]] = []
    try:
        await client.publish(subject, payload, reply=inbox)
        while expect == 0 or len(answers) < expect:
            wait_s = deadline - time.monotonic()
            if answers:
                wait_s = min(wait_s, limits.CLI_GATHER_QUIET_S)
            if wait_s <= 0:
                break
            try:
                message = await subscription.next_msg(timeout=wait_s)
            except (TimeoutError, jsapi.NatsTimeout):
                break
            status = (message.headers or {}).get("Status", "")
            if status == "503":
                break  # no responders: nobody in this account listens (a user without system privileges)
            if status:
                continue
            answers.append((_decode(message.data), time.perf_counter_ns() - started))
    finally:
        await subscription.unsubscribe()
    return answers


def _decode(data: bytes) -> JsonDict:
    try:
        answer = json.loads(data)
    except ValueError as exc:
        raise CommandError(f"invalid JSON answer: {data[:200]!r}") from exc
    if not isinstance(answer, dict):
        raise CommandError(f"unexpected answer: {data[:200]!r}")
    return answer


@server.group("raft")
def raft() -> None:
    """The JetStream meta group (its RAFT group)."""


async def meta_leader(client: Client, conn: Connection) -> JsonDict:
    answers = await gather(
        client,
        "$SYS.REQ.SERVER.PING.JSZ",
        jsapi.encode({"leader_only": True}),
        expect=1,
        timeout_s=conn.timeout_s,
    )
    if not answers:
        raise CommandError(
            "did not receive a response from the meta leader, "
            "ensure the account used has system privileges and appropriate permissions"
        )
    return meta_group(answers[0][0])


@raft.command("step-down")
@click.option("--preferred", default=None, help="Ask for this server as the new meta leader (2.11+).")
@connection_options
def raft_step_down(preferred: str | None, conn: Connection) -> None:
    """Force a new election of the JetStream meta leader."""
    outcome: list[bool] = []

    async def verb(client: Client) -> None:
        meta = await meta_leader(client, conn)
        leader = meta.get("leader", "")
        if not leader:
            raise CommandError("cluster has no current leader")
        peers = len(meta.get("replicas") or []) + 1
        log_line(f'Requesting leader step down of "{leader}" in a {peers} peer RAFT group')
        body = {"placement": {"preferred": preferred}} if preferred else None
        await api_request(client, "$JS.API.META.LEADER.STEPDOWN", body, timeout_s=conn.timeout_s)
        for _ in range(limits.CLI_STEPDOWN_POLLS_MAX):
            await asyncio.sleep(limits.CLI_STEPDOWN_POLL_S)
            try:
                current = (await meta_leader(client, conn)).get("leader", "")
            except CommandError as exc:
                log_line(f"Failed to retrieve Cluster State: {exc}")
                continue
            if current and current != leader:
                log_line(f'New leader elected "{current}"')
                outcome.append(True)
                return
        log_line(
            f"Leader did not change after {limits.CLI_STEPDOWN_POLLS_MAX * limits.CLI_STEPDOWN_POLL_S:.1f}s"
        )

    jsapi.run(verb, conn)
    if not outcome:
        sys.exit(1)


@raft.command("peer-remove")
@click.argument("peer")
@click.option("-f", "--force", is_flag=True, help="Accepted for natscli compatibility; never prompts.")
@connection_options
def raft_peer_remove(peer: str, force: bool, conn: Connection) -> None:
    """Evict PEER (server name or peer id) from the meta group for good: it leaves every group."""

    async def verb(client: Client) -> None:
        meta = await meta_leader(client, conn)
        found = [
            replica
            for replica in meta.get("replicas") or []
            if peer in (replica.get("name"), replica.get("peer"))
        ]
        if not found:
            raise CommandError(f"did not find a replica named {peer}")
        name = str(found[0].get("name", peer))
        log_line(f'Removing peer "{name}"')
        body = {"peer_id": found[0]["peer"]} if found[0].get("peer") else {"peer": name}
        await api_request(client, "$JS.API.SERVER.REMOVE", body, timeout_s=conn.timeout_s)
        log_line(f'Requested removal of peer "{name}"')

    jsapi.run(verb, conn)


@server.group("report")
def report() -> None:
    """Reports gathered from every server (system account)."""


@click.command("jetstream")
@click.argument("limit", type=click.IntRange(min=0), default=0)
@click.option("--account", default="", help="Produce the report for a specific account.")
@click.option("--sort", type=click.Choice(SORTS), default="cluster", show_default=True,
              help="Sort by a specific property.")
@click.option("--compact/--no-compact", default=True, show_default=True, help="Compact server names.")
@click.option("-l", "--leaders", is_flag=True, help="Show details about cluster leaders.")
@click.option("--json", "as_json", is_flag=True, help="Print the servers' JSZ answers.")
@connection_options
def report_jetstream(
    limit: int, account: str, sort: str, compact: bool, leaders: bool, as_json: bool, conn: Connection
) -> None:
    """Per server: streams, consumers, messages, bytes, API requests; and the meta group (natscli's
    `server report jetstream`, from `$SYS.REQ.SERVER.PING.JSZ`; stop early after LIMIT answers)."""
    options: JsonDict = {"raft": True}
    if account:
        options = {"account": account, "streams": True, "consumer": True, "limit": 10000, "raft": True}

    async def verb(client: Client) -> None:
        answers = await gather(
            client, "$SYS.REQ.SERVER.PING.JSZ", jsapi.encode(options), expect=limit, timeout_s=conn.timeout_s
        )
        if not answers:
            raise CommandError(NO_SYSTEM_ANSWER)
        found = [answer for answer, _ in answers]
        if as_json:
            jsapi.print_json(found)
        else:
            text = jetstream_report(found, account=account, sort=sort, compact=compact, leaders=leaders)
            click.echo(text, nl=False)

    jsapi.run(verb, conn)


for _name in ("jetstream", "jsz", "js"):  # natscli's aliases
    report.add_command(report_jetstream, _name)
