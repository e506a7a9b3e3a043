"""`appliance sim`: replay one deterministic simulation, or soak a range of seeds: the RAFT groups
alone (default), or with `--streams` a replicated stream and its replicated consumer
(testing/sim/stream_scenario.py)."""

from __future__ import annotations

import logging
import sys
import time

import click

from appliance.raft.types import BUG_NAMES
from appliance.testing.sim.profile import FAULT_NAMES
from appliance.testing.sim.simulator import SimOptions, bugs_from_names, parse_faults, run_seed
from appliance.testing.sim.stream_scenario import StreamSimOptions, run_stream_seed

PROGRESS_EVERY_SEEDS = 100  # a soak reports progress on stderr this often
RAFT_TICKS = 1500  # default ticks of the faulty phase
STREAM_TICKS = 600


def _seed_range(text: str) -> range:
    start, sep, stop = text.partition(":")
    if not sep or not start.isdigit() or not stop.isdigit() or int(stop) <= int(start):
        raise click.BadParameter("expected START:STOP with START < STOP, e.g. 0:1000")
    return range(int(start), int(stop))


@click.command()
@click.option("--seed", type=int, default=None, help="Replay this one seed and print its summary.")
@click.option("--seeds", "seeds_text", default=None, help="Soak seeds START:STOP; print failures and totals.")
@click.option("--ticks", type=click.IntRange(0), default=None,
              help=f"Ticks of the faulty phase [default: {RAFT_TICKS}; {STREAM_TICKS} with --streams].")
@click.option("--nodes", type=click.IntRange(1, 9), default=3, show_default=True)
@click.option("--groups", type=click.IntRange(1, 16), default=2, show_default=True)
@click.option("--faults", "faults_text", default="all", show_default=True,
              help=f"Comma list of {','.join(FAULT_NAMES)}; or all / none.")
@click.option("--bug", "bug_names", multiple=True, type=click.Choice(BUG_NAMES),
              help="Plant a bug (test-only switch) to see the simulator catch it.")
@click.option("--streams", is_flag=True,
              help="Run a replicated stream and consumer (3 servers, seeded faults and clients) instead.")
def sim(seed: int | None, seeds_text: str | None, ticks: int | None, nodes: int, groups: int, faults_text: str,
        bug_names: tuple[str, ...], streams: bool) -> None:
    """Run the deterministic simulator (one seed replays exactly)."""
    try:
        faults = parse_faults(faults_text)
        bugs = bugs_from_names(list(bug_names))
    except ValueError as error:
        raise click.BadParameter(str(error)) from error
    if seed is not None and seeds_text is not None:
        raise click.UsageError("give --seed or --seeds, not both")
    seeds = _seed_range(seeds_text) if seeds_text is not None else range(seed or 0, (seed or 0) + 1)
    if streams:
        if bug_names:
            raise click.UsageError("--bug plants RAFT bugs: not with --streams")
        _soak_streams(seeds, STREAM_TICKS if ticks is None else ticks)
        return
    ticks = RAFT_TICKS if ticks is None else ticks
    started_cpu, started_wall = time.process_time(), time.monotonic()
    failures = commits = 0
    for current in seeds:
        result = run_seed(SimOptions(seed=current, ticks=ticks, nodes=nodes, groups=groups, faults=faults, bugs=bugs))
        commits += result.commits
        if len(seeds) == 1 or not result.ok:
            click.echo(result.summary())
        if not result.ok:
            failures += 1
        done = current - seeds.start + 1
        if len(seeds) > 1 and done % PROGRESS_EVERY_SEEDS == 0:
            click.echo(f"... {done} seeds done (up to {current}), {failures} failed, "
                       f"{done / max(time.monotonic() - started_wall, 1e-9):.2f} seeds/s", err=True)
    cpu_s = max(time.process_time() - started_cpu, 1e-9)
    wall_s = max(time.monotonic() - started_wall, 1e-9)
    if len(seeds) > 1:
        click.echo(f"{len(seeds)} seeds, {failures} failed; {len(seeds) / wall_s:.2f} seeds/s, "
                   f"{commits / cpu_s:.0f} simulated commits per CPU-second ({wall_s:.1f}s wall)")
    sys.exit(1 if failures else 0)


def _soak_streams(seeds: range, ticks: int) -> None:
    # faults make leaders drop proposals and publishes all the time: expected, not news
    logging.getLogger("appliance.jetstream").setLevel(logging.ERROR)
    started_wall = time.monotonic()
    failures = published = acked = deliveries = confirmed = crashes = 0
    for current in seeds:
        result = run_stream_seed(StreamSimOptions(seed=current, ticks=ticks))
        published += result.published
        acked += result.acked
        deliveries += result.deliveries
        confirmed += result.acks_confirmed
        crashes += result.crashes
        if len(seeds) == 1 or not result.ok:
            click.echo(result.summary())
        if not result.ok:
            failures += 1
        done = current - seeds.start + 1
        if len(seeds) > 1 and done % PROGRESS_EVERY_SEEDS == 0:
            click.echo(f"... {done} seeds done (up to {current}), {failures} failed", err=True)
    wall_s = max(time.monotonic() - started_wall, 1e-9)
    if len(seeds) > 1:
        click.echo(f"{len(seeds)} stream seeds, {failures} failed; {published} published, {acked} acked, "
                   f"{deliveries} deliveries, {confirmed} AckSyncs answered, {crashes} crashes; "
                   f"{len(seeds) / wall_s:.2f} seeds/s ({wall_s:.1f}s wall)")
    sys.exit(1 if failures else 0)
