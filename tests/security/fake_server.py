"""The part of a Server that the client connection layers (TLS, WebSocket) reach through their
ClientConnection: its loop's timers, recorded and never fired."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


class FakeTimer:
    def cancel(self) -> None:
        pass


class FakeLoop:
    def __init__(self) -> None:
        self.timers: list[tuple[float, Any]] = []

    def call_later(self, delay: float, callback: Any) -> FakeTimer:
        self.timers.append((delay, callback))
        return FakeTimer()


@dataclass
class FakeServer:
    loop: FakeLoop = field(default_factory=FakeLoop)
