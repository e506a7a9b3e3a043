"""A fake server and a way to ask its monitoring app for a page, for every endpoint test here."""

import json
from dataclasses import dataclass
from typing import Any

import pytest

from appliance.clock import ManualClock
from appliance.server.monitor import MonitorApp
from appliance.server.monitor.endpoint import Response
from appliance.testing.fake_view import FakeServerView

START_WALL_S = 1_795_305_221.0  # 2026-11-21T23:53:41Z


@dataclass
class Page:
    response: Response

    @property
    def status(self) -> int:
        return self.response.status

    @property
    def text(self) -> str:
        return self.response.body.decode()

    @property
    def json(self) -> Any:
        return json.loads(self.response.body)

    def header(self, name: str) -> str | None:
        return dict(self.response.headers).get(name)


class Monitor:
    def __init__(self, view: FakeServerView) -> None:
        self.view = view
        self.app = MonitorApp(view)

    def get(self, path: str, query: str = "") -> Page:
        return Page(self.app.respond(path, query))


@pytest.fixture
def view() -> FakeServerView:
    return FakeServerView(clock=ManualClock(wall_start_s=START_WALL_S))


@pytest.fixture
def monitor(view: FakeServerView) -> Monitor:
    return Monitor(view)
