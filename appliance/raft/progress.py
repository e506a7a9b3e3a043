"""The leader's view of one follower: match/next, flow-control state, bounded in-flight window.

States (etcd's tracker): PROBE sends one append per heartbeat until the follower's position is
found; REPLICATE streams appends optimistically, at most `Inflights.capacity` unacknowledged;
SNAPSHOT waits for an install-snapshot to land.
"""

from __future__ import annotations

import enum
from collections import deque


class ProgressState(enum.IntEnum):
    PROBE = 1
    REPLICATE = 2
    SNAPSHOT = 3


class Inflights:
    """Last indexes of appends sent and not yet acknowledged, oldest first; bounded by capacity."""

    __slots__ = ("_indexes", "capacity")

    def __init__(self, capacity: int) -> None:
        assert capacity >= 1
        self.capacity = capacity
        self._indexes: deque[int] = deque()

    def add(self, index: int) -> None:
        assert not self.full(), "caller checks full() before sending"
        assert not self._indexes or index > self._indexes[-1]
        self._indexes.append(index)

    def free_le(self, index: int) -> None:
        while self._indexes and self._indexes[0] <= index:
            self._indexes.popleft()

    def full(self) -> bool:
        return len(self._indexes) >= self.capacity

    def count(self) -> int:
        return len(self._indexes)

    def reset(self) -> None:
        self._indexes.clear()


class Progress:
    __slots__ = (
        "inflights",
        "last_contact_tick",
        "match",
        "match_at_last_heartbeat",
        "degraded",
        "next",
        "pending_snapshot",
        "probe_sent",
        "recent_active",
        "snapshot_sent",
        "snapshot_ticks",
        "state",
    )

    def __init__(self, *, next_index: int, inflight_max: int, now_tick: int) -> None:
        self.match = 0
        self.next = next_index
        self.state = ProgressState.PROBE
        self.inflights = Inflights(inflight_max)
        self.probe_sent = False
        self.pending_snapshot = 0
        self.recent_active = False
        self.last_contact_tick = now_tick
        self.match_at_last_heartbeat = -1
        self.degraded = False  # its last response said its state machine lacks data (DEGRADED_CONTEXT)
        self.snapshot_ticks = 0
        self.snapshot_sent = 0  # index of the last snapshot sent to this follower (0: none)

    def become_probe(self) -> None:
        if self.state == ProgressState.SNAPSHOT:
            self.next = max(self.match + 1, self.pending_snapshot + 1)
        else:
            self.next = self.match + 1
        self._reset(ProgressState.PROBE)

    def become_replicate(self) -> None:
        self.next = self.match + 1
        self._reset(ProgressState.REPLICATE)

    def become_snapshot(self, snapshot_index: int) -> None:
        self._reset(ProgressState.SNAPSHOT)
        self.pending_snapshot = snapshot_index

    def _reset(self, state: ProgressState) -> None:
        self.state = state
        self.probe_sent = False
        self.pending_snapshot = 0
        self.snapshot_ticks = 0
        self.inflights.reset()

    def maybe_update(self, index: int) -> bool:
        """The follower holds everything up to `index`; False if that is old news."""
        updated = index > self.match
        if updated:
            self.match = index
            self.probe_sent = False
        self.next = max(self.next, index + 1)
        return updated

    def maybe_decrease_to(self, *, rejected: int, match_hint: int) -> bool:
        """An append at `rejected` failed; False if the rejection is stale (out of order)."""
        if self.state == ProgressState.REPLICATE:
            if rejected <= self.match:
                return False
            self.next = self.match + 1
            return True
        if self.next - 1 != rejected:
            return False
        self.next = max(min(rejected, match_hint + 1), self.match + 1)
        self.probe_sent = False
        return True

    def is_paused(self) -> bool:
        if self.state == ProgressState.PROBE:
            return self.probe_sent
        if self.state == ProgressState.REPLICATE:
            return self.inflights.full()
        return True

    def sent_entries(self, *, last_index: int, count: int) -> None:
        """An append carrying `count` entries up to `last_index` left for this follower."""
        if self.state == ProgressState.REPLICATE:
            if count > 0:
                self.next = last_index + 1
                self.inflights.add(last_index)
        elif self.state == ProgressState.PROBE:
            self.probe_sent = True
