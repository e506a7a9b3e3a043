"""The `make bench` harness on a tiny scale: alternating rounds, medians, files, honest failures."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from appliance.bench import compare, servers
from appliance.bench.plan import BenchRequest
from appliance.bench.run import run_bench

pytestmark = pytest.mark.integration


def test_alternating_rounds_against_nats_server_and_appliance(tmp_path: Path) -> None:
    scenarios = tuple(s for s in compare.SCENARIOS if s.key in ("pub", "js-pub-sync"))
    targets = (servers.NATS_DEFAULT, servers.APPLIANCE)
    lines: list[str] = []
    cells = compare.run_all(scenarios, targets, rounds=2, scale=0.001, log=lines.append)
    for scenario in scenarios:
        nats = cells[scenario.key][servers.NATS_DEFAULT.name]
        assert len(nats.msgs_per_s) == 2 and nats.failure == ""
        appliance = cells[scenario.key][servers.APPLIANCE.name]
        assert len(appliance.msgs_per_s) == 2 and appliance.failure == "", appliance.failure
    assert compare.failed_cells(cells) == []
    assert [line.split()[:3] for line in lines if line.startswith("round")][:2] == [
        ["round", "1", "pub"], ["round", "1", "pub"]]  # A B, then A B again

    path = compare.write_results(cells, scenarios, targets, rounds=2, scale=0.001, out_dir=tmp_path)
    text = path.read_text()
    assert "| core pub 128 B |" in text and "| JS R1 sync pub 128 B |" in text
    data = json.loads((tmp_path / "latest.json").read_text())
    assert [s["key"] for s in data["scenarios"]] == ["pub", "js-pub-sync"]
    assert (tmp_path / "latest.png").read_bytes()[:4] == b"\x89PNG"


def test_the_pub_sub_total_row_comes_from_the_same_runs_as_the_sub_rate(tmp_path: Path) -> None:
    scenarios = tuple(s for s in compare.SCENARIOS if s.key in ("pubsub", "pubsub-total"))
    lines: list[str] = []
    cells = compare.run_all(scenarios, (servers.NATS_DEFAULT,), rounds=2, scale=0.002, log=lines.append)
    runs = [line for line in lines if line.startswith("round") and "C reference" not in line]
    assert len(runs) == 2  # one run per round, two rows
    sub = cells["pubsub"][servers.NATS_DEFAULT.name]
    total = cells["pubsub-total"][servers.NATS_DEFAULT.name]
    assert len(sub.msgs_per_s) == len(total.msgs_per_s) == 2
    assert sub.msgs_per_s != total.msgs_per_s and min(sub.msgs_per_s + total.msgs_per_s) > 0
    text = compare.write_results(cells, scenarios, (servers.NATS_DEFAULT,), rounds=2, scale=0.002,
                                 out_dir=tmp_path).read_text()
    assert "| core pub+sub 128 B (sub rate) |" in text
    assert "| core pub+sub 128 B (pub+sub total, as nats bench's Pub/Sub stats) |" in text
    assert (tmp_path / "latest.png").exists()


def test_a_derived_row_without_its_scenario_says_where_it_comes_from() -> None:
    scenarios = tuple(s for s in compare.SCENARIOS if s.key == "pubsub-total")
    cells = compare.run_all(scenarios, (servers.NATS_DEFAULT,), rounds=1, scale=0.001, log=lambda _line: None)
    assert cells["pubsub-total"][servers.NATS_DEFAULT.name].failure == (
        "not measured: comes from the runs of scenario 'pubsub'")


def test_the_pub_sub_rows_carry_a_live_c_reference_measured_in_the_same_rounds(tmp_path: Path) -> None:
    scenarios = tuple(s for s in compare.SCENARIOS if s.key in ("pubsub", "pubsub-total"))
    lines: list[str] = []
    cells = compare.run_all(scenarios, (servers.NATS_DEFAULT,), rounds=2, scale=0.002, log=lines.append)
    for key in ("pubsub", "pubsub-total"):
        live = cells[key][compare.REFERENCE]
        assert len(live.msgs_per_s) == 2 and min(live.msgs_per_s) > 0, live.failure
    assert len([line for line in lines if "C reference client vs nats-server" in line]) == 2
    text = compare.write_results(cells, scenarios, (servers.NATS_DEFAULT,), rounds=2, scale=0.002,
                                 out_dir=tmp_path).read_text()
    row = next(line for line in text.splitlines() if line.startswith("| core pub+sub 128 B (sub rate)"))
    assert " measured |" in row


def test_without_nats_server_the_reference_says_why() -> None:
    scenarios = tuple(s for s in compare.SCENARIOS if s.key == "pubsub")
    cells = compare.run_all(scenarios, (), rounds=1, scale=0.001, log=lambda _line: None)
    assert cells["pubsub"][compare.REFERENCE].failure.startswith("not measured: nats-server (defaults) is not")


def test_appliance_also_runs_the_smaller_count_of_nats_server_sync_always(tmp_path: Path) -> None:
    scenarios = tuple(s for s in compare.SCENARIOS if s.key == "js-pub-async")
    targets = (servers.NATS_SYNC_ALWAYS, servers.APPLIANCE)
    lines: list[str] = []
    cells = compare.run_all(scenarios, targets, rounds=1, scale=0.001, log=lines.append)
    row = cells["js-pub-async"]
    assert (row[servers.APPLIANCE.name].msgs, row[servers.NATS_SYNC_ALWAYS.name].msgs) == (200, 20)
    same = row[compare.matched(20)]
    assert same.failure == "" and same.msgs == 20 and len(same.msgs_per_s) == 1
    text = compare.write_results(cells, scenarios, targets, rounds=1, scale=0.001, out_dir=tmp_path,
                                 command="python -m appliance.bench.compare --only js-pub-async").read_text()
    line = next(x for x in text.splitlines() if x.startswith("| JS R1 async pub 128 B"))
    expected = same.msgs_per_s[0] / row[servers.NATS_SYNC_ALWAYS.name].msgs_per_s[0]
    assert f"| {expected:.2f} |" in line
    assert json.loads((tmp_path / "latest.json").read_text())["command"].endswith("--only js-pub-async")


def test_a_scenario_declared_not_yet_is_not_run_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(compare.NOT_YET, "kv-put", "why not")
    scenarios = tuple(s for s in compare.SCENARIOS if s.key == "kv-put")
    lines: list[str] = []
    cells = compare.run_all(scenarios, (servers.APPLIANCE,), rounds=1, scale=0.001, log=lines.append)
    cell = cells["kv-put"][servers.APPLIANCE.name]
    assert cell.failure == "cannot run yet: why not" and not cell.msgs_per_s
    assert lines == [] and compare.failed_cells(cells) == []


def test_no_row_is_declared_not_yet_any_more() -> None:
    assert compare.NOT_YET == {}


def test_make_bench_exits_non_zero_when_an_appliance_scenario_failed(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    def run_all(scenarios: tuple[compare.Scenario, ...], targets: tuple[servers.ServerKind, ...],
                **_: object) -> dict[str, dict[str, compare.Cell]]:
        return {"pub": {servers.NATS_DEFAULT.name: compare.Cell([1e6], msgs=2000),
                        servers.APPLIANCE.name: compare.Cell(failure="failed: TimeoutError: no PONG")}}

    monkeypatch.setattr(compare, "run_all", run_all)
    result = CliRunner().invoke(compare.main, ["--only", "pub", "--targets", "nats-server,appliance",
                                               "--out", str(tmp_path)])
    assert result.exit_code == 1
    assert "appliance pub: failed: TimeoutError: no PONG" in result.output
    assert "1 appliance scenario(s) failed" in result.output


def test_the_cluster_rows_run_publisher_on_node_1_and_subscriber_on_node_2(tmp_path: Path) -> None:
    targets = (servers.NATS_DEFAULT, servers.APPLIANCE)
    lines: list[str] = []
    cells = compare.run_all(compare.CLUSTER_SCENARIOS, targets, rounds=1, scale=0.002, log=lines.append)
    assert compare.failed_cells(cells) == [] and not [c.failure for row in cells.values()
                                                       for c in row.values() if c.failure]
    for scenario in compare.CLUSTER_SCENARIOS:
        assert scenario.nodes == 2 and scenario.across_nodes
        for target in targets:
            cell = cells[scenario.key][target.name]
            assert len(cell.msgs_per_s) == 1 and cell.msgs_per_s[0] > 0
    request = cells["cluster-request"]
    assert all(len(request[t.name].p50_us) == len(request[t.name].p99_us) == 1 for t in targets)
    text = compare.write_results(cells, compare.CLUSTER_SCENARIOS, targets, rounds=1, scale=0.002,
                                 out_dir=tmp_path).read_text()
    assert "| 2-node cluster: pub n1 → sub n2 1 KiB (sub rate) |" in text
    assert "2-node cluster: request n1 → reply n2 128 B" in text


def test_a_subscriber_on_node_2_gets_every_message_of_a_publisher_on_node_1() -> None:
    """The publisher starts once the subscription has crossed the route (the interest probe), so
    no message goes to a node that does not know the subscriber yet."""
    cluster = servers.start(servers.NATS_DEFAULT, nodes=2)
    try:
        request = BenchRequest("pubsub", url=cluster.urls[0], sub_url=cluster.urls[1], msgs=2000, timeout_s=5)
        report = run_bench(request)
    finally:
        cluster.stop()
    assert report.errors == 0, report.first_error
    sub = next(r for r in report.totals if r.label == "sub total")
    assert sub.rate.msgs == 2000


def test_the_cli_measures_across_two_nodes() -> None:
    from appliance.cli.bench import bench

    cluster = servers.start(servers.NATS_DEFAULT, nodes=2)
    try:
        for verb in ("pubsub", "request"):
            result = CliRunner().invoke(bench, [verb, "--url", cluster.urls[0], "--sub-url", cluster.urls[1],
                                                "--msgs", "300", "--json", "--no-progress"])
            assert result.exit_code == 0, result.output
            totals = {row["client"]: row for row in json.loads(result.output)["totals"]}
            assert totals["sub total" if verb == "pubsub" else "request total"]["msgs"] == 300
    finally:
        cluster.stop()
