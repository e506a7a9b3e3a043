"""An account's connection limit (`conn` in its JWT) across the workers of one server, as
nats-server counts an account's clients for the whole server.

Theory of operation (as supervisor/admission.py for max_connections):
- One file shared by the workers (next to the control socket), mapped by each: a header and
  SLOTS slots; a slot is an account key and one count per worker. Only worker k writes column k.
- Admitting is check-then-increment under a POSIX record lock on the header's first byte (tried,
  never waited for with the loop blocked; after ADMISSION_LOCK_TRIES the connection is refused):
  find the account's slot (or claim a free one), sum the columns, refuse at the limit, else
  count one more in our column. Releasing is a lock-free store of our own decremented count.
- A worker that starts (or restarts after a crash) zeroes its column first: whatever its
  previous incarnation counted is gone with it. A worker that died and is not restarted yet
  keeps its counts until then (at worst a connection is refused meanwhile, never one too many).
- Slots are never freed while the server runs (an account with no connection has zeros); when
  all are taken a new account is counted by each worker alone, and that is logged once.
"""

from __future__ import annotations

import fcntl
import logging
import mmap
import os
import zlib

from appliance import limits

logger = logging.getLogger(__name__)

SLOTS = 1024
KEY_BYTES = 64  # an account public key is 56 characters
HEADER_BYTES = 64
LOCK_OFFSET = 0
WORKERS_MAX = 256


class AccountGate:
    def __init__(self, path: str, worker_index: int, worker_count: int) -> None:
        assert 0 <= worker_index < worker_count <= WORKERS_MAX
        self.index = worker_index
        self.columns = worker_count
        self.slot_bytes = KEY_BYTES + 8 * worker_count
        size = HEADER_BYTES + SLOTS * self.slot_bytes
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        if os.fstat(self._fd).st_size < size:
            os.ftruncate(self._fd, size)  # zero-filled; every worker asks for the same size
        self._map = mmap.mmap(self._fd, size)
        self._counts = memoryview(self._map).cast("q")
        self._slots: dict[str, int] = {}  # account -> slot, as found
        self._admitted: dict[int, int] = {}  # client id -> slot it is counted in
        self._full_logged = False
        if self._lock():
            try:
                for slot in range(SLOTS):
                    self._counts[self._word(slot, self.index)] = 0
            finally:
                self._unlock()

    def _word(self, slot: int, column: int) -> int:
        return (HEADER_BYTES + slot * self.slot_bytes + KEY_BYTES) // 8 + column

    def _key_at(self, slot: int) -> bytes:
        start = HEADER_BYTES + slot * self.slot_bytes
        return self._map[start:start + KEY_BYTES].rstrip(b"\0")

    def _slot_for(self, account: str) -> int | None:
        """The account's slot, claiming a free one (under the lock)."""
        if account in self._slots:
            return self._slots[account]
        key = account.encode()[:KEY_BYTES]
        first = zlib.crc32(key) % SLOTS  # the same probe order in every worker
        for probe in range(SLOTS):
            slot = (first + probe) % SLOTS
            found = self._key_at(slot)
            if found == key:
                self._slots[account] = slot
                return slot
            if not found:
                start = HEADER_BYTES + slot * self.slot_bytes
                self._map[start:start + len(key)] = key
                self._slots[account] = slot
                return slot
        return None

    def admit(self, cid: int, account: str, limit: int, local_count: int) -> bool:
        """Count client `cid` in `account` unless the server is at `limit` for it."""
        if not self._lock():
            logger.warning("account connection limit: the lock stayed busy; refusing cid %d", cid)
            return False
        try:
            slot = self._slot_for(account)
            if slot is None:
                if not self._full_logged:
                    logger.warning("account connection limits: %d accounts counted; more are counted per worker",
                                   SLOTS)
                    self._full_logged = True
                return local_count < limit
            total = sum(self._counts[self._word(slot, column)] for column in range(self.columns))
            if total >= limit:
                return False
            self._counts[self._word(slot, self.index)] += 1
        finally:
            self._unlock()
        self._admitted[cid] = slot
        return True

    def release(self, cid: int) -> None:
        slot = self._admitted.pop(cid, None)
        if slot is not None:
            self._counts[self._word(slot, self.index)] -= 1

    def _lock(self) -> bool:
        for attempt in range(limits.ADMISSION_LOCK_TRIES):
            try:
                fcntl.lockf(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, LOCK_OFFSET, os.SEEK_SET)
                return True
            except (BlockingIOError, PermissionError):
                if attempt:
                    os.sched_yield()
        return False

    def _unlock(self) -> None:
        fcntl.lockf(self._fd, fcntl.LOCK_UN, 1, LOCK_OFFSET, os.SEEK_SET)

    def close(self) -> None:
        self._counts.release()
        self._map.close()
        os.close(self._fd)
