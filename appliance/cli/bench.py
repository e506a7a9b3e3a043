"""`appliance bench`: nats-bench-like load generation against any NATS server (`--url`).

Verbs: pub, sub, pubsub, request, reply, js pub, js fetch, js push, kv put, kv get. Each client
is its own process; a progress bar runs on stderr; the summary table (or --json) goes to stdout.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from appliance.bench.plan import BenchRequest, Verb
from appliance.bench.progress import ProgressView
from appliance.bench.run import run_bench
from appliance.errors import ApplianceError

F = TypeVar("F", bound=Callable[..., Any])
EXIT_ERRORS = 1


def _common(func: F) -> F:
    options = [
        click.argument("subject", default="bench"),
        click.option("--url", "-s", default="nats://127.0.0.1:4222", show_default=True, help="server to measure"),
        click.option("--msgs", default=100_000, show_default=True, help="messages (operations) in total"),
        click.option("--size", default=128, show_default=True, help="payload bytes"),
        click.option("--json", "as_json", is_flag=True, help="print the result as JSON"),
        click.option("--no-progress", is_flag=True, help="no progress bar"),
        click.option("--timeout", "timeout_s", default=10.0, show_default=True,
                     help="seconds without progress before a client gives up"),
        click.option("--server-pid", "server_pids", type=int, multiple=True,
                     help="also report the CPU of this local server process (repeat for cluster nodes)"),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _js(func: F) -> F:
    options = [
        click.option("--clients", "--pub", "--sub", "clients", default=1, show_default=True,
                     help="client processes (--pub/--sub: the same, in nats bench's words)"),
        click.option("--stream", default="benchstream", show_default=True),
        click.option("--replicas", default=1, show_default=True),
        click.option("--storage", type=click.Choice(["file", "memory"]), default="file", show_default=True),
        click.option("--keep", is_flag=True, help="keep the stream after the run"),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _go(verb: Verb, as_json: bool, no_progress: bool, server_pids: tuple[int, ...], **fields: Any) -> None:
    request = BenchRequest(verb=verb, **fields)
    view = ProgressView(enabled=not no_progress and sys.stderr.isatty())
    try:
        report = run_bench(request, server_pids=server_pids, view=view)
    except (ApplianceError, OSError, ValueError, TimeoutError) as exc:
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from exc
    click.echo(json.dumps(report.as_dict(), indent=2) if as_json else report.table())
    if report.errors:
        sys.exit(EXIT_ERRORS)


@click.group()
def bench() -> None:
    """Measure a NATS server (appliance or nats-server) the way `nats bench` does."""


@bench.command()
@_common
@click.option("--pub", "pubs", default=1, show_default=True, help="publisher processes")
def pub(**kw: Any) -> None:
    """Publish --msgs messages as fast as the server takes them."""
    _go("pub", **kw)


@bench.command()
@_common
@click.option("--sub", "subs", default=1, show_default=True, help="subscriber processes")
def sub(**kw: Any) -> None:
    """Receive --msgs messages published by someone else (each subscriber gets all)."""
    _go("sub", **kw)


@bench.command()
@_common
@click.option("--pub", "pubs", default=1, show_default=True, help="publisher processes")
@click.option("--sub", "subs", default=1, show_default=True, help="subscriber processes")
@click.option("--sub-url", "sub_url", default="", help="subscribers/responders connect here (another node of the "
              "cluster); publishers start once their interest has crossed to --url")
def pubsub(**kw: Any) -> None:
    """Publishers and subscribers together; every subscriber receives every message."""
    _go("pubsub", **kw)


@bench.command()
@_common
@click.option("--clients", default=1, show_default=True, help="requester processes")
@click.option("--repliers", default=1, show_default=True, help="responder processes (0: someone else replies)")
@click.option("--sub-url", "sub_url", default="", help="subscribers/responders connect here (another node of the "
              "cluster); publishers start once their interest has crossed to --url")
def request(**kw: Any) -> None:
    """Synchronous requests (one outstanding per client); latency per request."""
    _go("request", **kw)


@bench.command()
@_common
@click.option("--clients", default=1, show_default=True, help="responder processes (queue group `bench`)")
def reply(**kw: Any) -> None:
    """Answer requests (echo) until --msgs were served by each responder."""
    _go("reply", **kw)


@bench.group()
def js() -> None:
    """JetStream: publish, fetch (pull), push."""


@js.command("pub")
@_common
@_js
@click.option("--sync", "sync_pub", is_flag=True, help="one publish at a time (waits for each ack)")
@click.option("--window", default=256, show_default=True, help="outstanding acks when asynchronous")
def js_pub(sync_pub: bool, window: int, **kw: Any) -> None:
    """Publish into a new stream bound to SUBJECT, sync or with a window of outstanding acks."""
    _go("js-pub", window=0 if sync_pub else window, **kw)


@js.command("fetch")
@_common
@_js
@click.option("--batch", default=500, show_default=True, help="messages per pull request")
@click.option("--ack", type=click.Choice(["explicit", "all", "none"]), default="explicit", show_default=True)
@click.option("--consumer", default="benchconsumer", show_default=True)
def js_fetch(**kw: Any) -> None:
    """Prefill a stream with --msgs, then pull them with a durable consumer (clients share it)."""
    _go("js-fetch", **kw)


@js.command("push")
@_common
@_js
@click.option("--ack", type=click.Choice(["explicit", "all", "none"]), default="none", show_default=True)
@click.option("--consumer", default="benchconsumer", show_default=True)
def js_push(**kw: Any) -> None:
    """Prefill a stream with --msgs; each client's push consumer delivers all of them."""
    _go("js-push", **kw)


@bench.group()
def kv() -> None:
    """Key/Value: put and get."""


def _kv(func: F) -> F:
    func = click.option("--bucket", default="benchkv", show_default=True)(func)
    return click.option("--keys", default=1000, show_default=True, help="distinct keys")(func)


@kv.command("put")
@_common
@_js
@_kv
def kv_put(stream: str, **kw: Any) -> None:
    """Synchronous puts over --keys keys (a new bucket, history 1)."""
    _go("kv-put", **kw)


@kv.command("get")
@_common
@_js
@_kv
def kv_get(stream: str, **kw: Any) -> None:
    """Fill --keys keys, then synchronous direct gets."""
    _go("kv-get", **kw)
