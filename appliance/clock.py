"""Time as an injected dependency: adapters read a Clock; pure cores count ticks."""

import time
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def wall(self) -> float: ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()


class ManualClock:
    """A clock that moves only when told; for tests and the simulator."""

    def __init__(self, *, start_s: float = 0.0, wall_start_s: float = 1_700_000_000.0) -> None:
        self._now_s = start_s
        self._wall_offset_s = wall_start_s - start_s

    def monotonic(self) -> float:
        return self._now_s

    def wall(self) -> float:
        return self._now_s + self._wall_offset_s

    def advance(self, seconds: float) -> None:
        assert seconds >= 0
        self._now_s += seconds
