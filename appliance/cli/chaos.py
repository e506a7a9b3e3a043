"""`appliance chaos`: seeded fault runs against a real local cluster (appliance/testing/chaos.py),
then one line: runs, acknowledged, lost, duplicated, diverged."""

from __future__ import annotations

import signal
import sys
import time
from types import FrameType

import click

from appliance.bench.stats import percentile_rank
from appliance.testing import chaos_plan
from appliance.testing.chaos import ChaosOptions, RunResult, run_chaos
from appliance.testing.chaos_ops import PeerRemoval


@click.command()
@click.option("--seed", type=click.IntRange(0), default=1, show_default=True, help="The first run's seed.")
@click.option("--runs", type=click.IntRange(1), default=1, show_default=True,
              help="Runs, seeds SEED, SEED+1, ...")
@click.option("--nodes", type=click.IntRange(3, 9), default=3, show_default=True, help="Servers per cluster.")
@click.option("--faults", type=click.IntRange(0), default=len(chaos_plan.FAULT_KINDS), show_default=True,
              help="Faults per run; at least as many as kinds: every kind at least once, in a seeded order.")
@click.option("--kinds", "kinds_text", default="all", show_default=True,
              help=f"Comma list of {', '.join(chaos_plan.FAULT_KINDS)}; or all.")
@click.option("--publishers", type=click.IntRange(1, 16), default=2, show_default=True,
              help="Synchronous publishers (each waits for its PubAck).")
@click.option("--workers", type=click.IntRange(1, 8), default=1, show_default=True,
              help="Workers per server.")
@click.option("--quiet", is_flag=True, help="Only the result lines, not each fault.")
@click.option("--keep", is_flag=True,
              help="Keep every run's directory (configs, logs, stores), not only failed ones.")
def chaos(seed: int, runs: int, nodes: int, faults: int, kinds_text: str, publishers: int, workers: int,
          quiet: bool, keep: bool) -> None:
    """Start a local cluster per run (127.0.0.1, temp dirs), publish with Nats-Msg-Id on an R3
    stream while the seed's faults hit it, heal, and check every replica. Exit 1 on any loss,
    duplicate, divergence or failed run; a failed run keeps its directory (logs, stores)."""
    signal.signal(signal.SIGTERM, _exit_on_sigterm)  # a stopped soak stops its servers (run_chaos's finally)
    try:
        kinds = chaos_plan.parse_kinds(kinds_text)
    except ValueError as error:
        raise click.BadParameter(str(error)) from error
    total = chaos_plan.Verdict()
    failed = 0
    counts: dict[str, int] = {}
    failovers: list[float] = []
    stepdowns: dict[str, list[float]] = {}
    removals: list[PeerRemoval] = []

    def log(line: str) -> None:
        if not quiet:
            click.echo(line, err=True)

    for current in range(seed, seed + runs):
        started = time.monotonic()
        options = ChaosOptions(current, nodes=nodes, faults=faults, kinds=kinds, publishers=publishers,
                               workers=workers, keep=keep)
        result = run_chaos(options, log=log)
        total.add(result.verdict)
        for fault in result.faults:
            counts[fault.kind] = counts.get(fault.kind, 0) + 1
        failed += 0 if result.clean else 1
        _report_run(current, result, time.monotonic() - started)
        failovers.extend(result.failovers)
        for fault_kind, seconds in result.stepdowns.items():
            stepdowns.setdefault(fault_kind, []).extend(seconds)
        removals.extend(result.peer_removals)
    fired = " ".join(f"{kind}={counts.get(kind, 0)}" for kind in chaos_plan.FAULT_KINDS)
    click.echo(f"{chaos_plan.summary_line(runs, total)} failed_runs={failed} nodes={nodes} {fired}")
    if failovers:
        click.echo(f"leader kills: first PubAck after {_times(failovers)}")
    _report_operations(stepdowns, removals, "")
    sys.exit(1 if failed else 0)


def _report_run(seed: int, result: RunResult, seconds: float) -> None:
    status = "ok" if result.clean else f"FAILED{': ' + result.failure if result.failure else ''}"
    click.echo(f"seed {seed}: {chaos_plan.summary_line(1, result.verdict)} faults={len(result.faults)} "
               f"unacked={result.unacked} delivered={result.delivered} {seconds:.1f}s {status}")
    if result.failovers:
        click.echo(f"  leader kills: first PubAck after {_times(result.failovers)}")
    _report_operations(result.stepdowns, result.peer_removals, "  ")
    for example in result.verdict.examples:
        click.echo(f"  {example}")
    if result.kept:
        click.echo(f"  kept {result.kept}")


def _report_operations(stepdowns: dict[str, list[float]], removals: list[PeerRemoval], indent: str) -> None:
    for kind in chaos_plan.STEPDOWNS:
        if stepdowns.get(kind):
            click.echo(f"{indent}{kind}: new leader answering after {_times(stepdowns[kind])}")
    if removals:
        removed = _times([r.removed_s for r in removals])
        regained = _times([r.regained_s for r in removals])
        click.echo(f"{indent}peer-remove: out of the stream's group after {removed}; "
                   f"every replica current again after {regained}")


def _times(seconds: list[float]) -> str:
    ordered = sorted(seconds)
    p50, p99 = (ordered[percentile_rank(q, len(ordered))] for q in (50, 99))
    return (f"p50 {p50 * 1e3:,.0f} ms, p99 {p99 * 1e3:,.0f} ms, max {ordered[-1] * 1e3:,.0f} ms "
            f"over {len(ordered)}")


def _exit_on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)
