"""`appliance consumer add|info|ls|rm|next|cluster`: the `nats consumer` verbs over `$JS.API.CONSUMER.*`.

`add` names the consumer durably (`name` = `durable_name`) on `CONSUMER.CREATE.<stream>.<name>`;
`next` sends one pull request per message to `CONSUMER.MSG.NEXT` and acks it unless `--no-ack`.
`add` on a terminal asks natscli's questions for what its flags left out (consumer_questions.py);
nothing else prompts: `rm` needs `-f`.
"""

from __future__ import annotations

from datetime import UTC, datetime

import click
from nats.aio.client import Client
from nats.aio.msg import Msg

from appliance import limits
from appliance.cli import jsapi, prompts
from appliance.cli.consumer_cluster import cluster
from appliance.cli.consumer_config import ConsumerFlags, consumer_config, missing_flags
from appliance.cli.consumer_questions import next_consumer_question
from appliance.cli.format import NS_PER_S
from appliance.cli.jsapi import API_NAME, CommandError, Connection, JsonDict, api_request, connection_options
from appliance.cli.render_consumer import consumer_info_text, consumer_list_table, next_message_header
from appliance.cli.render_message import header_lines
from appliance.cli.stream_config import FlagError

API = "$JS.API.CONSUMER"
STATUS_HEADER = "Status"
EXPIRES_SHARE = 0.9  # a pull request expires a little before the client stops waiting for it


def _now() -> datetime:
    return datetime.now(UTC)


def _echo_info(info: JsonDict, *, as_json: bool) -> None:
    if as_json:
        jsapi.print_json(info)
    else:
        click.echo(consumer_info_text(info, tz=None, now=_now()))


@click.group()
def consumer() -> None:
    """JetStream consumer management (the `nats consumer` verbs)."""


consumer.add_command(cluster)


@consumer.command("add")
@click.argument("stream", type=API_NAME)
@click.argument("name", type=API_NAME)
@click.option("--pull", is_flag=True, help="A pull consumer.")
@click.option("--deliver", "deliver_subject", default=None, help="Push: deliver messages to this subject.")
@click.option("--deliver-group", default=None, help="Push: queue group that receives the messages.")
@click.option("--ack", "ack_policy", type=click.Choice(["explicit", "all", "none"]), default=None)
@click.option("--filter", "filters", multiple=True, help="Filter subject (repeat for several).")
@click.option(
    "--deliver-policy",
    type=click.Choice(["all", "last", "new", "last_per_subject", "by_start_sequence"]),
    default=None,
)
@click.option(
    "--start-seq", type=click.IntRange(min=1), default=None, help="With --deliver-policy by_start_sequence."
)
@click.option("--replay", type=click.Choice(["instant", "original"]), default=None)
@click.option("--max-deliver", type=int, default=None, help="-1 for unlimited.")
@click.option("--max-pending", type=int, default=None, help="Maximum outstanding acks.")
@click.option("--max-waiting", type=int, default=None, help="Pull: maximum waiting pull requests.")
@click.option("--wait", "ack_wait", default=None, help="Ack wait, e.g. 30s.")
@click.option("--heartbeat", default=None, help="Push: idle heartbeat interval, e.g. 5s.")
@click.option("--flow-control/--no-flow-control", default=None)
@click.option("--inactive-threshold", default=None, help="Remove after this long without activity.")
@click.option("--replicas", type=click.IntRange(0, 5), default=None, help="0 inherits the stream's.")
@click.option("--description", default=None)
@click.option("--headers-only/--no-headers-only", default=None, help="Deliver headers only, without bodies.")
@click.option(
    "--defaults", "use_defaults", is_flag=True, help="Pull, explicit ack, deliver all for what is not given."
)
@click.option("--json", "as_json", is_flag=True, help="Print the API's JSON answer.")
@connection_options
def add(
    stream: str, name: str, use_defaults: bool, as_json: bool, conn: Connection, **values: object
) -> None:
    """Create a consumer: `consumer add ORDERS NEW --pull --ack explicit --filter orders.new`."""
    try:
        flags = ConsumerFlags(**values)  # type: ignore[arg-type]
        if not use_defaults and missing_flags(flags) and prompts.on_terminal():
            flags = prompts.ask_missing(flags, next_consumer_question)  # natscli's questions
        config = consumer_config(name, flags, use_defaults=use_defaults)
    except FlagError as exc:
        jsapi.fail(str(exc))

    async def verb(client: Client) -> None:
        request = {"stream_name": stream, "config": config}
        info = await api_request(client, f"{API}.CREATE.{stream}.{name}", request, timeout_s=conn.timeout_s)
        _echo_info(info, as_json=as_json)

    jsapi.run(verb, conn)


@consumer.command("info")
@click.argument("stream", type=API_NAME)
@click.argument("name", type=API_NAME)
@click.option("--json", "as_json", is_flag=True, help="Print the API's JSON answer.")
@connection_options
def info(stream: str, name: str, as_json: bool, conn: Connection) -> None:
    """Configuration, Cluster Information and State of a consumer."""

    async def verb(client: Client) -> None:
        answer = await api_request(client, f"{API}.INFO.{stream}.{name}", None, timeout_s=conn.timeout_s)
        _echo_info(answer, as_json=as_json)

    jsapi.run(verb, conn)


@consumer.command("ls")
@click.argument("stream", type=API_NAME)
@click.option("--names", "-n", "names_only", is_flag=True, help="Only the names.")
@click.option("--json", "as_json", is_flag=True, help="Print the API's JSON (infos, or names with --names).")
@connection_options
def ls(stream: str, names_only: bool, as_json: bool, conn: Connection) -> None:
    """List a stream's consumers."""

    async def verb(client: Client) -> None:
        if names_only:
            names, _ = await jsapi.paged(
                client, f"{API}.NAMES.{stream}", "consumers", timeout_s=conn.timeout_s
            )
            if as_json:
                jsapi.print_json(names)
            for consumer_name in [] if as_json else names:
                click.echo(consumer_name)
            return
        infos, missing = await jsapi.paged(
            client, f"{API}.LIST.{stream}", "consumers", timeout_s=conn.timeout_s
        )
        if as_json:
            jsapi.print_json(infos)
        elif not infos and not missing:
            click.echo("No Consumers defined")
        else:
            click.echo(consumer_list_table(infos, tz=None, now=_now()))
            if missing:
                click.echo("Inaccessible Consumers: " + ", ".join(sorted(missing)))

    jsapi.run(verb, conn)


@consumer.command("rm")
@click.argument("stream", type=API_NAME)
@click.argument("name", type=API_NAME)
@click.option("-f", "--force", is_flag=True, help="Delete without asking (required: no prompts).")
@connection_options
def rm(stream: str, name: str, force: bool, conn: Connection) -> None:
    """Delete a consumer."""
    if not force:
        jsapi.fail(f"refusing to delete Consumer {stream} > {name} without --force (this CLI never prompts)")

    async def verb(client: Client) -> None:
        await api_request(client, f"{API}.DELETE.{stream}.{name}", None, timeout_s=conn.timeout_s)

    jsapi.run(verb, conn)


@consumer.command("next")
@click.argument("stream", type=API_NAME)
@click.argument("name", type=API_NAME)
@click.option(
    "--count", type=click.IntRange(1, limits.CLI_SUB_PENDING_MSGS_MAX), default=1, show_default=True
)
@click.option("--ack/--no-ack", default=True, show_default=True, help="Acknowledge each message.")
@click.option("--raw", is_flag=True, help="Only the bodies.")
@connection_options
def next_message(stream: str, name: str, count: int, ack: bool, raw: bool, conn: Connection) -> None:
    """Pull the next COUNT messages from a pull consumer, one request each."""

    async def verb(client: Client) -> None:
        for _ in range(count):
            message = await _pull_one(client, stream, name, conn)
            _echo_message(message, raw=raw)
            if ack:
                await message.respond(b"+ACK")
                await client.flush(timeout=max(1, int(conn.timeout_s)))
                if not raw:
                    click.echo("\nAcknowledged message\n")

    jsapi.run(verb, conn)


async def _pull_one(client: Client, stream: str, name: str, conn: Connection) -> Msg:
    inbox = client.new_inbox()
    subscription = await client.subscribe(
        inbox, max_msgs=1, pending_msgs_limit=limits.CLI_SUB_PENDING_MSGS_MAX
    )
    request = {"batch": 1, "expires": int(conn.timeout_s * EXPIRES_SHARE * NS_PER_S)}
    await client.publish(f"{API}.MSG.NEXT.{stream}.{name}", jsapi.encode(request), reply=inbox)
    try:
        message = await subscription.next_msg(timeout=conn.timeout_s)
    except (TimeoutError, jsapi.NatsTimeout) as exc:
        raise CommandError("no message received: nats: timeout") from exc
    finally:
        await subscription.unsubscribe()
    status = (message.headers or {}).get(STATUS_HEADER, "")
    if status == "503":
        await _explain_no_responders(client, stream, name, conn)
    if status:
        description = (message.headers or {}).get("Description", "")
        raise CommandError(f"no message received: {status} {description}".rstrip())
    return message


async def _explain_no_responders(client: Client, stream: str, name: str, conn: Connection) -> None:
    answer = await api_request(client, f"{API}.INFO.{stream}.{name}", None, timeout_s=conn.timeout_s)
    if answer.get("config", {}).get("deliver_subject"):
        raise CommandError(f'consumer "{name}" is not a Pull consumer')


def _echo_message(message: Msg, *, raw: bool) -> None:
    if raw:
        click.echo(message.data.decode("utf-8", errors="replace"))
        return
    text = next_message_header(message.subject, message.reply, clock_text=datetime.now().strftime("%H:%M:%S"))
    text += "\n"
    if message.headers:
        text += (
            "\nHeaders:\n\n" + "\n".join(header_lines(dict(message.headers), indent="  ")) + "\n\nData:\n\n"
        )
    click.echo(text + "\n" + message.data.decode("utf-8", errors="replace"))
