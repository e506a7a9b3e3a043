"""One bench run end to end: plan, clients, report. Shared by `appliance bench` and compare."""

from __future__ import annotations

from appliance.bench.orchestrate import run_plan
from appliance.bench.plan import BenchRequest, make_plan
from appliance.bench.progress import ProgressView
from appliance.bench.report import BenchReport, build_report


def run_bench(request: BenchRequest, *, server_pids: tuple[int, ...] = (),
              view: ProgressView | None = None, settle: bool = False) -> BenchReport:
    plan = make_plan(request)
    return build_report(plan, run_plan(plan, server_pids=server_pids, view=view, settle=settle))
