"""A one-line progress bar on stderr while a bench runs (`nats bench` draws one too)."""

from __future__ import annotations

import sys
from typing import TextIO

BAR_WIDTH = 30


def render(done: int, total: int, elapsed_s: float, *, width: int = BAR_WIDTH) -> str:
    """`[#########.....]  62%  620,000/1,000,000  1.2M ops/s  0.5s`: pure, so it is testable."""
    fraction = 0.0 if total <= 0 else min(1.0, max(0.0, done / total))
    filled = int(fraction * width)
    rate = done / elapsed_s if elapsed_s > 0 else 0.0
    return (f"[{'#' * filled}{'.' * (width - filled)}] {fraction * 100:3.0f}%  {done:,}/{total:,}  "
            f"{human_rate(rate)} ops/s  {elapsed_s:.1f}s")


def human_rate(rate: float) -> str:
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if rate >= limit:
            return f"{rate / limit:.2f}{suffix}"
    return f"{rate:.0f}"


class ProgressView:
    """Redraws at most every `interval_s`; writes nothing when disabled."""

    def __init__(self, *, stream: TextIO = sys.stderr, enabled: bool = True, interval_s: float = 0.2) -> None:
        self.stream = stream
        self.enabled = enabled
        self.interval_s = interval_s
        self._last_s = -1.0

    def draw(self, done: int, total: int, elapsed_s: float) -> None:
        if not self.enabled or (self._last_s >= 0 and elapsed_s - self._last_s < self.interval_s):
            return
        self._last_s = elapsed_s
        self.stream.write("\r" + render(done, total, elapsed_s))
        self.stream.flush()

    def finish(self, total: int, elapsed_s: float) -> None:
        if self.enabled:
            self.stream.write("\r" + render(total, total, elapsed_s) + "\n")
            self.stream.flush()
