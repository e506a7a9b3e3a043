"""FaultFS: an in-memory FileOps that can crash at any write or fsync (tests and the simulator).

It models what a power cut leaves on disk. Each file (inode) has *volatile* bytes (what readers
see now) and *durable* bytes (what survives); `fsync` copies volatile to durable. Directory
entries are the same: created, renamed and removed names survive only after `fsync_dir`.

Every mutating call (create, append, fsync, fsync_dir, rename, remove, truncate) is a numbered
*crash point*. With `fail_fsync_at=k`, call number k, if it is a file fsync, fails with EIO and
makes nothing durable, and drops the unsynced bytes as Linux drops the dirty pages it failed to
write back (the process lives on; see FileStreamStore's fail-closed rule). With `crash_at=k`, call number k raises SimulatedCrash instead of happening; then
`after_crash(mode)` returns the file system a restarted process would find:

- "lose":  only durable bytes and names survive;
- "torn":  as "lose", but if the crashing call was an append, that file keeps its unsynced bytes
           and the first half of the crashing write (a torn last write);
- "flush": every completed call survived (the OS happened to write everything back).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

CrashMode = Literal["lose", "torn", "flush"]


class SimulatedCrash(Exception):
    """The simulated machine lost power at this call."""


@dataclass(slots=True)
class _Inode:
    data: bytearray = field(default_factory=bytearray)
    durable: bytes = b""


class FaultFS:
    def __init__(self, *, crash_at: int | None = None, fail_fsync_at: int | None = None) -> None:
        self.crash_at = crash_at
        self.fail_fsync_at = fail_fsync_at  # this call, if an fsync, raises EIO and syncs nothing
        self.calls = 0  # crash points passed so far
        self.crashed = False
        self._names: dict[str, _Inode] = {}
        self._durable_names: dict[str, _Inode] = {}
        self._dirs: set[str] = set()
        self._torn: tuple[_Inode, bytes] | None = None

    # --- crash control ----------------------------------------------------------------------------

    def _point(self, torn: tuple[_Inode, bytes] | None = None) -> None:
        if self.crashed:
            raise SimulatedCrash("the machine is down")
        if self.crash_at is not None and self.calls == self.crash_at:
            self.crashed = True
            self._torn = torn
            raise SimulatedCrash(f"crash at call {self.calls}")
        self.calls += 1

    def after_crash(self, mode: CrashMode) -> FaultFS:
        """The disk as a restarted process finds it (see the module docstring)."""
        fresh = FaultFS()
        fresh._dirs = set(self._dirs)
        names = self._names if mode == "flush" else self._durable_names
        for name, inode in names.items():
            content = bytes(inode.data) if mode == "flush" else inode.durable
            if mode == "torn" and self._torn is not None and self._torn[0] is inode:
                content = bytes(inode.data) + self._torn[1][: len(self._torn[1]) // 2]
            fresh._names[name] = _Inode(bytearray(content), content)
        fresh._durable_names = dict(fresh._names)
        return fresh

    def flip_bit(self, path: str, bit: int) -> None:
        """Damage a file in place (durably), as a bad disk would."""
        inode = self._names[path]
        inode.data[bit // 8] ^= 1 << (bit % 8)
        inode.durable = bytes(inode.data)

    # --- FileOps ----------------------------------------------------------------------------------

    def make_dirs(self, path: str) -> None:
        self._dirs.add(path)

    def list_dir(self, path: str) -> list[str]:
        return sorted(os.path.basename(n) for n in self._names if os.path.dirname(n) == path)

    def exists(self, path: str) -> bool:
        return path in self._names or path in self._dirs

    def size(self, path: str) -> int:
        return len(self._inode(path).data)

    def read_all(self, path: str) -> bytes:
        return bytes(self._inode(path).data)

    def read_at(self, path: str, offset: int, length: int) -> bytes:
        return bytes(self._inode(path).data[offset : offset + length])

    def create(self, path: str, data: bytes) -> None:
        self._point()
        self._names[path] = _Inode(bytearray(data))

    def append(self, path: str, data: bytes) -> None:
        inode = self._inode(path)
        self._point(torn=(inode, bytes(data)))
        inode.data += data

    def fsync_job(self, path: str) -> Callable[[], None]:
        inode = self._inode(path)

        def run() -> None:
            failing = self.calls == self.fail_fsync_at
            self._point()
            if failing:
                inode.data = bytearray(inode.durable)  # Linux drops the dirty pages it failed to write
                raise OSError(errno.EIO, "injected fsync failure")
            inode.durable = bytes(inode.data)

        return run

    def fsync(self, path: str) -> None:
        self.fsync_job(path)()

    def fsync_dir(self, path: str) -> None:
        self._point()
        for name in [n for n in self._durable_names if os.path.dirname(n) == path]:
            del self._durable_names[name]
        for name, inode in self._names.items():
            if os.path.dirname(name) == path:
                self._durable_names[name] = inode

    def truncate(self, path: str, size: int) -> None:
        self._point()
        del self._inode(path).data[size:]

    def rename(self, source: str, target: str) -> None:
        self._point()
        self._names[target] = self._names.pop(source)

    def remove(self, path: str) -> None:
        self._point()
        del self._names[path]

    def close_file(self, path: str) -> None:
        pass

    def close(self) -> None:
        pass

    def _inode(self, path: str) -> _Inode:
        try:
            return self._names[path]
        except KeyError:
            raise FileNotFoundError(path) from None
