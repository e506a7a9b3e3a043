"""The status table's byte layout and a worker's writer of its own row, without numpy.

Workers import this (not status_table.py) so that starting or restarting a worker does not pay
for numpy; the supervisor reads the same bytes as a numpy structured array built from FIELDS.
See status_table.py for the theory of operation (two writers per row, sequence lock, clock).
"""

from __future__ import annotations

import mmap
import os
import struct

from appliance.clock import Clock, SystemClock

ROW_BYTES = 128  # two cache lines: workers never write the same line
HEADER_BYTES = 64
MAGIC = 0x41505354_41545553  # "APSTATUS"
HEADER_FORMAT = "<QQ"  # magic, rows

# (name, struct format) in row order; offsets follow, packed, every 8-byte field 8-aligned
FIELD_FORMATS: list[tuple[str, str]] = [
    ("seq", "Q"),
    ("pid", "q"),
    ("core", "i"),
    ("numa_node", "i"),
    ("state", "I"),
    ("restarts", "I"),
    ("started_mono_s", "d"),
    ("heartbeat_mono_s", "d"),
    ("heartbeats", "Q"),
    ("connections", "q"),
    ("msgs_in", "Q"),
    ("msgs_out", "Q"),
    ("bytes_in", "Q"),
    ("bytes_out", "Q"),
    ("ring_fill", "d"),
    ("admitted", "q"),  # client connections this worker admitted and still has (admission.py)
    ("damaged_assets", "q"),  # JetStream streams/consumers with unrepaired damage or not opened
]


def _offsets() -> dict[str, int]:
    offsets: dict[str, int] = {}
    offset = 0
    for name, fmt in FIELD_FORMATS:
        size = struct.calcsize("<" + fmt)
        assert offset % size == 0, f"{name} is not aligned"
        offsets[name] = offset
        offset += size
    assert offset <= ROW_BYTES
    return offsets


OFFSETS = _offsets()
COUNTER_NAMES = ("connections", "msgs_in", "msgs_out", "bytes_in", "bytes_out")
assert all(OFFSETS[name] % 8 == 0 for name, fmt in FIELD_FORMATS if fmt in "qQd"), "8-byte fields are aligned"


def table_bytes(rows: int) -> int:
    return HEADER_BYTES + rows * ROW_BYTES


def rows_in(size: int) -> int:
    """Rows of a table of `size` bytes; ValueError when the size fits no table."""
    rows = (size - HEADER_BYTES) // ROW_BYTES
    if rows < 1 or table_bytes(rows) != size:
        raise ValueError(f"a status table cannot be {size} bytes")
    return rows


class StatusRowWriter:
    """A worker's side of its row; implements appliance.worker.context.StatusRow.

    Every field is written by one aligned 8-byte store through a typed memoryview (never
    struct.pack_into, which zero-fills its target before writing: a reader could see 0 there).
    """

    def __init__(self, buffer: mmap.mmap, index: int, *, clock: Clock) -> None:
        assert 0 <= index < rows_in(len(buffer))
        base = HEADER_BYTES + index * ROW_BYTES
        self._whole = memoryview(buffer)
        self._row = self._whole[base:base + ROW_BYTES]
        self._u64 = self._row.cast("Q")  # indexes are byte offsets // 8
        self._i64 = self._row.cast("q")
        self._f64 = self._row.cast("d")
        self._clock = clock

    def heartbeat(self) -> None:
        self._f64[OFFSETS["heartbeat_mono_s"] // 8] = self._clock.monotonic()
        self._u64[OFFSETS["heartbeats"] // 8] += 1

    def set_counters(
        self, *, connections: int, msgs_in: int, msgs_out: int, bytes_in: int, bytes_out: int
    ) -> None:
        seq_at = OFFSETS["seq"] // 8
        seq = self._u64[seq_at]
        assert seq % 2 == 0, "one writer per row"
        self._u64[seq_at] = seq + 1
        self._i64[OFFSETS["connections"] // 8] = connections
        self._u64[OFFSETS["msgs_in"] // 8] = msgs_in
        self._u64[OFFSETS["msgs_out"] // 8] = msgs_out
        self._u64[OFFSETS["bytes_in"] // 8] = bytes_in
        self._u64[OFFSETS["bytes_out"] // 8] = bytes_out
        self._u64[seq_at] = seq + 2

    def set_ring_fill(self, fraction: float) -> None:
        """The fullest outbound ring of this worker, 0.0 (empty) to 1.0 (full)."""
        assert 0.0 <= fraction <= 1.0
        self._f64[OFFSETS["ring_fill"] // 8] = fraction

    def set_damaged_assets(self, count: int) -> None:
        """Streams or consumers held here with unrepaired damage (or that could not be opened)."""
        self._i64[OFFSETS["damaged_assets"] // 8] = count

    def close(self) -> None:
        """Release the views (the mapping can only be closed after this)."""
        for view in (self._u64, self._i64, self._f64, self._row, self._whole):
            view.release()


def map_table(fd: int) -> mmap.mmap:
    """Map a status table from an inherited descriptor, checking that it is one."""
    size = os.fstat(fd).st_size
    rows = rows_in(size)
    buffer = mmap.mmap(fd, size)
    magic, header_rows = struct.unpack_from(HEADER_FORMAT, buffer, 0)
    if magic != MAGIC or header_rows != rows:
        buffer.close()
        raise ValueError("not a status table")
    return buffer


def attach_writer(fd: int, index: int, *, clock: Clock | None = None) -> StatusRowWriter:
    """What a worker does with the fd the supervisor passed: map it, write row `index`."""
    return StatusRowWriter(map_table(fd), index, clock=clock or SystemClock())
