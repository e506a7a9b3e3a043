"""systemd/: the shipped files are the rendered ones; the unit verifies and scores <= 2.0 exposure."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from appliance.cli.service_config import EXAMPLE, render_config
from appliance.cli.service_unit import (
    DEFAULT_EXECUTABLE, UnitSettings, render_sysusers, render_tmpfiles, render_unit,
)
from appliance.config import load_config
from appliance.supervisor.control import SYSTEM_RUN_DIR

REPO = Path(__file__).resolve().parents[2]
SYSTEMD_DIR = REPO / "systemd"
EXPOSURE_MAX = 2.0
ANALYZE = shutil.which("systemd-analyze")
# systemd-analyze is part of the `systemd` package (Debian/Ubuntu); a CI image without it cannot run
# these two tests, and pip cannot provide it.
needs_analyze = pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze is not installed "
                                   "(apt-get install systemd): the unit cannot be verified offline")


def test_the_shipped_files_are_the_rendered_ones() -> None:
    """systemd/ is what `appliance service install` writes with the defaults (regenerate: see README)."""
    assert (SYSTEMD_DIR / "appliance.service").read_text() == render_unit()
    assert (SYSTEMD_DIR / "appliance.sysusers.conf").read_text() == render_sysusers()
    assert (SYSTEMD_DIR / "appliance.tmpfiles.conf").read_text() == render_tmpfiles()
    assert (SYSTEMD_DIR / "appliance.conf").read_text() == render_config(EXAMPLE)


def test_the_example_config_loads_pedantically() -> None:
    options = load_config(str(SYSTEMD_DIR / "appliance.conf"), pedantic=True)
    assert options.server_name == "n1-c1" and options.cluster.name == "C1"
    assert options.jetstream.enabled and options.jetstream.store_dir == "/var/lib/appliance"


def directives(unit: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in unit.splitlines():
        match = re.match(r"^([A-Za-z]+)=(.*)$", line)
        if match:
            found.setdefault(match.group(1), []).append(match.group(2))
    return found


def test_the_unit_says_what_the_issue_asks() -> None:
    unit = directives(render_unit())
    assert unit["Type"] == ["notify"]
    assert unit["ExecReload"] == ["/bin/kill -HUP $MAINPID"]
    assert unit["KillSignal"] == ["SIGUSR2"] and unit["KillMode"] == ["mixed"]  # lame duck, supervisor only
    assert unit["Restart"] == ["on-failure"]
    assert unit["RuntimeDirectory"] == [SYSTEM_RUN_DIR.name]  # where `appliance status` looks
    assert unit["Environment"] == [f"APPLIANCE_RUN_DIR={SYSTEM_RUN_DIR}"]
    assert unit["StateDirectory"] == ["appliance"]
    assert int(unit["WatchdogSec"][0].removesuffix("s")) > 2  # above heartbeat_late
    # the stop covers nats-server's default lame_duck_duration (2m) plus its grace period (10s)
    assert int(unit["TimeoutStopSec"][0].removesuffix("s")) > 130
    assert "sched_setaffinity" in " ".join(unit["SystemCallFilter"])  # CPU pinning still works


def test_a_store_dir_elsewhere_is_made_writable() -> None:
    unit = directives(render_unit(UnitSettings(extra_writable=("/srv/nvme0/appliance",))))
    assert unit["ReadWritePaths"] == ["/srv/nvme0/appliance"]


def _unit_for_this_checkout(tmp_path: Path) -> Path:
    """The shipped unit with ExecStart= pointing at this checkout's appliance (verify checks it exists)."""
    executable = Path(sys.executable).parent / "appliance"
    assert executable.exists()
    path = tmp_path / "appliance.service"
    path.write_text((SYSTEMD_DIR / "appliance.service").read_text().replace(DEFAULT_EXECUTABLE, str(executable)))
    return path


@needs_analyze
def test_systemd_analyze_verify_accepts_the_unit(tmp_path: Path) -> None:
    assert ANALYZE is not None
    done = subprocess.run([ANALYZE, "verify", str(_unit_for_this_checkout(tmp_path))], capture_output=True,
                          text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "appliance.service" not in done.stderr, done.stderr  # no warning about our unit


@needs_analyze
def test_systemd_analyze_security_exposure_is_at_most_2(tmp_path: Path) -> None:
    assert ANALYZE is not None
    done = subprocess.run([ANALYZE, "security", "--offline=true", "--no-pager", str(_unit_for_this_checkout(tmp_path))],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    match = re.search(r"Overall exposure level for appliance\.service: (\d+\.\d+)", done.stdout)
    assert match is not None, done.stdout + done.stderr
    print(match.group(0))
    assert float(match.group(1)) <= EXPOSURE_MAX
