"""Suite-wide checks: the native module is in use unless explicitly disabled. Every server a test
starts registers in a run dir of this session (APPLIANCE_RUN_DIR), so `appliance status` in a test
never meets servers of other sessions or of the host, and the host's run dir stays clean."""

import os
import random
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from appliance import native

# Property tests judge the code, not the machine: on a loaded CI host the generation of examples can
# be slow enough to trip hypothesis's too_slow health check (it failed a parser test once), and a
# per-example deadline measures the scheduler. Tests that set their own settings keep them.
settings.register_profile("appliance", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("appliance")

NATIVE_SOURCES = list((Path(__file__).resolve().parent.parent / "native").glob("*.c"))


def pytest_configure(config: pytest.Config) -> None:
    """The simulator's fresh seeds are drawn once per run, here, so every pytest-xdist worker (which
    inherits the environment) collects the same test ids."""
    os.environ.setdefault("APPLIANCE_SIM_SEED", str(random.SystemRandom().randrange(1 << 30)))


def pytest_sessionstart(session: pytest.Session) -> None:
    if not os.environ.get("APPLIANCE_RUN_DIR") or os.environ.get("PYTEST_XDIST_WORKER"):  # one per xdist worker
        run_dir = tempfile.mkdtemp(prefix="appliance-run-")
        os.environ["APPLIANCE_RUN_DIR"] = run_dir
        session.config.add_cleanup(lambda: shutil.rmtree(run_dir, ignore_errors=True))
    if NATIVE_SOURCES and os.environ.get("APPLIANCE_NO_NATIVE") != "1":
        assert native.ENABLED, "appliance._native is not built: run `make test` (or set APPLIANCE_NO_NATIVE=1)"
