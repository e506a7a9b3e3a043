"""The shared status table: one row per worker, a numpy structured array over shared memory.

Theory of operation:
- The supervisor creates the segment with posix_ipc, maps it and unlinks its name at once, so
  nothing is ever left in /dev/shm, whatever process dies how. Workers get the segment as an
  inherited file descriptor and map it themselves.
- Each row has two writers with disjoint fields. The supervisor writes the identity and life
  cycle (pid, core, numa_node, state, restarts, started_mono_s). The worker writes its heartbeat
  and counters through `StatusRowWriter` (the StatusRow of appliance/worker/context.py).
- Counters are published under a sequence lock (`seq` odd while the worker writes) so a reader
  sees all counters of one update or retries; each field is an aligned 8-byte word. The table is
  for display and health, never for correctness: a reader that gives up after
  SNAPSHOT_RETRIES_MAX takes the last (possibly mixed) read.
- Times are CLOCK_MONOTONIC seconds, which every process of the host shares on Linux.
- Rows are 128 bytes (two cache lines) so workers never write the same line.
"""

from __future__ import annotations

import mmap
import os
import secrets
from dataclasses import dataclass
from enum import IntEnum

import numpy as np
import numpy.typing as npt
import posix_ipc  # type: ignore[import-not-found]

from appliance import limits
from appliance.clock import Clock, SystemClock

ROW_BYTES = 128
HEADER_BYTES = 64
MAGIC = 0x41505354_41545553  # "APSTATUS"
SNAPSHOT_RETRIES_MAX = 100
SHM_NAME_PREFIX = "/appliance-status-"

_FIELDS: list[tuple[str, str]] = [
    ("seq", "<u8"),
    ("pid", "<i8"),
    ("core", "<i4"),
    ("numa_node", "<i4"),
    ("state", "<u4"),
    ("restarts", "<u4"),
    ("started_mono_s", "<f8"),
    ("heartbeat_mono_s", "<f8"),
    ("heartbeats", "<u8"),
    ("connections", "<i8"),
    ("msgs_in", "<u8"),
    ("msgs_out", "<u8"),
    ("bytes_in", "<u8"),
    ("bytes_out", "<u8"),
    ("ring_fill", "<f8"),
]
ROW_DTYPE = np.dtype({"names": [name for name, _ in _FIELDS], "formats": [fmt for _, fmt in _FIELDS],
                      "itemsize": ROW_BYTES})
HEADER_DTYPE = np.dtype([("magic", "<u8"), ("rows", "<u8")])
assert ROW_DTYPE.itemsize == ROW_BYTES
assert HEADER_DTYPE.itemsize <= HEADER_BYTES
assert ROW_DTYPE.fields is not None
assert all(ROW_DTYPE.fields[name][1] % 8 == 0 for name, fmt in _FIELDS if fmt.endswith("8")), "aligned words"

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


def table_bytes(rows: int) -> int:
    return HEADER_BYTES + rows * ROW_BYTES


class StatusTable:
    """The mapped table; create() in the supervisor, attach() in a worker."""

    def __init__(self, fd: int, buffer: mmap.mmap, rows: int) -> None:
        self.fd = fd
        self._buffer = buffer
        self.header = np.ndarray((), dtype=HEADER_DTYPE, buffer=buffer, offset=0)
        self.rows: RowArray = np.ndarray((rows,), dtype=ROW_DTYPE, buffer=buffer, offset=HEADER_BYTES)

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
        """Map a table from an inherited descriptor; its size tells the row count."""
        size = os.fstat(fd).st_size
        rows = (size - HEADER_BYTES) // ROW_BYTES
        assert rows >= 1 and table_bytes(rows) == size, f"status table of {size} bytes"
        buffer = mmap.mmap(fd, size)
        table = cls(fd, buffer, rows)
        assert int(table.header["magic"]) == MAGIC, "not a status table"
        assert int(table.header["rows"]) == rows
        return table

    @property
    def row_count(self) -> int:
        return len(self.rows)

    def writer(self, index: int, *, clock: Clock | None = None) -> StatusRowWriter:
        return StatusRowWriter(self.rows, index, clock=clock or SystemClock())

    def reset_row(self, index: int, *, pid: int, core: int, numa_node: int, restarts: int, now_mono_s: float) -> None:
        """Supervisor: a new process takes slot `index` (the old one is gone; counters restart)."""
        row = self.rows[index]
        for name in ("connections", "msgs_in", "msgs_out", "bytes_in", "bytes_out", "heartbeats", "seq"):
            row[name] = 0
        row["ring_fill"] = 0.0
        row["pid"] = pid
        row["core"] = core
        row["numa_node"] = numa_node
        row["restarts"] = restarts
        row["started_mono_s"] = now_mono_s
        row["heartbeat_mono_s"] = now_mono_s
        row["state"] = WorkerState.STARTING

    def set_state(self, index: int, state: WorkerState) -> None:
        self.rows[index]["state"] = state

    def snapshot(self, index: int) -> RowSnapshot:
        """A consistent copy of one row (retries while the worker is mid-update)."""
        row = self.rows[index]
        copy = row.copy()
        for _ in range(SNAPSHOT_RETRIES_MAX):
            seq_before = int(row["seq"])
            copy = row.copy()
            if seq_before % 2 == 0 and int(row["seq"]) == seq_before:
                break
        return _snapshot_of(index, copy)

    def snapshots(self) -> list[RowSnapshot]:
        return [self.snapshot(index) for index in range(self.row_count)]

    def close(self) -> None:
        """Unmap and close the descriptor. Views handed out before must not be used after."""
        del self.rows
        del self.header
        self._buffer.close()
        os.close(self.fd)


class StatusRowWriter:
    """A worker's side of its row; implements appliance.worker.context.StatusRow."""

    def __init__(self, rows: RowArray, index: int, *, clock: Clock) -> None:
        assert 0 <= index < len(rows)
        self._row = rows[index]
        self._clock = clock

    def heartbeat(self) -> None:
        self._row["heartbeat_mono_s"] = self._clock.monotonic()
        self._row["heartbeats"] = int(self._row["heartbeats"]) + 1

    def set_counters(
        self, *, connections: int, msgs_in: int, msgs_out: int, bytes_in: int, bytes_out: int
    ) -> None:
        row = self._row
        seq = int(row["seq"])
        assert seq % 2 == 0, "one writer per row"
        row["seq"] = seq + 1
        row["connections"] = connections
        row["msgs_in"] = msgs_in
        row["msgs_out"] = msgs_out
        row["bytes_in"] = bytes_in
        row["bytes_out"] = bytes_out
        row["seq"] = seq + 2

    def set_ring_fill(self, fraction: float) -> None:
        """The fullest outbound ring of this worker, 0.0 (empty) to 1.0 (full)."""
        assert 0.0 <= fraction <= 1.0
        self._row["ring_fill"] = fraction


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
    )
