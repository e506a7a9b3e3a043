"""The `make bench` harness on a tiny scale: alternating rounds, medians, files, honest failures."""

import json
from pathlib import Path

import pytest

from appliance.bench import compare, servers

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
        # until the server can serve a scenario, the table says so with the reason
        assert len(appliance.msgs_per_s) == 2 or appliance.failure.startswith("cannot run yet: ")
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
