"""`appliance store ...`: offline tools for stream directories (never modify them)."""

from __future__ import annotations

import datetime
import sys

import click

from appliance.store import inspect as store_inspect


def _time(ns: int) -> str:
    if ns == 0:
        return "-"
    moment = datetime.datetime.fromtimestamp(ns / 1e9, tz=datetime.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


@click.group()
def store() -> None:
    """Offline tools for JetStream stream directories."""


@store.command()
@click.argument("directory", type=click.Path(exists=True, file_okay=False))
@click.option("--verify", "do_verify", is_flag=True, help="Check every checksum; exit 1 on any problem.")
@click.option("--dump", "do_dump", is_flag=True, help="Print every live message.")
@click.option("--subject", default=">", show_default=True, help="Subject filter for --dump.")
def inspect(directory: str, do_verify: bool, do_dump: bool, subject: str) -> None:
    """Summary and per-segment table of the stream stored in DIRECTORY."""
    report = store_inspect.inspect(directory)
    state = report.state
    raw = sum(r.raw_bytes for r in report.segments)
    stored = sum(r.stored_bytes for r in report.segments)
    click.echo(f"Stream directory: {directory}")
    click.echo(
        f"Messages: {state.msgs:,}  Bytes: {state.bytes:,}  Subjects: {state.num_subjects:,}  "
        f"Deleted: {state.num_deleted:,}"
    )
    click.echo(f"First: {state.first_seq} @ {_time(state.first_ts_ns)}  Last: {state.last_seq} @ {_time(state.last_ts_ns)}")
    sealed = sum(1 for r in report.segments if r.kind == "sealed")
    click.echo(
        f"Segments: {len(report.segments)} ({sealed} sealed)  Raw: {raw:,} B  On disk: {stored:,} B  "
        f"Ratio: {raw / stored if stored else 0:.2f}  Dictionary: {report.dictionary_bytes:,} B"
    )
    recovery = report.recovery
    click.echo(f"Recovery: torn tail {recovery.torn_bytes} B, {len(recovery.corrupt)} corrupt region(s)")
    for region in recovery.corrupt:
        click.echo(f"  corrupt {region.path}:{region.offset} seq {region.first_seq}..{region.last_seq}: {region.detail}")
    click.echo("")
    click.echo(
        f"{'SEGMENT':<26} {'KIND':<7} {'FIRST':>10} {'LAST':>10} {'FIRST TIME':<25} {'LAST TIME':<25} "
        f"{'MSGS':>8} {'BLOCKS':>6} {'RAW':>12} {'STORED':>12} {'RATIO':>6}"
    )
    for r in report.segments:
        click.echo(
            f"{r.name:<26} {r.kind:<7} {r.first_seq:>10} {r.last_seq:>10} {_time(r.ts_min):<25} {_time(r.ts_max):<25} "
            f"{r.msgs:>8} {r.blocks:>6} {r.raw_bytes:>12,} {r.stored_bytes:>12,} {r.ratio:>6.2f}"
        )
    failed = False
    if do_verify:
        problems = store_inspect.verify(directory)
        click.echo("")
        click.echo(f"Verify: {'OK' if not problems else f'{len(problems)} problem(s)'}")
        for problem in problems:
            click.echo(f"  {problem}")
        failed = bool(problems)
    if do_dump:
        click.echo("")
        for msg in store_inspect.dump(directory, 1, subject):
            payload = msg.payload[:64].decode("utf-8", "backslashreplace")
            more = "…" if len(msg.payload) > 64 else ""
            click.echo(f"{msg.seq} {_time(msg.timestamp_ns)} {msg.subject} hdr={len(msg.headers)} {payload}{more}")
    if failed:
        sys.exit(1)
