"""SimDisk: in-memory files with the failure modes of a real disk under a crash.

Each file has durable bytes and pending (written, not yet fsynced) bytes. A crash loses the pending
bytes, or with `torn` keeps a random prefix of them (a write cut in the middle). truncate and
replace are durable at once, as the real implementation makes them (fsync inside).
Implements appliance.store.raftlog.LogFiles.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass(slots=True)
class SimFile:
    durable: bytearray = field(default_factory=bytearray)
    pending: bytearray = field(default_factory=bytearray)


class SimDisk:
    def __init__(self) -> None:
        self.files: dict[str, SimFile] = {}
        self.syncs = 0
        self.bytes_written = 0

    def _file(self, name: str) -> SimFile:
        return self.files.setdefault(name, SimFile())

    def read(self, name: str) -> bytes:
        file = self._file(name)
        return bytes(file.durable + file.pending)

    def append(self, name: str, data: bytes) -> None:
        self._file(name).pending += data
        self.bytes_written += len(data)

    def sync(self, name: str) -> None:
        file = self._file(name)
        file.durable += file.pending
        file.pending.clear()
        self.syncs += 1

    def truncate(self, name: str, size: int) -> None:
        file = self._file(name)
        whole = file.durable + file.pending
        file.durable = whole[:size]
        file.pending = bytearray()

    def replace(self, name: str, data: bytes) -> None:
        self.files[name] = SimFile(bytearray(data), bytearray())
        self.bytes_written += len(data)

    def copy(self) -> SimDisk:
        """An independent copy of the durable content (to inspect without touching this disk)."""
        twin = SimDisk()
        twin.files = {name: SimFile(bytearray(f.durable), bytearray(f.pending)) for name, f in self.files.items()}
        return twin

    def crash(self, rng: random.Random, *, torn: bool) -> int:
        """Lose unsynced writes (keeping a torn prefix when `torn`); returns the bytes lost."""
        lost = 0
        for file in self.files.values():
            keep = rng.randrange(len(file.pending) + 1) if torn and file.pending else 0
            file.durable += file.pending[:keep]
            lost += len(file.pending) - keep
            file.pending.clear()
        return lost
