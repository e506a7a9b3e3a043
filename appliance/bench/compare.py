"""`make bench`: appliance side by side with the real nats-server 2.15.1.

Starts nats-server (defaults), nats-server with `jetstream { sync_interval: always }` (durable like
appliance's default) and appliance (`appliance run -a 127.0.0.1 -p PORT -js -sd DIR`), each on a free
127.0.0.1 port (and, for the R3 scenarios, a three-node cluster of each, started when first
needed), then runs every scenario against each server in turn (A B C A B C ...) for
--rounds rounds, and writes the medians with appliance/nats-server ratios as a markdown table
plus a PNG bar chart to bench-results/. The pub+sub scenario also runs the C reference client
(appliance/bench/reference.py) against nats-server in every round: its median is the reference
column of that row, measured on the same machine at the same time.

Nothing is left out of the table. A scenario appliance does not support yet is declared by name
in NOT_YET (with why) and shown as "cannot run yet: ..." without being run; anything else that
goes wrong (a timeout, an exception, a server that exits) is "failed: ...", and the command exits
1 when any appliance scenario failed. A ratio only divides runs of the same message count: where
nats-server sync=always runs fewer messages (it fsyncs each one), appliance also runs that count
in every round (cell MATCHED) and the sync=always ratio uses it.

    .venv/bin/python -m appliance.bench.compare [--rounds 3] [--scale 1.0] [--only pub,js-pub-sync]
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import click

from appliance.bench import machine, reference
from appliance.bench.chart import write_chart
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
from appliance.bench.stats import median
from appliance.bench.table import REFERENCE, markdown

RESULTS_DIR = Path("bench-results")
REFERENCE_FIGURES = {"pub total": "pub", "sub total": "sub", "pub+sub total": "total"}
TARGETS: tuple[ServerKind, ...] = (NATS_DEFAULT, NATS_SYNC_ALWAYS, APPLIANCE)
ServerKey = tuple[str, int]  # (server kind name, nodes)
Log = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class Scenario:
    key: str
    title: str
    request: BenchRequest
    headline: str  # the report row compared across servers
    reference_msgs_per_s: float | None = None  # nats-server 2.15.1 with a C client on this machine
    nodes: int = 1  # 3: every server kind runs as a three-node cluster
    across_nodes: bool = False  # subscribers/responders on node 2, publishers/requesters on node 1
    derived_from: str = ""  # not run itself: another row (`headline`) of that scenario's runs
    c_reference: bool = False  # every round also runs the C reference client against nats-server
    # messages against nats-server sync=always (before --scale), when fewer than `request.msgs`: it
    # fsyncs every message, so its async publish (and the prefill of a fetch/push run) takes ~40 s
    # per 100 k messages; a rate needs far fewer
    always_msgs: int | None = None

    def request_for(self, kind: ServerKind, scale: float) -> BenchRequest:
        """The scaled request run against one kind of server."""
        request = scaled(self.request, scale)
        if kind.sync_always and self.always_msgs is not None:
            request = replace(request, msgs=min(request.msgs, max(10, int(self.always_msgs * scale))))
        return request


ALWAYS_MSGS = 20_000  # nats-server sync=always fsyncs every message (~2.5 k/s): its async/prefill counts


def _js_rows() -> tuple[Scenario, ...]:
    """The issue's JetStream rows, at 128 B and 1 KiB: async publish (window 256), sync publish
    (p50/p99 in the latency table), fetch with ack explicit and ack all."""
    rows: list[Scenario] = []
    for size, tag, label in ((128, "", "128 B"), (1024, "-1k", "1 KiB")):
        rows += [
            Scenario(f"js-pub-async{tag}", f"JS R1 async pub {label}, window 256",
                     BenchRequest("js-pub", msgs=200_000, window=256, size=size), "js-pub total",
                     140_000 if size == 128 else None, always_msgs=ALWAYS_MSGS),
            # one fsync per message on every durable server: the 1 KiB row takes half as many
            Scenario(f"js-pub-sync{tag}", f"JS R1 sync pub {label}",
                     BenchRequest("js-pub", msgs=20_000 if size == 128 else 10_000, window=0, size=size),
                     "js-pub total", 10_600 if size == 128 else None),
            Scenario(f"js-fetch-explicit{tag}", f"JS R1 fetch {label} batch 500, ack explicit",
                     BenchRequest("js-fetch", msgs=200_000, batch=500, ack="explicit", size=size),
                     "js-fetch total", 90_000 if size == 128 else None, always_msgs=ALWAYS_MSGS),
            Scenario(f"js-fetch-all{tag}", f"JS R1 fetch {label} batch 500, ack all",
                     BenchRequest("js-fetch", msgs=200_000, batch=500, ack="all", size=size), "js-fetch total",
                     142_000 if size == 128 else None, always_msgs=ALWAYS_MSGS),
        ]
    return tuple(rows)


# Core NATS across a route (issue 13): two-node clusters of each kind, publisher (requester) on n1,
# subscriber (responder) on n2. benchmarks/cluster.py runs these rows with a 1-worker appliance too.
CLUSTER_SCENARIOS: tuple[Scenario, ...] = (
    Scenario("cluster-pubsub", "2-node cluster: pub n1 → sub n2 128 B (sub rate)",
             BenchRequest("pubsub", msgs=400_000), "sub total", nodes=2, across_nodes=True),
    Scenario("cluster-pubsub-1k", "2-node cluster: pub n1 → sub n2 1 KiB (sub rate)",
             BenchRequest("pubsub", msgs=200_000, size=1024), "sub total", nodes=2, across_nodes=True),
    Scenario("cluster-request", "2-node cluster: request n1 → reply n2 128 B",
             BenchRequest("request", msgs=10_000), "request total", nodes=2, across_nodes=True),
)


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("pub", "core pub 128 B", BenchRequest("pub", msgs=2_000_000), "pub total", 2_500_000),
    Scenario("pubsub", "core pub+sub 128 B (sub rate)", BenchRequest("pubsub", msgs=1_000_000), "sub total",
             990_000, c_reference=True),
    # nats bench's "Pub/Sub stats" line: published plus received messages over the whole run
    Scenario("pubsub-total", "core pub+sub 128 B (pub+sub total, as nats bench's Pub/Sub stats)",
             BenchRequest("pubsub", msgs=1_000_000), "pub+sub total", 990_000, derived_from="pubsub"),
    Scenario("request", "core request/reply 128 B", BenchRequest("request", msgs=20_000), "request total"),
    *_js_rows(),
    # push is timed from the first message to the last: a run needs enough messages to last
    Scenario("js-push", "JS R1 push, ack none", BenchRequest("js-push", msgs=200_000, ack="none"), "js-push total",
             always_msgs=5 * ALWAYS_MSGS),
    Scenario("kv-put", "KV put 128 B (sync)", BenchRequest("kv-put", msgs=10_000), "kv-put total"),
    Scenario("kv-get", "KV get 128 B (direct get)", BenchRequest("kv-get", msgs=20_000), "kv-get total"),
    Scenario("r3-js-pub-async", "3-node cluster: JS R3 async pub 128 B, window 256",
             BenchRequest("js-pub", msgs=100_000, window=256, replicas=3), "js-pub total", nodes=3,
             always_msgs=ALWAYS_MSGS),
    Scenario("r3-js-pub-sync", "3-node cluster: JS R3 sync pub 128 B",
             BenchRequest("js-pub", msgs=5_000, window=0, replicas=3), "js-pub total", nodes=3),
    Scenario("r3-js-fetch-explicit", "3-node cluster: JS R3 fetch batch 500, ack explicit",
             BenchRequest("js-fetch", msgs=100_000, batch=500, ack="explicit", replicas=3), "js-fetch total", nodes=3,
             always_msgs=ALWAYS_MSGS),
    *CLUSTER_SCENARIOS,
)


# Scenarios the server does not support yet, by key, with why: appliance is not run on them and the
# table says "cannot run yet: <why>". Everything else that does not produce a figure has failed.
NOT_YET: dict[str, str] = {
    key: "JetStream clustering (replicas > 1 across routed nodes) is not built yet (issue 14)"
    for key in ("r3-js-pub-async", "r3-js-pub-sync", "r3-js-fetch-explicit")
}


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


def scaled(request: BenchRequest, scale: float) -> BenchRequest:
    return replace(request, msgs=max(10, int(request.msgs * scale)), keys=min(request.keys, max(10, int(1000 * scale))))


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
            log: Log = print) -> dict[str, dict[str, Cell]]:
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
    servers: dict[ServerKey, RunningServer] = {}
    down: dict[ServerKey, str] = {}
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
        for server in servers.values():
            server.stop()
    return cells


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
        report = run_bench(replace(request, url=server.url, sub_url=sub_url), server_pids=server.pids, settle=True)
        for cell, label in rows:
            record(cell, report, label, workers=server.workers())
        where = cells[0].placement[-1] if cells[0].placement else ""
        log(f"round {round_number + 1} {scenario.key:18} {name:24} {cells[0].msgs_per_s[-1]:>12,.0f} msgs/s"
            + (f"  client on {where}" if where else ""))
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
                  command: str = "") -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    info = machine.describe()
    text = markdown(cells, scenarios, targets, info=info, rounds=rounds, scale=scale, command=command)
    payload = {"machine": info, "command": command, "rounds": rounds, "scale": scale,
               "targets": [t.name for t in targets], "not_yet": NOT_YET,
               "scenarios": [{"key": s.key, "title": s.title, "headline": s.headline,
                              "reference_msgs_per_s": s.reference_msgs_per_s,
                              "request": asdict(scaled(s.request, scale)),
                              "requests": {t.name: asdict(s.request_for(t, scale)) for t in targets},
                              "results": {name: asdict(cell) for name, cell in cells[s.key].items()}}
                             for s in scenarios]}
    for name in (f"bench-{stamp}", "latest"):
        (out_dir / f"{name}.md").write_text(text)
        (out_dir / f"{name}.json").write_text(json.dumps(payload, indent=2))
    write_chart(cells, scenarios, targets, out_dir / "latest.png")
    (out_dir / f"bench-{stamp}.png").write_bytes((out_dir / "latest.png").read_bytes())
    return out_dir / "latest.md"


@click.command()
@click.option("--rounds", default=3, show_default=True, help="A B C rounds per scenario (medians are reported)")
@click.option("--scale", default=1.0, show_default=True, help="multiply every scenario's message count")
@click.option("--only", default="", help="comma-separated scenario keys (default: all)")
@click.option("--targets", "target_names", default="", help="comma-separated: nats-server,nats-server sync=always,appliance")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=RESULTS_DIR, show_default=True)
def main(rounds: int, scale: float, only: str, target_names: str, out_dir: Path) -> None:
    """Run the side-by-side benchmark and print the markdown table."""
    wanted = {k.strip() for k in only.split(",") if k.strip()}
    unknown = wanted - {s.key for s in SCENARIOS}
    if unknown:
        raise click.BadParameter(f"unknown scenarios {sorted(unknown)}; known: {[s.key for s in SCENARIOS]}")
    wanted |= {s.derived_from for s in SCENARIOS if s.key in wanted and s.derived_from}
    scenarios = tuple(s for s in SCENARIOS if not wanted or s.key in wanted)
    names = {n.strip() for n in target_names.split(",") if n.strip()}
    targets = tuple(t for t in TARGETS if not names or t.name in names)
    if not targets:
        raise click.BadParameter(f"no known target in {sorted(names)}")
    cells = run_all(scenarios, targets, rounds=rounds, scale=scale,
                    log=lambda line: click.echo(line, err=True))
    path = write_results(cells, scenarios, targets, rounds=rounds, scale=scale, out_dir=out_dir,
                         command=command_line())
    click.echo(path.read_text())
    click.echo(f"written: {path}, {path.with_suffix('.json')}, {path.with_suffix('.png')}", err=True)
    failed = failed_cells(cells)
    if failed:
        for key, failure in failed:
            click.echo(f"appliance {key}: {failure}", err=True)
        raise SystemExit(f"{len(failed)} appliance scenario(s) failed (see above)")


def command_line() -> str:
    """How this run was started, for the table: `make bench ARGS="..."` runs this module."""
    return " ".join(["python -m appliance.bench.compare", *(shlex.quote(arg) for arg in sys.argv[1:])])


if __name__ == "__main__":
    main()
