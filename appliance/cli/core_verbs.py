"""`appliance pub|sub|req`: core NATS verbs in the `nats` CLI's shape, through nats-py.

`sub` is bounded by `--count` and/or `--timeout` (seconds) so scripts and tests can rely on it
ending; without either it runs until interrupted. Progress lines carry the local time as
natscli's log lines do; message text comes from render_message.
"""

from __future__ import annotations

import json
import time
from datetime import datetime

import click
from nats.aio.client import Client

from appliance import limits
from appliance.cli import jsapi
from appliance.cli.format import comma, go_duration
from appliance.cli.jsapi import CommandError, Connection, connection_options
from appliance.cli.render_message import body_text, sub_message_text

NS_PER_S = 1_000_000_000


def log_line(text: str) -> None:
    click.echo(f"{datetime.now().strftime('%H:%M:%S')} {text}")


def parse_headers(values: tuple[str, ...]) -> dict[str, str]:
    headers: dict[str, str] = {}
    for value in values:
        key, separator, text = value.partition(":")
        if not separator or not key.strip():
            raise CommandError(f"invalid header {value!r}: use -H Key:Value")
        headers[key.strip()] = text.strip()
    return headers


def expand_body(body: str, counter: int) -> bytes:
    """natscli's body templates, the counter only: `{{.Count}}` / `{{Count}}`."""
    return body.replace("{{.Count}}", str(counter)).replace("{{Count}}", str(counter)).encode()


@click.command()
@click.argument("subject")
@click.argument("body", default="")
@click.option("--count", type=click.IntRange(1, limits.CLI_PUB_COUNT_MAX), default=1, show_default=True)
@click.option("-H", "--header", "header_values", multiple=True, help="Key:Value header (repeatable).")
@click.option("--reply", default=None, help="Reply subject to send with the message.")
@click.option("-J", "--jetstream", is_flag=True, help="Wait for the JetStream PubAck of each message.")
@connection_options
def pub(
    subject: str,
    body: str,
    count: int,
    header_values: tuple[str, ...],
    reply: str | None,
    jetstream: bool,
    conn: Connection,
) -> None:
    """Publish BODY to SUBJECT (COUNT times; `{{.Count}}` in BODY is the message number)."""

    async def verb(client: Client) -> None:
        headers = parse_headers(header_values) or None
        for counter in range(1, count + 1):
            payload = expand_body(body, counter)
            if jetstream:
                answer = await client.request(subject, payload, timeout=conn.timeout_s, headers=headers)
                ack = json.loads(answer.data)
                if "error" in ack:
                    error = ack["error"]
                    raise jsapi.ApiError(
                        code=int(error.get("code", 0)),
                        err_code=int(error.get("err_code", 0)),
                        description=str(error.get("description", "")),
                    )
                if count == 1:
                    log_line(
                        f"Stored in Stream: {ack.get('stream')} Sequence: {comma(int(ack.get('seq', 0)))}"
                    )
            else:
                await client.publish(subject, payload, reply=reply or "", headers=headers)
        await client.flush(timeout=max(1, int(conn.timeout_s)))
        if count > 1:
            log_line(f'Published {comma(count)} messages to "{subject}"')
        elif not jetstream:
            log_line(f'Published {len(expand_body(body, 1))} bytes to "{subject}"')

    jsapi.run(verb, conn)


@click.command()
@click.argument("subject")
@click.option("--queue", default=None, help="Subscribe in this queue group.")
@click.option(
    "--count",
    type=click.IntRange(0, limits.CLI_PUB_COUNT_MAX),
    default=0,
    help="Stop after this many messages (0: no limit).",
)
@click.option(
    "--timeout",
    "wait_s",
    type=float,
    default=None,
    help="Stop after this many seconds; with --count, fewer messages is an error.",
)
@click.option("--raw", is_flag=True, help="Only the bodies.")
@click.option("-s", "--server", "url", envvar="NATS_URL", default=jsapi.DEFAULT_URL, show_default=True)
@click.option("--user", envvar="NATS_USER", default=None)
@click.option("--password", envvar="NATS_PASSWORD", default=None)
def sub(
    subject: str,
    queue: str | None,
    count: int,
    wait_s: float | None,
    raw: bool,
    url: str,
    user: str | None,
    password: str | None,
) -> None:
    """Subscribe to SUBJECT and print what arrives."""
    conn = Connection(url=url, user=user, password=password, timeout_s=limits.CLI_REQUEST_TIMEOUT_S)

    async def verb(client: Client) -> None:
        subscription = await client.subscribe(
            subject, queue=queue or "", pending_msgs_limit=limits.CLI_SUB_PENDING_MSGS_MAX
        )
        await client.flush(timeout=max(1, int(conn.timeout_s)))
        log_line(f"Subscribing on {subject}" + (f" in group {queue}" if queue else ""))
        deadline = None if wait_s is None else time.monotonic() + wait_s
        received = 0
        while count == 0 or received < count:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                break
            try:
                message = await subscription.next_msg(timeout=remaining)
            except jsapi.NatsTimeout:
                break
            received += 1
            if raw:
                click.echo(message.data.decode("utf-8", errors="replace"))
            else:
                click.echo(
                    sub_message_text(
                        received, message.subject, message.reply, message.headers or {}, message.data
                    ),
                    nl=False,
                )
        if count and received < count:
            raise CommandError(f"received {received} of {count} messages before the timeout")

    jsapi.run(verb, conn)


@click.command()
@click.argument("subject")
@click.argument("body", default="")
@click.option("-H", "--header", "header_values", multiple=True, help="Key:Value header (repeatable).")
@click.option("--raw", is_flag=True, help="Only the reply's body.")
@connection_options
def req(subject: str, body: str, header_values: tuple[str, ...], raw: bool, conn: Connection) -> None:
    """Send a request to SUBJECT and print the reply."""

    async def verb(client: Client) -> None:
        headers = parse_headers(header_values) or None
        if not raw:
            log_line(f'Sending request on "{subject}"')
        started = time.perf_counter_ns()
        answer = await client.request(subject, body.encode(), timeout=conn.timeout_s, headers=headers)
        rtt_ns = time.perf_counter_ns() - started
        if raw:
            click.echo(answer.data.decode("utf-8", errors="replace"))
            return
        log_line(f"Received with rtt {go_duration(rtt_ns)}")
        for key, value in (answer.headers or {}).items():
            log_line(f"{key}: {value}")
        if answer.headers:
            log_line("")
        click.echo(body_text(answer.data), nl=False)

    jsapi.run(verb, conn)
