"""`make bench`: appliance side by side with the real nats-server 2.15.1.

Starts nats-server (defaults), nats-server with `jetstream { sync_interval: always }` (durable like
appliance's default) and appliance (`appliance run -a 127.0.0.1 -p PORT -js -sd DIR`), each on a free
127.0.0.1 port (and, for the cluster and R3 scenarios, a two- or three-node cluster of each, every
node reading the same kind of config file, started when first needed), then runs every scenario
against each server in turn (A B C A B C ...) for --rounds rounds, and writes the medians with
appliance/nats-server ratios as a markdown table plus a PNG bar chart to bench-results/. The
pub+sub scenario also runs the C reference client (appliance/bench/reference.py) against
nats-server in every round: its median is the reference column of that row, measured on the same
machine at the same time.

R3 rows create their stream (num_replicas 3) before each run, wait until it has a leader and
every replica is current, and put the client on the leader's node or a follower's. Then, on the
same three-node clusters, the failover measurement (appliance/bench/failover.py): --kills times
kill -9 of the stream leader, time to the first PubAck, and no acknowledged message lost or
duplicated. --quick: one round, a twentieth of the messages, 3 kills.

Nothing is left out of the table. A scenario appliance does not support yet is declared by name
in NOT_YET (with why) and shown as "cannot run yet: ..." without being run; anything else that
goes wrong (a timeout, an exception, a server that exits) is "failed: ...", and the command exits
1 when any appliance scenario failed. A ratio only divides runs of the same message count: where
nats-server sync=always runs fewer messages (it fsyncs each one), appliance also runs that count
in every round (cell MATCHED) and the sync=always ratio uses it.

    .venv/bin/python -m appliance.bench.compare [--rounds 3] [--scale 1.0] [--only pub,js-pub-sync]
    .venv/bin/python -m appliance.bench.compare --quick --only 'r3-*' --targets nats-server
"""

from __future__ import annotations

import fnmatch
import json
import os
import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import click

from appliance.bench import jsapi, machine, plan, reference, replicas
from appliance.bench.chart import write_chart
from appliance.bench.conn import Connection, Endpoint
from appliance.bench.failover import FailoverResult, run_failover
from appliance.bench.plan import BenchRequest
from appliance.bench.report import BenchReport
from appliance.bench.run import run_bench
from appliance.bench.servers import (
    APPLIANCE,
    NATS_DEFAULT,
    NATS_SYNC_ALWAYS,
    RunningServer,
    ServerKind,
    ServerStartFailed,
    start,
)
from appliance.bench.scenarios import (
    ALWAYS_MSGS,
    CLUSTER_SCENARIOS,
    FAILOVER_KEY,
    NOT_YET,
    SCENARIOS,
    Scenario,
    scaled,
)
from appliance.bench.stats import median
from appliance.bench.table import REFERENCE, failover_lines, markdown

RESULTS_DIR = Path("bench-results")
REFERENCE_FIGURES = {"pub total": "pub", "sub total": "sub", "pub+sub total": "total"}
TARGETS: tuple[ServerKind, ...] = (NATS_DEFAULT, NATS_SYNC_ALWAYS, APPLIANCE)
ServerKey = tuple[str, int]  # (server kind name, nodes)
Log = Callable[[str], None]
QUICK = {"rounds": 1, "scale": 0.05, "kills": 3}
FULL = {"rounds": 3, "scale": 1.0, "kills": 20}
__all__ = ["ALWAYS_MSGS", "CLUSTER_SCENARIOS", "FAILOVER_KEY", "NOT_YET", "SCENARIOS", "Scenario", "scaled"]


@dataclass(slots=True)
class ServerPool:
    """The servers of a comparison, each kind and size started once when first needed; `down`
    holds why one could not start."""

    servers: dict[ServerKey, RunningServer] = field(default_factory=dict)
    down: dict[ServerKey, str] = field(default_factory=dict)

    def stop(self) -> None:
        for server in self.servers.values():
            server.stop()
        self.servers.clear()


def matched(count: int) -> str:
    """The cell name of appliance's extra runs at another server's message count."""
    return f"{APPLIANCE.name} at {count:,} msgs"


def matched_counts(scenario: Scenario, targets: tuple[ServerKind, ...], scale: float) -> tuple[int, ...]:
    """Message counts of the other targets that appliance's own request does not run: appliance also
    runs each of them, so that every ratio divides runs of the same length."""
    if APPLIANCE not in targets:
        return ()
    own = scenario.request_for(APPLIANCE, scale).msgs
    return tuple(sorted({scenario.request_for(t, scale).msgs for t in targets if t != APPLIANCE} - {own}))


@dataclass(slots=True)
class Cell:
    """All rounds of one scenario against one server."""

    msgs_per_s: list[float] = field(default_factory=list)
    p50_us: list[float] = field(default_factory=list)
    p99_us: list[float] = field(default_factory=list)
    client_cores: list[float] = field(default_factory=list)
    server_cores: list[float] = field(default_factory=list)
    # server CPU per headline message: what the server spends, whatever share of the cores the
    # scheduler gave it (a busy machine gives a many-threaded server more of them)
    server_us_per_msg: list[float] = field(default_factory=list)
    load_average: list[float] = field(default_factory=list)  # 1-minute load when each round ended
    # appliance: the worker(s) the kernel gave the client connection(s) in each round ("w0",
    # "w0+w1"), told by INFO's client_id; "" for a server with one process
    placement: list[str] = field(default_factory=list)
    msgs: int = 0  # messages per run (the scaled count this server was asked for)
    failure: str = ""

    def median_rate(self) -> float | None:
        return median(self.msgs_per_s) if self.msgs_per_s else None

    def median_of(self, values: list[float]) -> float | None:
        return median(values) if values else None


def headline(report: BenchReport, label: str) -> tuple[float, float | None, float | None]:
    """msgs/s, p50 µs and p99 µs of one report row (no latency: None)."""
    row = next(r for r in report.totals if r.label == label)
    if row.latency is None:
        return row.rate.msgs_per_s, None, None
    return row.rate.msgs_per_s, row.latency.p50_ns / 1e3, row.latency.p99_ns / 1e3


def placement(client_ids: tuple[int, ...], workers: int) -> str:
    """Which appliance worker served each client: client ids are worker + 1 + k * workers."""
    if workers <= 1 or not client_ids:
        return ""
    return "+".join(f"w{(cid - 1) % workers}" if cid > 0 else "w?" for cid in client_ids)


def record(cell: Cell, report: BenchReport, label: str, *, workers: int = 1) -> None:
    if report.errors:
        raise RuntimeError(f"{report.errors} errors, first: {report.first_error}")
    rate, p50, p99 = headline(report, label)
    cell.msgs_per_s.append(rate)
    cell.msgs = report.plan.request.msgs
    if p50 is not None and p99 is not None:
        cell.p50_us.append(p50)
        cell.p99_us.append(p99)
    where = placement(report.client_ids, workers)
    if where:
        cell.placement.append(where)
    wall = report.wall_s or 1e-9
    cell.client_cores.append(report.client_cpu_s / wall)
    if report.server_cpu_s is not None:
        cell.server_cores.append(report.server_cpu_s / wall)
        messages = next(r for r in report.totals if r.label == label).rate.msgs
        if messages:
            cell.server_us_per_msg.append(report.server_cpu_s * 1e6 / messages)
    cell.load_average.append(os.getloadavg()[0])


def failure_text(exc: BaseException) -> str:
    """What the table says of a run that went wrong, whichever server: "failed: <why>"."""
    reason = f"{type(exc).__name__}: {exc}".replace("\n", " ").strip()[:300]
    return f"failed: {reason}"


def not_yet_text(key: str) -> str:
    return f"cannot run yet: {NOT_YET[key]}"


def failed_cells(cells: dict[str, dict[str, Cell]], name: str = APPLIANCE.name) -> list[tuple[str, str]]:
    """(scenario key, failure) of every cell of a server (and its matched-count runs) that failed."""
    return [(key, cell.failure) for key, row in cells.items() for cell_name, cell in row.items()
            if (cell_name == name or cell_name.startswith(f"{name} at ")) and cell.failure.startswith("failed: ")]


def run_all(scenarios: tuple[Scenario, ...], targets: tuple[ServerKind, ...], *, rounds: int, scale: float,
            log: Log = print, pool: ServerPool | None = None) -> dict[str, dict[str, Cell]]:
    """Every scenario against every target; the servers are stopped at the end unless the caller
    passed its own pool (and stops it)."""
    cells = {s.key: {t.name: Cell() for t in targets} for s in scenarios}
    for s in scenarios:
        source = next((x for x in scenarios if x.key == s.derived_from), s)
        for count in matched_counts(source, targets, scale):
            cells[s.key][matched(count)] = Cell()
    with_reference = {s.key for s in scenarios if s.c_reference}
    for s in scenarios:
        if s.key in with_reference or s.derived_from in with_reference:
            cells[s.key][REFERENCE] = Cell()
    keys = {s.key for s in scenarios}
    for s in scenarios:
        if s.derived_from and s.derived_from not in keys:
            for cell in cells[s.key].values():
                cell.failure = f"not measured: comes from the runs of scenario {s.derived_from!r}"
    own = pool is None
    pool = ServerPool() if pool is None else pool
    servers, down = pool.servers, pool.down
    try:
        for scenario in (s for s in scenarios if not s.derived_from):
            request = scaled(scenario.request, scale)
            rows = [(s.key, s.headline) for s in scenarios if s is scenario or s.derived_from == scenario.key]
            if scenario.key in NOT_YET and APPLIANCE in targets:
                for key, _ in rows:
                    for name, cell in cells[key].items():
                        if name == APPLIANCE.name or name.startswith(f"{APPLIANCE.name} at "):
                            cell.failure = not_yet_text(scenario.key)
            run_on = tuple(t for t in targets if not (t == APPLIANCE and scenario.key in NOT_YET))
            for kind in run_on:
                _ensure_started(kind, scenario.nodes, servers, down, log)
            extra = () if scenario.key in NOT_YET else matched_counts(scenario, targets, scale)
            for round_number in range(rounds):
                for kind in run_on:
                    _one([(cells[key][kind.name], label) for key, label in rows], scenario,
                         scenario.request_for(kind, scale), kind, servers, down, round_number, log)
                for count in extra:
                    _one([(cells[key][matched(count)], label) for key, label in rows], scenario,
                         replace(scenario.request_for(APPLIANCE, scale), msgs=count), APPLIANCE, servers, down,
                         round_number, log, name=matched(count))
                if scenario.c_reference:
                    _one_reference([(cells[key][REFERENCE], label) for key, label in rows], request,
                                   servers.get((NATS_DEFAULT.name, scenario.nodes)), round_number, log)
    finally:
        if own:
            pool.stop()
    return cells


def run_failovers(pool: ServerPool, targets: tuple[ServerKind, ...], kills: int,
                  log: Log = print) -> dict[str, FailoverResult]:
    """The failover measurement on a three-node cluster of each target, one target after the other."""
    results: dict[str, FailoverResult] = {}
    for kind in targets:
        _ensure_started(kind, 3, pool.servers, pool.down, log)
        down = pool.down.get((kind.name, 3))
        results[kind.name] = (FailoverResult(failure=down) if down is not None
                              else run_failover(pool.servers[(kind.name, 3)], kills, log=log))
    return results


def place_client(server: RunningServer, request: BenchRequest,
                 client_on: replicas.ClientOn) -> tuple[BenchRequest, str]:
    """Create the request's replicated stream (from node 1), wait until it is healthy, and point the
    clients at the stream leader's node or a follower's: (the request to run, that node's name)."""
    conn = Connection(Endpoint.parse(server.url), name="bench-place")
    try:
        name = plan.stream_name(request)
        jsapi.delete_stream(conn, name)
        jsapi.create_stream(conn, plan.stream_config_of(request))
        info = replicas.wait_healthy(conn, name, request.replicas)
    finally:
        conn.close()
    names = [node.name for node in server.nodes]
    index = replicas.node_for(names, replicas.group_of(info), client_on)
    return replace(request, url=server.urls[index], stream_ready=True), names[index]


def _ensure_started(kind: ServerKind, nodes: int, servers: dict[ServerKey, RunningServer],
                    down: dict[ServerKey, str], log: Log) -> None:
    """Start each kind and size of server once, when a scenario first needs it."""
    key = (kind.name, nodes)
    if key in servers or key in down:
        return
    try:
        servers[key] = start(kind, nodes=nodes)
    except ServerStartFailed as exc:
        where = "" if nodes == 1 else f" ({nodes}-node cluster)"
        down[key] = failure_text(exc)
        log(f"{kind.name}{where}: {down[key]}")


def _one(rows: list[tuple[Cell, str]], scenario: Scenario, request: BenchRequest, kind: ServerKind,
         servers: dict[ServerKey, RunningServer], down: dict[ServerKey, str], round_number: int, log: Log,
         *, name: str = "") -> None:
    """One run of a scenario against one server; each (cell, report row) pair records its figure."""
    name = name or kind.name
    key = (kind.name, scenario.nodes)
    cells = [cell for cell, _ in rows]
    if key in down:
        for cell in cells:
            cell.failure = down[key]
        return
    if cells[0].failure:
        return  # it failed in an earlier round: do not hammer it again
    server = servers[key]
    if server.dead_node() is not None:
        down[key] = failure_text(RuntimeError(f"server exited: {server.reason()}"))
        for cell in cells:
            cell.failure = down[key]
        return
    try:
        sub_url = server.urls[1] if scenario.across_nodes else ""
        request = replace(request, url=server.url, sub_url=sub_url)
        node = ""
        if scenario.client_on is not None:
            request, node = place_client(server, request, scenario.client_on)
        report = run_bench(request, server_pids=server.pids, settle=True)
        for cell, label in rows:
            record(cell, report, label, workers=server.workers())
        where = cells[0].placement[-1] if cells[0].placement else ""
        log(f"round {round_number + 1} {scenario.key:18} {name:24} {cells[0].msgs_per_s[-1]:>12,.0f} msgs/s"
            + (f"  client on {where}" if where else "")
            + (f"  client on {scenario.client_on} {node}" if node else ""))
    except Exception as exc:  # noqa: BLE001 - any failure is a result to show, with its reason
        for cell in cells:
            cell.failure = failure_text(exc)
        log(f"round {round_number + 1} {scenario.key:18} {name:24} {cells[0].failure}")


def _one_reference(rows: list[tuple[Cell, str]], request: BenchRequest, server: RunningServer | None,
                   round_number: int, log: Log) -> None:
    """The C reference client against nats-server (defaults) for the same message count and size."""
    cells = [cell for cell, _ in rows]
    if cells[0].failure:
        return
    try:
        if server is None:
            raise reference.ReferenceUnavailable("nats-server (defaults) is not among the targets or did not start")
        figures = reference.run_reference(reference.build(), server.url, request.msgs, request.size)
    except (reference.ReferenceUnavailable, OSError) as exc:
        for cell in cells:
            cell.failure = f"not measured: {exc}"
        log(f"round {round_number + 1} C reference: {cells[0].failure}")
        return
    for cell, label in rows:
        cell.msgs_per_s.append(getattr(figures, REFERENCE_FIGURES[label]))
        cell.load_average.append(os.getloadavg()[0])
    log(f"round {round_number + 1} C reference client vs nats-server {cells[0].msgs_per_s[-1]:>12,.0f} msgs/s")


def write_results(cells: dict[str, dict[str, Cell]], scenarios: tuple[Scenario, ...],
                  targets: tuple[ServerKind, ...], *, rounds: int, scale: float, out_dir: Path,
                  command: str = "", failovers: dict[str, FailoverResult] | None = None,
                  kills: int = 0) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    info = machine.describe()
    text = markdown(cells, scenarios, targets, info=info, rounds=rounds, scale=scale, command=command)
    if failovers:
        text += "\n".join(failover_lines(failovers, kills)) + "\n"
    payload = {"machine": info, "command": command, "rounds": rounds, "scale": scale,
               "targets": [t.name for t in targets], "not_yet": NOT_YET,
               "scenarios": [{"key": s.key, "title": s.title, "headline": s.headline,
                              "reference_msgs_per_s": s.reference_msgs_per_s,
                              "request": asdict(scaled(s.request, scale)),
                              "requests": {t.name: asdict(s.request_for(t, scale)) for t in targets},
                              "results": {name: asdict(cell) for name, cell in cells[s.key].items()}}
                             for s in scenarios],
               "failover": {"kills": kills,
                            "results": {name: asdict(r) for name, r in (failovers or {}).items()}}}
    for name in (f"bench-{stamp}", "latest"):
        (out_dir / f"{name}.md").write_text(text)
        (out_dir / f"{name}.json").write_text(json.dumps(payload, indent=2))
    write_chart(cells, scenarios, targets, out_dir / "latest.png")
    (out_dir / f"bench-{stamp}.png").write_bytes((out_dir / "latest.png").read_bytes())
    return out_dir / "latest.md"


def select(only: str) -> tuple[tuple[Scenario, ...], bool]:
    """The scenarios `--only` names (keys or shell patterns such as `r3-*`; empty: all) and whether
    the failover measurement (key r3-failover) is among them; derived rows bring their source."""
    patterns = [k.strip() for k in only.split(",") if k.strip()]
    if not patterns:
        return SCENARIOS, True
    keys = [s.key for s in SCENARIOS] + [FAILOVER_KEY]
    unknown = [p for p in patterns if not fnmatch.filter(keys, p)]
    if unknown:
        raise click.BadParameter(f"unknown scenarios {unknown}; known: {keys}")
    wanted = {key for key in keys if any(fnmatch.fnmatchcase(key, p) for p in patterns)}
    wanted |= {s.derived_from for s in SCENARIOS if s.key in wanted and s.derived_from}
    return tuple(s for s in SCENARIOS if s.key in wanted), FAILOVER_KEY in wanted


def failed_failovers(failovers: dict[str, FailoverResult], name: str = APPLIANCE.name) -> list[str]:
    """Why a server's failover measurement failed: an error, or an acknowledged message lost or duplicated."""
    result = failovers.get(name)
    if result is None:
        return []
    problems = [result.failure] if result.failure else []
    if result.lost or result.duplicated:
        problems.append(f"{result.lost} acknowledged messages lost, {result.duplicated} duplicated")
    return problems


@click.command()
@click.option("--rounds", type=int, default=None,
              help=f"A B C rounds per scenario (medians); default {FULL['rounds']}")
@click.option("--scale", type=float, default=None,
              help=f"multiply every scenario's message count; default {FULL['scale']}")
@click.option("--kills", type=int, default=None,
              help=f"failover: kill -9 of the R3 stream leader, times; default {FULL['kills']}")
@click.option("--quick", is_flag=True,
              help=f"a short run: {QUICK['rounds']} round, scale {QUICK['scale']}, {QUICK['kills']} kills "
              "(each unless given)")
@click.option("--only", default="",
              help=f"comma-separated scenario keys or patterns (r3-*, {FAILOVER_KEY}); default: all")
@click.option("--targets", "target_names", default="", help="comma-separated: nats-server,nats-server sync=always,appliance")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=RESULTS_DIR, show_default=True)
def main(rounds: int | None, scale: float | None, kills: int | None, quick: bool, only: str,
         target_names: str, out_dir: Path) -> None:
    """Run the side-by-side benchmark and print the markdown table."""
    preset = QUICK if quick else FULL
    rounds = int(preset["rounds"]) if rounds is None else rounds
    scale = float(preset["scale"]) if scale is None else scale
    kills = int(preset["kills"]) if kills is None else kills
    if rounds < 1 or scale <= 0 or kills < 1:
        raise click.BadParameter("--rounds and --kills must be >= 1, --scale > 0")
    scenarios, with_failover = select(only)
    names = {n.strip() for n in target_names.split(",") if n.strip()}
    targets = tuple(t for t in TARGETS if not names or t.name in names)
    if not targets:
        raise click.BadParameter(f"no known target in {sorted(names)}")

    def log(line: str) -> None:
        click.echo(line, err=True)

    pool = ServerPool()
    try:
        cells = run_all(scenarios, targets, rounds=rounds, scale=scale, log=log, pool=pool)
        failovers = run_failovers(pool, targets, kills, log) if with_failover else {}
    finally:
        pool.stop()
    path = write_results(cells, scenarios, targets, rounds=rounds, scale=scale, out_dir=out_dir,
                         command=command_line(), failovers=failovers, kills=kills)
    click.echo(path.read_text())
    click.echo(f"written: {path}, {path.with_suffix('.json')}, {path.with_suffix('.png')}", err=True)
    failed = failed_cells(cells) + [(FAILOVER_KEY, why) for why in failed_failovers(failovers)]
    if failed:
        for key, failure in failed:
            click.echo(f"appliance {key}: {failure}", err=True)
        raise SystemExit(f"{len(failed)} appliance scenario(s) failed (see above)")


def command_line() -> str:
    """How this run was started, for the table: `make bench ARGS="..."` runs this module."""
    return " ".join(["python -m appliance.bench.compare", *(shlex.quote(arg) for arg in sys.argv[1:])])


if __name__ == "__main__":
    main()
