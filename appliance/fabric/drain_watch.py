"""Is a started link still drained? A worker's own check of its incoming links, for its liveness.

A link whose handler stopped being called (a drain that died, a doorbell never rung) holds frames
while the worker's loop runs on and heartbeats: the sibling's interest changes wait for our ACK for
ever, its clients' PONGs and requests with them, and `status` would say OK. The worker asks each
link in every heartbeat; `DrainWatch` says when frames have waited, unpaused, with no batch taken,
for `stuck_after_s`. The worker then stops heartbeating, so `status` reports it late (degraded) and
the supervisor restarts it (the siblings rejoin its successor). Pure: the caller passes the time.

Only a link seen stuck by checks at most `gap_max_s` apart counts: after a long gap the loop itself
was blocked (a long synchronous step), its drains had no chance to run either, and the watch starts
over rather than blame the link.
"""

from __future__ import annotations


class DrainWatch:
    def __init__(self, stuck_after_s: float, *, gap_max_s: float = 1.0) -> None:
        assert 0 < gap_max_s < stuck_after_s
        self.stuck_after_s = stuck_after_s
        self.gap_max_s = gap_max_s
        self._since_s: float | None = None  # when frames were first seen waiting without progress
        self._progress = -1
        self._checked_s: float | None = None

    def stuck(self, now_s: float, *, waiting: bool, paused: bool, progress: int) -> bool:
        """`waiting`: frames are in the link for us; `paused`: we paused it on purpose (backpressure);
        `progress`: a count of batches taken so far."""
        gap = self._checked_s is not None and now_s - self._checked_s > self.gap_max_s
        self._checked_s = now_s
        if gap:
            self._since_s = None
        if not waiting or paused or progress != self._progress:
            self._progress = progress
            self._since_s = now_s if waiting and not paused else None
            return False
        if self._since_s is None:
            self._since_s = now_s
        return now_s - self._since_s >= self.stuck_after_s
