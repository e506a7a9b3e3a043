"""`appliance stream add|edit|info|ls|rm|purge|get|view|cluster|backup|restore`: the `nats stream` verbs.

Each verb is a few standard `$JS.API.STREAM.*` requests through nats-py and a rendering from
render_stream; `--json` prints the API's own JSON. `add` on a terminal asks natscli's questions
for what its flags left out (stream_questions.py); nothing else prompts: destructive verbs need `-f`.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import click
from nats.aio.client import Client

from appliance.cli import jsapi, prompts
from appliance.cli.format import local_time, parse_go_time
from appliance.cli.jsapi import API_NAME, CommandError, Connection, JsonDict, api_request, connection_options
from appliance.cli.render_message import parse_header_block, stored_message_text, view_message_text
from appliance.cli.render_stream import stream_info_text, stream_list_table
from appliance.cli.stream_backup import backup, restore
from appliance.cli.stream_cluster import cluster
from appliance.cli.stream_config import (
    FlagError,
    StreamFlags,
    edited_stream_config,
    missing_flags,
    new_stream_config,
)
from appliance.cli.stream_questions import next_stream_question

API = "$JS.API.STREAM"


def config_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The StreamConfig flags shared by add and edit."""
    options = [
        click.option("--subjects", multiple=True, help="Subjects (repeat or comma separate)."),
        click.option("--description", default=None),
        click.option("--replicas", type=click.IntRange(1, 5), default=None),
        click.option("--storage", type=click.Choice(["file", "memory"]), default=None),
        click.option("--retention", type=click.Choice(["limits", "interest", "workqueue"]), default=None),
        click.option("--discard", type=click.Choice(["old", "new"]), default=None),
        click.option("--max-msgs", type=int, default=None, help="-1 for unlimited."),
        click.option("--max-bytes", default=None, help="e.g. 1GB, -1 for unlimited."),
        click.option("--max-age", default=None, help="e.g. 1d, 12h, 0 for unlimited."),
        click.option("--max-msg-size", default=None, help="e.g. 1MB, -1 for unlimited."),
        click.option("--max-msgs-per-subject", type=int, default=None),
        click.option("--max-consumers", type=int, default=None),
        click.option("--dupe-window", default=None, help="Duplicate tracking window, e.g. 2m."),
        click.option("--allow-rollup/--no-allow-rollup", default=None),
        click.option("--deny-delete/--allow-delete", default=None),
        click.option("--deny-purge/--allow-purge", default=None),
        click.option("--allow-direct/--no-allow-direct", default=None),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def _flags(values: dict[str, Any]) -> StreamFlags:
    return StreamFlags(**{key: values[key] for key in StreamFlags.__slots__})


def _now() -> datetime:
    return datetime.now(UTC)


async def stream_info(client: Client, name: str, conn: Connection) -> JsonDict:
    return await api_request(client, f"{API}.INFO.{name}", None, timeout_s=conn.timeout_s)


def echo_info(info: JsonDict, *, as_json: bool, state_only: bool = False) -> None:
    if as_json:
        jsapi.print_json(info)
    else:
        click.echo(stream_info_text(info, tz=None, state_only=state_only))


@click.group()
def stream() -> None:
    """JetStream stream management (the `nats stream` verbs)."""


stream.add_command(cluster)
stream.add_command(backup)
stream.add_command(restore)


@stream.command("add")
@click.argument("name", type=API_NAME)
@config_options
@click.option(
    "--defaults", "use_defaults", is_flag=True, help="Take natscli's defaults for what is not given."
)
@click.option("--json", "as_json", is_flag=True, help="Print the API's JSON answer.")
@connection_options
def add(name: str, use_defaults: bool, as_json: bool, conn: Connection, **values: Any) -> None:
    """Create a stream: `stream add ORDERS --subjects 'orders.>' --replicas 3 --storage file`."""
    try:
        flags = _flags(values)
        if not use_defaults and missing_flags(flags) and prompts.on_terminal():
            flags = prompts.ask_missing(flags, next_stream_question)  # natscli's questions
        config = new_stream_config(name, flags, use_defaults=use_defaults)
    except FlagError as exc:
        jsapi.fail(str(exc))

    async def verb(client: Client) -> None:
        info = await api_request(client, f"{API}.CREATE.{name}", config, timeout_s=conn.timeout_s)
        if as_json:
            jsapi.print_json(info)
            return
        click.echo(f"Stream {name} was created\n")
        echo_info(info, as_json=False)

    jsapi.run(verb, conn)


@stream.command("edit")
@click.argument("name", type=API_NAME)
@config_options
@click.option("-f", "--force", is_flag=True, help="Accepted for natscli compatibility; edit never prompts.")
@click.option("--json", "as_json", is_flag=True, help="Print the API's JSON answer.")
@connection_options
def edit(name: str, force: bool, as_json: bool, conn: Connection, **values: Any) -> None:
    """Change a stream's configuration; only the given flags change."""
    flags = _flags(values)

    async def verb(client: Client) -> None:
        current = (await stream_info(client, name, conn))["config"]
        try:
            config = edited_stream_config(current, flags)
        except FlagError as exc:
            raise CommandError(str(exc)) from exc
        info = await api_request(client, f"{API}.UPDATE.{name}", config, timeout_s=conn.timeout_s)
        if as_json:
            jsapi.print_json(info)
            return
        click.echo(f"Stream {name} was updated\n")
        echo_info(info, as_json=False)

    jsapi.run(verb, conn)


@stream.command("info")
@click.argument("name", type=API_NAME)
@click.option("--json", "as_json", is_flag=True, help="Print the API's JSON answer.")
@click.option("--state", "state_only", is_flag=True, help="Only the State section.")
@connection_options
def info(name: str, as_json: bool, state_only: bool, conn: Connection) -> None:
    """Configuration, Cluster Information and State of a stream."""

    async def verb(client: Client) -> None:
        echo_info(await stream_info(client, name, conn), as_json=as_json, state_only=state_only)

    jsapi.run(verb, conn)


@stream.command("ls")
@click.option("--names", "-n", "names_only", is_flag=True, help="Only the names.")
@click.option("--subject", default=None, help="Only streams whose subjects match.")
@click.option("--json", "as_json", is_flag=True, help="Print the API's JSON (infos, or names with --names).")
@connection_options
def ls(names_only: bool, subject: str | None, as_json: bool, conn: Connection) -> None:
    """List streams: a table, or names with --names."""
    body = {"subject": subject} if subject else None

    async def verb(client: Client) -> None:
        if names_only:
            names, _ = await jsapi.paged(
                client, f"{API}.NAMES", "streams", timeout_s=conn.timeout_s, body=body
            )
            if as_json:
                jsapi.print_json(names)
            for stream_name in [] if as_json else names:
                click.echo(stream_name)
            return
        infos, missing = await jsapi.paged(
            client, f"{API}.LIST", "streams", timeout_s=conn.timeout_s, body=body
        )
        if as_json:
            jsapi.print_json(infos)
        elif not infos and not missing:
            click.echo("No Streams defined")
        else:
            click.echo(stream_list_table(infos, tz=None, now=_now()))
            if missing:
                click.echo("Inaccessible Streams: " + ", ".join(sorted(missing)))

    jsapi.run(verb, conn)


@stream.command("rm")
@click.argument("name", type=API_NAME)
@click.option("-f", "--force", is_flag=True, help="Delete without asking (required: no prompts).")
@connection_options
def rm(name: str, force: bool, conn: Connection) -> None:
    """Delete a stream and all its messages."""
    if not force:
        jsapi.fail(f"refusing to delete Stream {name} without --force (this CLI never prompts)")

    async def verb(client: Client) -> None:
        await api_request(client, f"{API}.DELETE.{name}", None, timeout_s=conn.timeout_s)

    jsapi.run(verb, conn)


@stream.command("purge")
@click.argument("name", type=API_NAME)
@click.option("--subject", default=None, help="Only messages on this subject.")
@click.option("--keep", type=click.IntRange(min=1), default=None, help="Keep the last N messages.")
@click.option(
    "--seq", type=click.IntRange(min=1), default=None, help="Purge up to, not including, this sequence."
)
@click.option("-f", "--force", is_flag=True, help="Purge without asking (required: no prompts).")
@click.option("--json", "as_json", is_flag=True, help="Print the API's JSON answer.")
@connection_options
def purge(
    name: str,
    subject: str | None,
    keep: int | None,
    seq: int | None,
    force: bool,
    as_json: bool,
    conn: Connection,
) -> None:
    """Remove messages from a stream (all, per subject, keep N, below a sequence)."""
    if not force:
        jsapi.fail(f"refusing to purge Stream {name} without --force (this CLI never prompts)")
    if keep is not None and seq is not None:
        jsapi.fail("sequence and keep cannot be combined when purging")
    request = {key: value for key, value in (("filter", subject), ("keep", keep), ("seq", seq)) if value}

    async def verb(client: Client) -> None:
        answer = await api_request(client, f"{API}.PURGE.{name}", request or None, timeout_s=conn.timeout_s)
        if as_json:
            jsapi.print_json(answer)
            return
        click.echo(f"Purged {answer.get('purged', 0)} messages from {name}\n")
        echo_info(await stream_info(client, name, conn), as_json=False, state_only=True)

    jsapi.run(verb, conn)


@stream.command("get")
@click.argument("name", type=API_NAME)
@click.argument("seq", type=click.IntRange(min=1), required=False)
@click.option("--last-for", "last_for", default=None, help="The last message on this subject.")
@click.option("--json", "as_json", is_flag=True, help="Print the API's JSON answer.")
@connection_options
def get(name: str, seq: int | None, last_for: str | None, as_json: bool, conn: Connection) -> None:
    """One stored message, by sequence or as the last for a subject."""
    if (seq is None) == (last_for is None):
        jsapi.fail("give either a sequence or --last-for SUBJECT")
    request: JsonDict = {"seq": seq} if seq is not None else {"last_by_subj": last_for}

    async def verb(client: Client) -> None:
        answer = await api_request(client, f"{API}.MSG.GET.{name}", request, timeout_s=conn.timeout_s)
        if as_json:
            jsapi.print_json(answer)
            return
        click.echo(stored_message_text(name, answer["message"], now=_now()), nl=False)

    jsapi.run(verb, conn)


@stream.command("view")
@click.argument("name", type=API_NAME)
@click.option("--count", type=click.IntRange(min=1), default=10, show_default=True, help="Messages to show.")
@click.option("--id", "start_seq", type=click.IntRange(min=1), default=1, help="Start at this sequence.")
@click.option("--subject", default=">", show_default=True, help="Only messages on this subject.")
@connection_options
def view(name: str, count: int, start_seq: int, subject: str, conn: Connection) -> None:
    """Show stored messages in order (read-only: no consumer is created)."""

    async def verb(client: Client) -> None:
        seq, ended = start_seq, False
        for _ in range(count):
            request = {"seq": seq, "next_by_subj": subject}
            try:
                answer = await api_request(client, f"{API}.MSG.GET.{name}", request, timeout_s=conn.timeout_s)
            except jsapi.ApiError as exc:
                if exc.err_code != 10037:  # no message found: the end of the data
                    raise
                ended = True
                break
            message = answer["message"]
            moment = parse_go_time(message.get("time", ""))
            hdrs = parse_header_block(base64.b64decode(message["hdrs"])) if message.get("hdrs") else {}
            click.echo(
                view_message_text(
                    int(message["seq"]),
                    message["subject"],
                    local_time(moment, None) if moment else "",
                    hdrs,
                    base64.b64decode(message.get("data", "")),
                ),
                nl=False,
            )
            seq = int(message["seq"]) + 1
        if ended:
            click.echo(f"{datetime.now().strftime('%H:%M:%S')} Reached apparent end of data")

    jsapi.run(verb, conn)
