"""`appliance chaos` refuses what it cannot run before it starts any server."""

import re

from click.testing import CliRunner

from appliance.cli.main import main
from appliance.testing.chaos_plan import FAULT_KINDS


def test_unknown_fault_kinds_are_a_usage_error() -> None:
    result = CliRunner().invoke(main, ["chaos", "--kinds", "kill-leader,bit-rot"])
    assert result.exit_code == 2
    assert "fault kinds must be among kill-leader, kill-other" in result.output


def test_a_cluster_needs_three_servers_for_an_r3_stream() -> None:
    result = CliRunner().invoke(main, ["chaos", "--nodes", "2"])
    assert result.exit_code == 2 and "--nodes" in result.output


def test_help_names_every_fault_kind() -> None:
    result = CliRunner().invoke(main, ["chaos", "--help"])
    assert result.exit_code == 0
    text = re.sub(r"-\s+", "-", result.output)  # click wraps long words at their hyphens
    assert all(kind in text for kind in FAULT_KINDS)
