"""What a person or a script reads: the progress bar, the summary table, JSON, the comparison table."""

import io
import json

import numpy as np

from appliance.bench.compare import SCENARIOS, Cell, failure_text, matched
from appliance.bench.orchestrate import Outcome
from appliance.bench.plan import BenchRequest, make_plan
from appliance.bench.progress import ProgressView, human_rate, render
from appliance.bench.report import build_report
from appliance.bench.servers import APPLIANCE, NATS_DEFAULT, NATS_SYNC_ALWAYS
from appliance.bench.spec import ClientResult
from appliance.bench.table import markdown

INFO = {"cpu": "Test CPU", "cores": "2", "memory_gib": "8", "kernel": "6.1", "python": "3.11", "date": "today",
        "nats_server": "nats-server: v2.15.1", "load_average": "0.1 0.1 0.1", "bench_scan": "C"}


def test_progress_bar() -> None:
    assert render(50, 100, 2.0, width=10) == "[#####.....]  50%  50/100  25 ops/s  2.0s"
    assert render(0, 0, 0.0, width=4) == "[....]   0%  0/0  0 ops/s  0.0s"
    assert render(200, 100, 1.0, width=4).startswith("[####] 100%")
    assert (human_rate(2_500_000), human_rate(140_000), human_rate(999)) == ("2.50M", "140.00k", "999")


def test_progress_view_draws_only_when_enabled() -> None:
    out = io.StringIO()
    ProgressView(stream=out, enabled=False).draw(1, 2, 1.0)
    assert out.getvalue() == ""
    view = ProgressView(stream=out, interval_s=1.0)
    view.draw(1, 10, 0.0)
    view.draw(2, 10, 0.5)  # too soon: not redrawn
    view.finish(10, 1.0)
    assert out.getvalue().count("\r") == 2 and out.getvalue().endswith("\n")


def pubsub_report() -> object:
    plan = make_plan(BenchRequest("pubsub", msgs=1000, size=100))
    pub = ClientResult("pub", 0, msgs=1000, bytes=100_000, elapsed_s=0.5, cpu_s=0.1)
    sub = ClientResult("sub", 0, msgs=1000, bytes=100_000, elapsed_s=1.0, cpu_s=0.2, errors=1, first_error="boom",
                       latency_samples=np.array([10_000, 20_000], dtype=np.int64), latency_count=2,
                       latency_max_ns=20_000)
    return build_report(plan, Outcome([pub, sub], wall_s=1.0, server_cpu_s=0.5))


def test_summary_table_has_clients_totals_latency_and_cpu() -> None:
    report = pubsub_report()
    text = report.table()  # type: ignore[attr-defined]
    lines = text.splitlines()
    assert lines[0].startswith("appliance bench pubsub")
    assert any(line.startswith("pub #0") and "2,000" in line for line in lines)  # 1000 msgs in 0.5 s
    assert any(line.startswith("sub total") and "10" in line and "20" in line for line in lines)
    assert any(line.startswith("pub+sub total") and "2,000" in line for line in lines)
    assert "clients 0.30 cores (15% of" in text and "server 0.50 cores" in text
    assert "[pub 0.10, sub 0.20]" in text  # each role's share of the client CPU
    assert "errors: 1, first: boom" in text


def test_json_has_the_same_figures() -> None:
    data = json.loads(json.dumps(pubsub_report().as_dict()))  # type: ignore[attr-defined]
    assert data["verb"] == "pubsub" and data["errors"] == 1
    totals = {t["client"]: t for t in data["totals"]}
    assert totals["pub+sub total"]["msgs"] == 2000 and totals["pub+sub total"]["msgs_per_s"] == 2000.0
    assert totals["sub total"]["latency"]["p50_us"] == 10.0
    assert data["cpu"]["server_share"] == 0.5
    assert data["cpu"]["roles"] == {"pub": {"cpu_s": 0.1, "share": 0.1}, "sub": {"cpu_s": 0.2, "share": 0.2}}


def test_comparison_table_shows_ratios_and_reasons() -> None:
    scenarios = SCENARIOS[:2]
    cells = {
        "pub": {NATS_DEFAULT.name: Cell([2_000_000, 2_200_000, 2_100_000]),
                NATS_SYNC_ALWAYS.name: Cell([2_000_000]),
                APPLIANCE.name: Cell([1_050_000])},
        "pubsub": {NATS_DEFAULT.name: Cell([900_000]), NATS_SYNC_ALWAYS.name: Cell([900_000]),
                   APPLIANCE.name: Cell(failure=failure_text(TimeoutError("no PONG")))},
    }
    text = markdown(cells, scenarios, (NATS_DEFAULT, NATS_SYNC_ALWAYS, APPLIANCE), info=INFO, rounds=3, scale=1.0)
    pub_row = next(line for line in text.splitlines() if line.startswith("| core pub 128 B"))
    assert "| 2,100,000 | 2,000,000 | 1,050,000 | 0.50 | 0.53 | 2,500,000 | 0.84 |" in pub_row
    pubsub_row = next(line for line in text.splitlines() if line.startswith("| core pub+sub"))
    assert "failed: TimeoutError: no PONG" in pubsub_row
    assert "Test CPU, 2 cores" in text and "Medians of 3 alternating rounds" in text


def test_a_failure_of_any_server_is_called_failed_not_unfinished() -> None:
    assert failure_text(OSError("x")) == "failed: OSError: x"
    assert failure_text(TimeoutError("no PONG")) == "failed: TimeoutError: no PONG"


def test_a_ratio_never_divides_runs_of_different_message_counts() -> None:
    scenarios = tuple(s for s in SCENARIOS if s.key == "js-pub-async")
    always = Cell([2_000.0], msgs=20_000)
    row = {NATS_DEFAULT.name: Cell([80_000.0], msgs=200_000), NATS_SYNC_ALWAYS.name: always,
           APPLIANCE.name: Cell([60_000.0], msgs=200_000)}
    text = markdown({"js-pub-async": row}, scenarios, (NATS_DEFAULT, NATS_SYNC_ALWAYS, APPLIANCE), info=INFO,
                    rounds=1, scale=1.0, command="python -m appliance.bench.compare --scale 1")
    line = next(line for line in text.splitlines() if line.startswith("| JS R1 async pub 128 B"))
    assert "| 0.75 | – (200,000 vs 20,000 msgs) |" in line  # no matched run: no ratio
    row[matched(20_000)] = Cell([50_000.0], msgs=20_000)
    text = markdown({"js-pub-async": row}, scenarios, (NATS_DEFAULT, NATS_SYNC_ALWAYS, APPLIANCE), info=INFO,
                    rounds=1, scale=1.0, command="python -m appliance.bench.compare --scale 1")
    line = next(line for line in text.splitlines() if line.startswith("| JS R1 async pub 128 B"))
    assert "| 0.75 | 25.00 |" in line  # appliance's own 20,000-message runs against sync=always's
    assert "Command: `python -m appliance.bench.compare --scale 1`" in text
    assert "appliance at 20,000 msgs 50,000 msgs/s" in text


def test_several_clients_of_a_role_get_a_spread_line() -> None:
    plan = make_plan(BenchRequest("pub", msgs=300, pubs=3))
    results = [ClientResult("pub", i, msgs=100, bytes=100, elapsed_s=t, cpu_s=0.0) for i, t in enumerate((1.0, 0.5, 0.25))]
    text = build_report(plan, Outcome(results, wall_s=1.0, server_cpu_s=None)).table()
    assert "pub: min 100 | avg 233 | max 400 | stddev 125 msgs/s per client" in text
    assert "server" not in text.splitlines()[-1]  # no server pid given: only client CPU


def test_a_client_that_was_nearly_always_busy_is_pointed_out() -> None:
    plan = make_plan(BenchRequest("pub", msgs=100))
    busy = ClientResult("pub", 0, msgs=100, bytes=100, elapsed_s=1.0, cpu_s=0.95)
    text = build_report(plan, Outcome([busy], wall_s=1.0, server_cpu_s=None)).table()
    assert text.splitlines()[-1] == "note: pub #0 was busy 95% of its run: the load generator may be the limit here"
    idle = ClientResult("pub", 0, msgs=100, bytes=100, elapsed_s=1.0, cpu_s=0.2)
    assert "note:" not in build_report(plan, Outcome([idle], wall_s=1.0, server_cpu_s=None)).table()
