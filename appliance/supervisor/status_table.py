"""The shared status table: one row per worker, a numpy structured array over shared memory.

Theory of operation:
- The supervisor creates the segment with posix_ipc, maps it and unlinks its name at once, so
  nothing is ever left in /dev/shm, whatever process dies how. Workers get the segment as an
  inherited file descriptor and map it themselves.
- Each row has two writers with disjoint fields. The supervisor writes the identity and life
  cycle (pid, core, numa_node, state, restarts, started_mono_s). The worker writes its heartbeat
  and counters through `StatusRowWriter` (status_row.py: the StatusRow of
  appliance/worker/context.py, plain struct writes so workers need no numpy).
- Counters are published under a sequence lock (`seq` odd while the worker writes) so a reader
  sees all counters of one update or retries; a reader that cannot get a clean copy in
  SNAPSHOT_RETRIES_MAX tries returns the row's last clean copy. Every field is an aligned 8-byte
  word written by a single store, so the heartbeat (outside the lock) is never torn either.
  This relies on x86-64/arm64 ordering of plain stores being good enough for display and health
  (the rings, which need real atomics, use C).
- Times are CLOCK_MONOTONIC seconds, which every process of the host shares on Linux.
- Rows are 128 bytes (two cache lines) so workers never write the same line.
"""

from __future__ import annotations

import mmap
import os
import secrets
import struct
from dataclasses import dataclass
from enum import IntEnum

import numpy as np
import numpy.typing as npt
import posix_ipc  # type: ignore[import-not-found]

from appliance import limits
from appliance.clock import Clock, SystemClock
from appliance.supervisor.status_row import (
    FIELD_FORMATS,
    HEADER_BYTES,
    HEADER_FORMAT,
    MAGIC,
    OFFSETS,
    ROW_BYTES,
    StatusRowWriter,
    map_table,
    table_bytes,
)

SNAPSHOT_RETRIES_MAX = 1000
SHM_NAME_PREFIX = "/appliance-status-"
_NUMPY_FORMATS = {"Q": "<u8", "q": "<i8", "i": "<i4", "I": "<u4", "d": "<f8"}

ROW_DTYPE = np.dtype({
    "names": [name for name, _ in FIELD_FORMATS],
    "formats": [_NUMPY_FORMATS[fmt] for _, fmt in FIELD_FORMATS],
    "offsets": [OFFSETS[name] for name, _ in FIELD_FORMATS],
    "itemsize": ROW_BYTES,
})
HEADER_DTYPE = np.dtype([("magic", "<u8"), ("rows", "<u8")])
assert ROW_DTYPE.itemsize == ROW_BYTES
assert HEADER_DTYPE.itemsize == struct.calcsize(HEADER_FORMAT) <= HEADER_BYTES

RowArray = npt.NDArray[np.void]


class WorkerState(IntEnum):
    """A worker slot's life cycle, as shown by `appliance status` (values are shared memory)."""

    EMPTY = 0
    STARTING = 1  # spawned, not yet serving
    READY = 2  # serving clients
    BACKOFF = 3  # dead, waiting for its restart delay
    STOPPING = 4  # asked to stop (SIGTERM)
    STOPPED = 5  # exited and will not be restarted
    LAME_DUCK = 6  # draining clients after SIGUSR2


@dataclass(frozen=True, slots=True)
class RowSnapshot:
    index: int
    pid: int
    core: int
    numa_node: int
    state: WorkerState
    restarts: int
    started_mono_s: float
    heartbeat_mono_s: float
    heartbeats: int
    connections: int
    msgs_in: int
    msgs_out: int
    bytes_in: int
    bytes_out: int
    ring_fill: float
    damaged_assets: int = 0  # JetStream streams/consumers with unrepaired damage (worker's count)


class StatusTable:
    """The mapped table; create() in the supervisor, attach() in a worker."""

    def __init__(self, fd: int, buffer: mmap.mmap, rows: int) -> None:
        self.fd = fd
        self._buffer = buffer
        self.header = np.ndarray((), dtype=HEADER_DTYPE, buffer=buffer, offset=0)
        self.rows: RowArray = np.ndarray((rows,), dtype=ROW_DTYPE, buffer=buffer, offset=HEADER_BYTES)
        self._last_consistent: RowArray = np.zeros((rows,), dtype=ROW_DTYPE)  # private memory
        self._writers: list[StatusRowWriter] = []

    @classmethod
    def create(cls, rows: int) -> StatusTable:
        """A zeroed table whose shared-memory name is already gone (see the module docstring)."""
        assert 1 <= rows <= limits.STATUS_ROWS_MAX
        size = table_bytes(rows)
        name = f"{SHM_NAME_PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
        memory = posix_ipc.SharedMemory(name, flags=posix_ipc.O_CREX, mode=0o600, size=size)
        try:
            buffer = mmap.mmap(memory.fd, size)
        finally:
            memory.unlink()
        table = cls(memory.fd, buffer, rows)
        table.header["magic"] = MAGIC
        table.header["rows"] = rows
        return table

    @classmethod
    def attach(cls, fd: int) -> StatusTable:
        """Map a table from an inherited descriptor (ValueError when it is not one)."""
        buffer = map_table(fd)
        return cls(fd, buffer, (len(buffer) - HEADER_BYTES) // ROW_BYTES)

    @property
    def row_count(self) -> int:
        return len(self.rows)

    def writer(self, index: int, *, clock: Clock | None = None) -> StatusRowWriter:
        """A writer of row `index` over this mapping (closed with the table)."""
        writer = StatusRowWriter(self._buffer, index, clock=clock or SystemClock())
        self._writers.append(writer)
        return writer

    def reset_row(self, index: int, *, pid: int, core: int, numa_node: int, restarts: int, now_mono_s: float) -> None:
        """Supervisor: a new process takes slot `index` (the old one is gone; counters restart)."""
        row = self.rows[index]
        for name in ("connections", "msgs_in", "msgs_out", "bytes_in", "bytes_out", "heartbeats", "seq", "damaged_assets"):
            row[name] = 0  # not `admitted`: the new worker may already count connections (release_admitted did it)
        row["ring_fill"] = 0.0
        row["pid"] = pid
        row["core"] = core
        row["numa_node"] = numa_node
        row["restarts"] = restarts
        row["started_mono_s"] = now_mono_s
        row["heartbeat_mono_s"] = now_mono_s
        row["state"] = WorkerState.STARTING

    def release_admitted(self, index: int) -> None:
        """Supervisor, once the worker of row `index` is dead: its connections are gone, so they no
        longer count toward the server-wide max_connections (admission.py). One aligned store; the
        dead worker was the field's only other writer."""
        self.rows[index]["admitted"] = 0

    def set_state(self, index: int, state: WorkerState) -> None:
        self.rows[index]["state"] = state

    def snapshot(self, index: int) -> RowSnapshot:
        """A consistent copy of one row: retried while the worker is mid-update; should the worker
        update faster than we can copy, the last consistent copy of this row (a little older)."""
        row = self.rows[index]
        for _ in range(SNAPSHOT_RETRIES_MAX):
            seq_before = int(row["seq"])
            copy = row.copy()
            if seq_before % 2 == 0 and int(row["seq"]) == seq_before:
                self._last_consistent[index] = copy
                return _snapshot_of(index, copy)
        return _snapshot_of(index, self._last_consistent[index])

    def snapshots(self) -> list[RowSnapshot]:
        return [self.snapshot(index) for index in range(self.row_count)]

    def close(self) -> None:
        """Unmap and close the descriptor. Views handed out before must not be used after."""
        for writer in self._writers:
            writer.close()
        del self.rows
        del self.header
        self._buffer.close()
        os.close(self.fd)


def _snapshot_of(index: int, row: np.void) -> RowSnapshot:
    return RowSnapshot(
        index=index,
        pid=int(row["pid"]),
        core=int(row["core"]),
        numa_node=int(row["numa_node"]),
        state=WorkerState(int(row["state"])),
        restarts=int(row["restarts"]),
        started_mono_s=float(row["started_mono_s"]),
        heartbeat_mono_s=float(row["heartbeat_mono_s"]),
        heartbeats=int(row["heartbeats"]),
        connections=int(row["connections"]),
        msgs_in=int(row["msgs_in"]),
        msgs_out=int(row["msgs_out"]),
        bytes_in=int(row["bytes_in"]),
        bytes_out=int(row["bytes_out"]),
        ring_fill=float(row["ring_fill"]),
        damaged_assets=int(row["damaged_assets"]),
    )
