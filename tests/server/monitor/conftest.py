"""A fake server at a fixed wall time, and a probe asking its monitoring app for pages."""

import pytest

from appliance.clock import ManualClock
from appliance.testing.fake_view import FakeServerView, MonitorProbe

START_WALL_S = 1_795_305_221.0  # 2026-11-21T23:53:41Z


@pytest.fixture
def view() -> FakeServerView:
    return FakeServerView(clock=ManualClock(wall_start_s=START_WALL_S))


@pytest.fixture
def monitor(view: FakeServerView) -> MonitorProbe:
    return MonitorProbe(view)
