"""The result of one bench run: per-client and per-role figures, totals, CPU shares; as a table
(what a person reads) or JSON (what scripts read)."""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass

from appliance.bench.orchestrate import Outcome
from appliance.bench.plan import Plan
from appliance.bench.scan import NATIVE
from appliance.bench.spec import ClientResult
from appliance.bench.stats import LatencySummary, Rate, aggregate, merge_summary

CLIENT_BUSY_WARN = 0.9  # a client process this busy may be what limits the figures
COLUMNS = ("client", "msgs", "msgs/s", "MB/s", "p50 µs", "p90 µs", "p99 µs", "max µs", "errors")


@dataclass(frozen=True, slots=True)
class Row:
    label: str
    rate: Rate
    latency: LatencySummary | None
    errors: int

    def as_dict(self) -> dict[str, object]:
        return {"client": self.label, "msgs": self.rate.msgs, "bytes": self.rate.bytes,
                "elapsed_s": self.rate.elapsed_s, "msgs_per_s": self.rate.msgs_per_s,
                "mb_per_s": self.rate.mb_per_s, "errors": self.errors,
                "latency": None if self.latency is None else self.latency.as_dict()}

    def cells(self) -> list[str]:
        lat = self.latency
        figures = [self.label, f"{self.rate.msgs:,}", f"{self.rate.msgs_per_s:,.0f}", f"{self.rate.mb_per_s:,.1f}"]
        if lat is None:
            latencies = ["-"] * 4
        else:
            latencies = [f"{ns / 1e3:,.0f}" for ns in (lat.p50_ns, lat.p90_ns, lat.p99_ns, lat.max_ns)]
        return figures + latencies + [str(self.errors)]


@dataclass(frozen=True, slots=True)
class BenchReport:
    plan: Plan
    clients: list[Row]
    totals: list[Row]
    wall_s: float
    client_cpu_s: float
    server_cpu_s: float | None
    first_error: str
    cores: int
    busiest_client: tuple[str, float] = ("", 0.0)  # label, CPU seconds per second of its own run
    role_cpu_s: tuple[tuple[str, float], ...] = ()  # CPU seconds of each role's clients together
    client_ids: tuple[int, ...] = ()  # INFO client_id of each client's connection, in client order

    @property
    def errors(self) -> int:
        return sum(row.errors for row in self.clients)

    def headline(self) -> Row:
        """The figure a comparison uses: the total of the role being measured."""
        return self.totals[-1]

    def as_dict(self) -> dict[str, object]:
        req = self.plan.request
        return {
            "verb": req.verb, "url": req.url, "msgs": req.msgs, "size": req.size,
            "params": {k: getattr(req, k) for k in req.__dataclass_fields__},
            "native_scan": NATIVE, "clients": [r.as_dict() for r in self.clients],
            "totals": [r.as_dict() for r in self.totals], "wall_s": self.wall_s,
            "cpu": {"cores": self.cores, "client_s": self.client_cpu_s, "server_s": self.server_cpu_s,
                    "client_share": self.client_cpu_s / self.wall_s if self.wall_s else 0.0,
                    "server_share": (self.server_cpu_s / self.wall_s
                                     if self.server_cpu_s is not None and self.wall_s else None),
                    "roles": {role: {"cpu_s": cpu, "share": cpu / self.wall_s if self.wall_s else 0.0}
                              for role, cpu in self.role_cpu_s}},
            "errors": self.errors, "first_error": self.first_error,
            "busiest_client": {"client": self.busiest_client[0], "cpu_share": self.busiest_client[1]},
            "client_ids": list(self.client_ids),
        }

    def table(self) -> str:
        rows = [list(COLUMNS)] + [r.cells() for r in self.clients] + [r.cells() for r in self.totals]
        widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
        lines = [self._title()]
        for n, row in enumerate(rows):
            if n == 1 or n == 1 + len(self.clients):
                lines.append("  ".join("-" * w for w in widths))
            lines.append("  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in
                                   enumerate(zip(row, widths))))
        lines.extend(self._spread_lines())
        lines.append(self._cpu_line())
        label, share = self.busiest_client
        if share >= CLIENT_BUSY_WARN:
            lines.append(f"note: {label} was busy {share:.0%} of its run: the load generator may be the limit here")
        if self.first_error:
            lines.append(f"errors: {self.errors}, first: {self.first_error}")
        return "\n".join(lines)

    def _spread_lines(self) -> list[str]:
        """For roles with several clients: how even they were (nats bench prints the same)."""
        lines = []
        roles: dict[str, list[float]] = {}
        for row in self.clients:
            roles.setdefault(row.label.split(" #")[0], []).append(row.rate.msgs_per_s)
        for role, rates in roles.items():
            if len(rates) > 1:
                lines.append(f"{role}: min {min(rates):,.0f} | avg {statistics.fmean(rates):,.0f} | "
                             f"max {max(rates):,.0f} | stddev {statistics.pstdev(rates):,.0f} msgs/s per client")
        return lines

    def _title(self) -> str:
        req = self.plan.request
        parts = [f"appliance bench {req.verb.replace('-', ' ')}", f"url={req.url}", f"msgs={req.msgs:,}",
                 f"size={req.size} B"]
        if req.verb.startswith(("js-", "kv-")):
            parts += [f"storage={req.storage}", f"replicas={req.replicas}"]
        if req.verb == "js-pub":
            parts.append("sync" if req.window == 0 else f"window={req.window}")
        if req.verb == "js-fetch":
            parts += [f"batch={req.batch}", f"ack={req.ack}"]
        if req.verb == "js-push":
            parts.append(f"ack={req.ack}")
        parts.append("scan=C" if NATIVE else "scan=python")
        return "  ".join(parts)

    def _cpu_line(self) -> str:
        wall = self.wall_s or 1e-9
        text = (f"CPU over {self.wall_s:.2f}s: clients {self.client_cpu_s / wall:.2f} cores "
                f"({100 * self.client_cpu_s / wall / self.cores:.0f}% of {self.cores})")
        if len(self.role_cpu_s) > 1:
            text += " [" + ", ".join(f"{role} {cpu / wall:.2f}" for role, cpu in self.role_cpu_s) + "]"
        if self.server_cpu_s is not None:
            text += (f", server {self.server_cpu_s / wall:.2f} cores "
                     f"({100 * self.server_cpu_s / wall / self.cores:.0f}% of {self.cores})")
        return text


def _row(label: str, results: list[ClientResult]) -> Row:
    latency = merge_summary([(r.latency_samples, r.latency_count, r.latency_max_ns) for r in results])
    return Row(label, aggregate([r.rate for r in results]), latency, sum(r.errors for r in results))


def build_report(plan: Plan, outcome: Outcome) -> BenchReport:
    clients = [_row(f"{r.role} #{r.index}", [r]) for r in outcome.clients]
    roles: list[str] = []
    for r in outcome.clients:
        if r.role not in roles:
            roles.append(r.role)
    totals = [_row(f"{role} total", [r for r in outcome.clients if r.role == role]) for role in roles]
    if plan.request.verb == "pubsub":
        totals.append(_row("pub+sub total", outcome.clients))
    elif plan.request.verb == "request" and len(totals) > 1:
        totals.append(totals.pop(0))  # the requesters' total is the headline
    first_error = next((r.first_error for r in outcome.clients if r.first_error), "")
    busiest = max(outcome.clients, key=lambda r: r.cpu_s / r.elapsed_s if r.elapsed_s > 0 else 0.0)
    busy_share = busiest.cpu_s / busiest.elapsed_s if busiest.elapsed_s > 0 else 0.0
    role_cpu = tuple((role, sum(r.cpu_s for r in outcome.clients if r.role == role)) for role in roles)
    return BenchReport(plan, clients, totals, outcome.wall_s, sum(r.cpu_s for r in outcome.clients),
                       outcome.server_cpu_s, first_error, os.cpu_count() or 1,
                       (f"{busiest.role} #{busiest.index}", busy_share), role_cpu,
                       tuple(r.client_id for r in outcome.clients))
