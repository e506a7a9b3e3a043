"""The markdown tables of a comparison: medians per scenario and server, ratios, CPU shares."""

from __future__ import annotations

from typing import TYPE_CHECKING

from appliance.bench.servers import APPLIANCE, NATS_DEFAULT, NATS_SYNC_ALWAYS, ServerKind
from appliance.bench.stats import median

if TYPE_CHECKING:
    from appliance.bench.compare import Cell, Scenario
    from appliance.bench.failover import FailoverResult

REFERENCE = "C reference client"  # the cells of native/bench/reference/pubsub.c against nats-server


def rate_text(cell: Cell) -> str:
    value = cell.median_rate()
    if value is None:
        return cell.failure or "no result"
    return f"{value:,.0f}" + (f" (then {cell.failure})" if cell.failure else "")


def ratio_text(top: Cell | None, bottom: Cell | None) -> str:
    """top / bottom of the medians; never of runs of different message counts."""
    if top is None or bottom is None:
        return "–"
    if top.msgs and bottom.msgs and top.msgs != bottom.msgs:
        return f"– ({top.msgs:,} vs {bottom.msgs:,} msgs)"
    a, b = top.median_rate(), bottom.median_rate()
    if a is None or b is None or b == 0:
        return "–"
    return f"{a / b:.2f}"


def appliance_for(row: dict[str, Cell], other: Cell | None) -> Cell | None:
    """appliance's cell with the same message count as `other` (its matched-count runs when its own
    request ran more), else its main cell."""
    main = row.get(APPLIANCE.name)
    if other is None or main is None or not other.msgs or main.msgs in (0, other.msgs):
        return main
    return row.get(f"{APPLIANCE.name} at {other.msgs:,} msgs", main)


def reference_of(scenario: Scenario, row: dict[str, Cell]) -> tuple[float | None, str]:
    """The reference figure: the C reference client measured in this run when there is one (marked
    "measured"), else the issue's figure for this machine."""
    live = row.get(REFERENCE)
    rate = None if live is None else live.median_rate()
    if rate is not None:
        return rate, f"{rate:,.0f} measured"
    if live is not None and live.failure and scenario.reference_msgs_per_s is None:
        return None, live.failure
    return scenario.reference_msgs_per_s, _num(scenario.reference_msgs_per_s, ",.0f")


def _num(value: float | None, fmt: str) -> str:
    return "–" if value is None else format(value, fmt)


def markdown(cells: dict[str, dict[str, Cell]], scenarios: tuple[Scenario, ...], targets: tuple[ServerKind, ...],
             *, info: dict[str, str], rounds: int, scale: float, command: str = "") -> str:
    names = [t.name for t in targets]
    lines = [
        "## Benchmark: appliance vs nats-server 2.15.1",
        "",
        (f"Machine: {info['cpu']}, {info['cores']} cores, {info['memory_gib']} GiB, Linux {info['kernel']}, "
         f"Python {info['python']}, {info['nats_server']}; load average at the end {info['load_average']}; "
         f"{info['date']}. Load generator: `appliance bench` (scan: {info['bench_scan']}). "
         f"Medians of {rounds} alternating rounds (A B C ...), message counts x{scale:g}. "
         "msgs/s of the scenario's headline row; all servers on 127.0.0.1, sharing the machine with the clients. "
         "Reference: the C reference client (native/bench/reference/pubsub.c) against nats-server in the same "
         "rounds where it says measured, else the issue's C-client figure for this machine."),
        "",
        *([f"Command: `{command}`", ""] if command else []),
        "| scenario | " + " | ".join(f"{n} msgs/s" for n in names) + " | appliance / nats-server | "
        "appliance / nats-server sync=always | reference (C client) | nats-server / reference |",
        "|---|" + "---:|" * (len(names) + 4),
    ]
    for s in scenarios:
        row = cells[s.key]
        reference, reference_text = reference_of(s, row)
        nats, always = row.get(NATS_DEFAULT.name), row.get(NATS_SYNC_ALWAYS.name)
        nats_rate = None if nats is None else nats.median_rate()
        vs_reference = "–" if reference is None or nats_rate is None else f"{nats_rate / reference:.2f}"
        lines.append(f"| {s.title} | " + " | ".join(rate_text(row[n]) for n in names) + " | "
                     f"{ratio_text(appliance_for(row, nats), nats)} | "
                     f"{ratio_text(appliance_for(row, always), always)} | "
                     f"{reference_text} | {vs_reference} |")
    lines += ["", "Latency p50 / p99 (µs; async publish: publish to ack; fetch: pull request to its last "
              "message; sync publish, KV, request: round trip), CPU (cores busy, of " + info["cores"] + "), the "
              "server's CPU per message (µs; independent of the share of the cores the scheduler gave it) and the "
              "machine's 1-minute load average (other work shares these cores) — medians:", "",
              "| scenario | " + " | ".join(f"{n} p50 / p99 µs / client CPU / server CPU / server µs per msg / load"
                                          for n in names) + " |",
              "|---|" + "---:|" * len(names)]
    for s in scenarios:
        parts = []
        for n in names:
            c = cells[s.key][n]
            if not c.msgs_per_s:
                parts.append("–")
                continue
            parts.append(f"{_num(c.median_of(c.p50_us), ',.0f')} / {_num(c.median_of(c.p99_us), ',.0f')} / "
                         f"{_num(c.median_of(c.client_cores), '.2f')} / "
                         f"{_num(c.median_of(c.server_cores), '.2f')} / {_num(c.median_of(c.server_us_per_msg), ',.1f')} / "
                         f"{_num(c.median_of(c.load_average), '.1f')}")
        lines.append(f"| {s.title} | " + " | ".join(parts) + " |")
    lines += placement_lines(cells, scenarios, names)
    lines += message_count_lines(cells, scenarios, names)
    return "\n".join(lines) + "\n"


def placement_lines(cells: dict[str, dict[str, Cell]], scenarios: tuple[Scenario, ...], names: list[str]) -> list[str]:
    """Per round, the appliance worker the client landed on (the kernel picks: INFO's client_id
    tells which) next to that round's rate: a client on a worker that does not own the stream is
    relayed over the ring."""
    rows = []
    for s in scenarios:
        for n in names:
            c = cells[s.key][n]
            if c.placement and len(c.placement) == len(c.msgs_per_s):
                rounds = ", ".join(f"{where} {rate:,.0f}" for where, rate in zip(c.placement, c.msgs_per_s))
                by_worker: dict[str, list[float]] = {}
                for where, rate in zip(c.placement, c.msgs_per_s):
                    by_worker.setdefault(where, []).append(rate)
                medians = ", ".join(f"{where} {median(rates):,.0f} ({len(rates)})"
                                    for where, rates in sorted(by_worker.items()))
                rows.append(f"| {s.title} | {n} | {rounds} | {medians} |")
    if not rows:
        return []
    return ["", "Client placement on appliance's workers, per round (worker: msgs/s of that round), and the "
            "median per placement (rounds):", "",
            "| scenario | server | rounds | median by placement |", "|---|---|---|---|", *rows]


def message_count_lines(cells: dict[str, dict[str, Cell]], scenarios: tuple[Scenario, ...],
                        names: list[str]) -> list[str]:
    """Rows where a server ran fewer messages than the others (nats-server sync=always, which
    fsyncs each message), with appliance's rate at that count: the ratio column uses it."""
    notes = []
    for s in scenarios:
        counts = {n: cells[s.key][n].msgs for n in names if cells[s.key][n].msgs}
        if len(set(counts.values())) > 1:
            extra = [f"{name} {rate_text(cell)} msgs/s" for name, cell in cells[s.key].items()
                     if name.startswith(f"{APPLIANCE.name} at ")]
            notes.append(f"{s.title}: " + ", ".join(f"{n} {count:,}" for n, count in counts.items())
                         + (f" ({', '.join(extra)})" if extra else ""))
    if not notes:
        return []
    return ["", "Messages per run where they differ (a ratio divides runs of the same count: appliance also ran "
            "the smaller count in every round): " + "; ".join(notes) + "."]


def _ms(seconds: float | None) -> str:
    return "–" if seconds is None else f"{seconds * 1e3:,.0f}"


def failover_row(name: str, result: FailoverResult) -> str:
    """One server's failover figures: kills done, p50/p99/max ms to the first PubAck, the read-back check."""
    done = len(result.seconds)
    worst = max(result.seconds) if result.seconds else None
    attempts = "–" if not result.attempts else f"{median([float(a) for a in result.attempts]):g}"
    if result.checked:
        check = ("none lost or duplicated" if not (result.lost or result.duplicated)
                 else f"{result.lost} lost, {result.duplicated} duplicated: {', '.join(result.examples)}")
        check = f"{result.acked:,} acked, {result.stored:,} stored: {check}" + (
            f" ({result.unacked} stored without an ack)" if result.unacked else "")
    else:
        check = "not checked"
    return (f"| {name} | {done} | {_ms(result.p50_s())} | {_ms(result.p99_s())} | {_ms(worst)} | "
            f"{attempts} | {check} | {result.failure or 'ok'} |")


def failover_lines(results: dict[str, FailoverResult], kills: int) -> list[str]:
    """The failover table of a comparison (appliance/bench/failover.py)."""
    return ["", "Failover of an R3 stream on 3 nodes: kill -9 of the stream leader's node, then the time to "
            "the first PubAck of a client connected to a follower's node (publishing again every 100 ms, or "
            f"10 ms after a refusal); kills asked: {kills}, the killed node restarted and the stream healthy "
            "again before the next. Every publish carries a Nats-Msg-Id; at the end the stream is read back:",
            "",
            "| server | kills | p50 ms | p99 ms | max ms | attempts (median) | acknowledged vs stored "
            "| result |",
            "|---|---:|---:|---:|---:|---:|---|---|",
            *(failover_row(name, result) for name, result in results.items())]
