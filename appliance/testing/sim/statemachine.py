"""SimStateMachine: a state that is a hash chain over applied entries, so "same state" is one compare.

Every apply and restore is reported to the checkers with (index, state digest).
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable, Sequence

from appliance.raft.types import Entry
from appliance.testing.sim.checkers import Violation

STATE = struct.Struct("<Q16s")


class SimStateMachine:
    def __init__(self, on_state: Callable[[int, bytes, Entry | None], None]) -> None:
        self.index = 0
        self.digest = bytes(16)
        self.on_state = on_state
        self.applied_count = 0

    def apply(self, entries: Sequence[Entry]) -> None:
        for entry in entries:
            if entry.index != self.index + 1:
                raise Violation(f"apply gap: entry {entry.index} applied on a state at {self.index}")
            self.index = entry.index
            self.digest = hashlib.blake2b(self.digest + entry.data, digest_size=16).digest()
            self.applied_count += 1
            self.on_state(self.index, self.digest, entry)

    def applied_index(self) -> int:
        return 0  # in memory only: rebuilt from the raft snapshot and log after a restart

    def snapshot(self) -> bytes:
        return STATE.pack(self.index, self.digest)

    def restore(self, data: bytes) -> None:
        self.index, self.digest = STATE.unpack(data)
        self.on_state(self.index, self.digest, None)
