"""`appliance store ...`: offline tools for stream directories (never modify them)."""

from __future__ import annotations

import datetime
import logging
import sys

import click

from appliance.errors import CorruptData
from appliance.store import inspect as store_inspect
from appliance.store.layout import CorruptRegion


def _time(ns: int) -> str:
    if ns == 0:
        return "-"
    moment = datetime.datetime.fromtimestamp(ns / 1e9, tz=datetime.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


@click.group()
def store() -> None:
    """Offline tools for JetStream stream directories."""


@store.command()
@click.argument("path", type=click.Path(exists=True, file_okay=False))
@click.option("--verify", "do_verify", is_flag=True, help="Check every checksum; exit 1 on any problem.")
@click.option("--dump", "do_dump", is_flag=True, help="Print every live message.")
@click.option("--subject", default=">", show_default=True, help="Subject filter for --dump.")
def inspect(path: str, do_verify: bool, do_dump: bool, subject: str) -> None:
    """The streams stored under PATH: a store directory (-sd; every account and stream, one
    summary line each), a stream directory, or its msgs directory (summary and segment table).

    Exit 0 when fine, 1 when --verify (or recovery) finds a problem anywhere below, 2 when PATH
    holds no stream."""
    logging.getLogger("appliance.store").setLevel(logging.CRITICAL)  # damage is reported below, once
    streams = store_inspect.find_streams(path)
    if not streams:
        click.echo(f"appliance: no stream found under {path}", err=True)
        sys.exit(2)
    failed = False
    for found in streams:
        report = store_inspect.inspect(found.directory)
        problems = store_inspect.verify(found.directory) if do_verify else []
        if len(streams) == 1:
            _detail(found.directory, report)
        else:
            _summary_line(found.label, report, problems if do_verify else None)
        if do_verify:
            if len(streams) == 1:
                click.echo("")
                click.echo(f"Verify: {'OK' if not problems else f'{len(problems)} problem(s)'}")
            for problem in problems:
                click.echo(f"  {problem}")
        failed = failed or bool(problems) or bool(report.recovery.corrupt)
        if do_dump:
            _dump(found, subject, labelled=len(streams) > 1)
    if len(streams) > 1 and do_verify:
        click.echo(f"Verify: {'OK' if not failed else 'problems found'} ({len(streams)} streams)")
    if failed and do_verify:
        sys.exit(1)


def _summary_line(label: str, report: store_inspect.Inspection, problems: list[CorruptData] | None) -> None:
    state = report.state
    stored = sum(r.stored_bytes for r in report.segments)
    verdict = "" if problems is None else f"  Verify: {'OK' if not problems else f'{len(problems)} problem(s)'}"
    click.echo(
        f"{label}: Messages: {state.msgs:,}  Bytes: {state.bytes:,}  First: {state.first_seq}  Last: {state.last_seq}  "
        f"Segments: {len(report.segments)}  On disk: {stored:,} B  Corrupt regions: {len(report.recovery.corrupt)}{verdict}"
    )
    for region in report.recovery.corrupt:
        click.echo(f"  corrupt {_where(region)} seq {region.first_seq}..{region.last_seq}: {region.detail}")


def _where(region: CorruptRegion) -> str:
    return region.path if region.offset < 0 else f"{region.path}:{region.offset}"


def _detail(directory: str, report: store_inspect.Inspection) -> None:
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
        click.echo(f"  corrupt {_where(region)} seq {region.first_seq}..{region.last_seq}: {region.detail}")
    for line in recovery.repaired:
        click.echo(f"  repairable on open: {line}")
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


def _dump(found: store_inspect.StreamDir, subject: str, *, labelled: bool) -> None:
    click.echo("")
    if labelled:
        click.echo(f"{found.label}:")
    for msg in store_inspect.dump(found.directory, 1, subject):
        payload = msg.payload[:64].decode("utf-8", "backslashreplace")
        more = "…" if len(msg.payload) > 64 else ""
        click.echo(f"{msg.seq} {_time(msg.timestamp_ns)} {msg.subject} hdr={len(msg.headers)} {payload}{more}")
