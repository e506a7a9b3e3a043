"""`appliance sim` replays a seed and soaks a range; a failure exits 1 and prints the replay command."""

from click.testing import CliRunner

from appliance.cli.main import main


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


def test_sim_with_a_planted_bug_fails_and_says_how_to_replay() -> None:
    result = CliRunner().invoke(main, ["sim", "--seed", "0", "--ticks", "300", "--bug", "snapshot_drops_entry"])
    assert result.exit_code == 1
    assert "FAILED" in result.output
    assert "--bug snapshot_drops_entry" in result.output


def test_sim_rejects_unknown_faults() -> None:
    result = CliRunner().invoke(main, ["sim", "--seed", "0", "--faults", "meteor"])
    assert result.exit_code == 2
    assert "unknown faults" in result.output
