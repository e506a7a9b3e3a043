"""Server-wide `max_connections` across workers, as nats-server enforces it for the whole server.

Theory of operation:
- Each worker counts the client connections it admitted and still has in its own row of the
  status table (`admitted`, an aligned 8-byte word only that worker writes). The server-wide
  count is the sum of the rows.
- Admitting is check-then-increment, which two workers must not interleave: it runs under a
  POSIX record lock (fcntl) on one byte of the status table's header, taken through the
  inherited fd. The kernel drops a process's record locks when it dies, so a killed worker can
  never leave the lock held; nothing in the shared memory needs a C atomic.
- Releasing needs no lock: the worker stores its own decremented count (a reader summing at the
  same moment sees the old or the new value, both safe: at worst one admission is refused
  while a connection is closing).
- When a worker dies, its connections are gone: the supervisor zeroes its row
  (StatusTable.release_admitted) as soon as it reaps it, before a successor can take the row
  (never after spawning one: the successor may already have admitted connections).
- The lock is only ever tried (LOCK_NB), never waited for without a bound: a sibling that is
  stopped (SIGSTOP) while holding it for its few instructions would otherwise wedge every
  worker's accept path. First ADMISSION_LOCK_TRIES tries yielding the CPU; then, since on a
  loaded machine the holder may simply be preempted for a timeslice or more, tries with short
  sleeps for up to ADMISSION_LOCK_WAIT_S. Only then is the connection refused (never more than
  max_connections) and the event logged. (CI once refused a connection after the yields alone.)
"""

from __future__ import annotations

import fcntl
import logging
import mmap
import os
import time

from appliance import limits
from appliance.supervisor.status_row import HEADER_BYTES, OFFSETS, ROW_BYTES, map_table, rows_in

logger = logging.getLogger(__name__)

LOCK_OFFSET = 32  # a byte of the table header nobody reads or writes: only locked
LOCK_BYTES = 1
assert LOCK_OFFSET + LOCK_BYTES <= HEADER_BYTES


class ConnectionGate:
    """One worker's admission of client connections against the server-wide limit."""

    def __init__(self, fd: int, buffer: mmap.mmap, index: int, *, limit: int) -> None:
        rows = rows_in(len(buffer))
        assert 0 <= index < rows
        self._fd = fd
        self._buffer = buffer
        self._view = memoryview(buffer).cast("q")  # every row's `admitted` word, by index
        self._slots = [(HEADER_BYTES + row * ROW_BYTES + OFFSETS["admitted"]) // 8 for row in range(rows)]
        self._mine = self._slots[index]
        self.limit = limit
        self._admitted: set[int] = set()  # client ids this worker counts; bounded by `limit`
        self.lock_failures = 0

    def total(self) -> int:
        """Client connections admitted by all workers now."""
        view = self._view
        return sum(view[slot] for slot in self._slots)

    def admit(self, cid: int) -> bool:
        """Count connection `cid` if the server is below its limit; False: refuse it."""
        assert cid not in self._admitted
        if not self._lock():
            self.lock_failures += 1
            logger.warning("max_connections: the admission lock stayed busy (a worker stopped holding it?); "
                           "refusing cid %d", cid)
            return False
        try:
            if self.total() >= self.limit:
                return False
            self._view[self._mine] += 1
        finally:
            fcntl.lockf(self._fd, fcntl.LOCK_UN, LOCK_BYTES, LOCK_OFFSET, os.SEEK_SET)
        self._admitted.add(cid)
        return True

    def release(self, cid: int) -> None:
        """Connection `cid` closed (nothing to do when it was refused)."""
        if cid in self._admitted:
            self._admitted.remove(cid)
            self._view[self._mine] -= 1

    def _lock(self) -> bool:
        for attempt in range(limits.ADMISSION_LOCK_TRIES):
            if self._try_lock():
                return True
            if attempt:
                os.sched_yield()
        deadline = time.monotonic() + limits.ADMISSION_LOCK_WAIT_S
        while time.monotonic() < deadline:
            time.sleep(limits.ADMISSION_LOCK_SLEEP_S)
            if self._try_lock():
                return True
        return False

    def _try_lock(self) -> bool:
        try:
            fcntl.lockf(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB, LOCK_BYTES, LOCK_OFFSET, os.SEEK_SET)
        except (BlockingIOError, PermissionError):  # EAGAIN / EACCES: another worker holds it
            return False
        return True

    def close(self) -> None:
        self._view.release()
        self._buffer.close()


def attach_gate(fd: int, index: int, *, limit: int) -> ConnectionGate:
    """A worker's gate over the status table it inherited as `fd` (its own mapping of it)."""
    return ConnectionGate(fd, map_table(fd), index, limit=limit)
