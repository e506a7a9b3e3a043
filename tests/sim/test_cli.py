"""`appliance sim` replays a seed and soaks a range; a failure exits 1 and prints the replay command."""

from click.testing import CliRunner

from appliance.cli.main import main
from appliance.testing.sim.planted import hunt


def test_sim_replays_one_seed() -> None:
    result = CliRunner().invoke(main, ["sim", "--seed", "5", "--ticks", "200"])
    assert result.exit_code == 0, result.output
    assert "seed 5: ok" in result.output
    assert "replay: appliance sim --seed 5 --ticks 200" in result.output


def test_sim_soaks_a_range_and_reports_rates() -> None:
    result = CliRunner().invoke(main, ["sim", "--seeds", "0:3", "--ticks", "100", "--faults", "drop,crash"])
    assert result.exit_code == 0, result.output
    assert "3 seeds, 0 failed" in result.output
    assert "simulated commits per CPU-second" in result.output


def test_sim_replays_a_failure_found_by_the_bug_hunt_exactly() -> None:
    found = hunt("snapshot_drops_entry", seeds=15)
    assert found is not None
    args = found.command.split()[1:]  # "appliance sim --seed N ... --bug snapshot_drops_entry"
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1
    assert f"seed {found.seed}: FAILED at tick {found.failed_tick}: {found.failure}" in result.output


def test_sim_rejects_unknown_faults() -> None:
    result = CliRunner().invoke(main, ["sim", "--seed", "0", "--faults", "meteor"])
    assert result.exit_code == 2
    assert "unknown faults" in result.output


def test_sim_streams_soaks_a_range_and_replays_a_seed() -> None:
    result = CliRunner().invoke(main, ["sim", "--streams", "--seeds", "0:2", "--ticks", "100"])
    assert result.exit_code == 0, result.output
    assert "2 stream seeds, 0 failed" in result.output
    result = CliRunner().invoke(main, ["sim", "--streams", "--seed", "4", "--ticks", "100"])
    assert result.exit_code == 0, result.output
    assert "seed 4: ok" in result.output
    assert "replay: appliance sim --streams --seed 4 --ticks 100" in result.output
