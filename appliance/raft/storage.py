"""LogStorage: the narrow seam between the RAFT core and stable storage, and MemoryStorage.

Read side (used by the core): initial_state, first_index, last_index, term, entries, snapshot.
Write side (used only by the driver, in Ready order): save, apply_snapshot, compact, sync.

Layout invariant: the storage holds a snapshot (possibly the empty bootstrap one at index 0) and
the entries (snapshot.index, last_index]. term(snapshot.index) is the snapshot's term.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from appliance.raft.types import ConfState, Entry, HardState, Snapshot, SnapshotMeta


class LogStorage(Protocol):
    def initial_state(self) -> tuple[HardState, ConfState]: ...

    def first_index(self) -> int: ...

    def last_index(self) -> int: ...

    def term(self, index: int) -> int:
        """Term of `index`, for first_index() - 1 <= index <= last_index()."""
        ...

    def entries(self, lo: int, hi: int, bytes_max: int) -> list[Entry]:
        """Entries [lo, hi) within the log; at least one entry even if it exceeds bytes_max."""
        ...

    def snapshot(self) -> Snapshot: ...

    def save(self, hard_state: HardState | None, entries: Sequence[Entry], *, sync: bool) -> None:
        """Persist; entries replace any held at or after entries[0].index."""
        ...

    def apply_snapshot(self, snapshot: Snapshot) -> None:
        """Replace the whole log by `snapshot` (install-snapshot on a follower behind the log)."""
        ...

    def compact(self, snapshot: Snapshot) -> None:
        """Keep `snapshot` (taken at an applied index) and drop the entries it covers."""
        ...

    def sync(self) -> None: ...


def limit_by_bytes(entries: list[Entry], bytes_max: int) -> list[Entry]:
    total = 0
    for count, entry in enumerate(entries):
        total += entry.size_bytes()
        if total > bytes_max and count > 0:
            return entries[:count]
    return entries


class MemoryStorage:
    """LogStorage in memory: for tests, the transcript runner, and as the cache of durable stores."""

    def __init__(self, conf: ConfState | None = None) -> None:
        self._hard_state = HardState()
        self._snapshot = Snapshot(meta=SnapshotMeta(conf=conf or ConfState()))
        self._entries: list[Entry] = []  # indexes snapshot.index + 1 ... in order

    # --- read side -----------------------------------------------------------------------------
    def initial_state(self) -> tuple[HardState, ConfState]:
        return self._hard_state, self._snapshot.meta.conf

    def hard_state(self) -> HardState:
        return self._hard_state

    def first_index(self) -> int:
        return self._snapshot.meta.index + 1

    def last_index(self) -> int:
        return self._snapshot.meta.index + len(self._entries)

    def term(self, index: int) -> int:
        offset = self._snapshot.meta.index
        assert offset <= index <= self.last_index(), f"term({index}) outside [{offset}, {self.last_index()}]"
        if index == offset:
            return self._snapshot.meta.term
        return self._entries[index - offset - 1].term

    def entries(self, lo: int, hi: int, bytes_max: int) -> list[Entry]:
        offset = self._snapshot.meta.index
        assert offset < lo <= hi <= self.last_index() + 1, f"entries({lo}, {hi}) outside the log"
        return limit_by_bytes(self._entries[lo - offset - 1 : hi - offset - 1], bytes_max)

    def snapshot(self) -> Snapshot:
        return self._snapshot

    # --- write side ----------------------------------------------------------------------------
    def save(self, hard_state: HardState | None, entries: Sequence[Entry], *, sync: bool) -> None:
        if entries:
            self._append(entries)
        if hard_state is not None:
            self._hard_state = hard_state

    def _append(self, entries: Sequence[Entry]) -> None:
        offset = self._snapshot.meta.index
        first = entries[0].index
        assert first <= self.last_index() + 1, "no gap between stored and new entries"
        if first <= offset:
            entries = [entry for entry in entries if entry.index > offset]
            if not entries:
                return
            first = entries[0].index
        del self._entries[first - offset - 1 :]
        self._entries.extend(entries)

    def apply_snapshot(self, snapshot: Snapshot) -> None:
        assert snapshot.meta.index >= self._snapshot.meta.index, "snapshots only move forward"
        self._snapshot = snapshot
        self._entries = []
        if self._hard_state.commit < snapshot.meta.index:
            self._hard_state = HardState(self._hard_state.term, self._hard_state.vote, snapshot.meta.index)

    def compact(self, snapshot: Snapshot) -> None:
        offset = self._snapshot.meta.index
        index = snapshot.meta.index
        if index <= offset:
            return
        assert index <= self.last_index(), "compact only what the log holds"
        assert self.term(index) == snapshot.meta.term
        del self._entries[: index - offset]
        self._snapshot = snapshot

    def sync(self) -> None:
        return None
