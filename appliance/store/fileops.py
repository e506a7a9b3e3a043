"""The file operations the store performs, behind one small interface.

The store touches the disk only through `FileOps`, so tests can swap in a fault-injecting layer
(appliance/testing/faultfs.py) that crashes at any write or fsync. Files are append-only while
they are written; whole-file replacement goes through `write_atomic` (tmp, fsync, rename, fsync
directory). Durability rules the store relies on:

- data appended to a file is durable after `fsync(path)` (or the function `fsync_job(path)`
  returns, which may run on another thread);
- a created, renamed or removed name is durable after `fsync_dir(directory)`;
- a directory made by `make_dirs` is durable when it returns (each directory it created had its
  parent synced), so a file synced into a new stream's directory does not vanish with it.

Preallocation (OsFileOps(preallocate_bytes=N)): an appended file is extended ahead of its writes
with posix_fallocate (by the file's own size, at least STORE_PREALLOCATE_MIN_BYTES, at most N),
so a later fdatasync of an append into that space does not also commit a new file size and newly
allocated blocks (on ext4 about 30% cheaper: the sync publish path). The file then ends in zero
bytes that are not data: OsFileOps tracks each open file's logical end, writes there with pwrite,
never reads past it, and trims the tail when the file is closed. After a crash the tail is still
there: recovery treats a run of zero bytes after the last whole record as unwritten space (a zero
frame is never a valid record), not as a torn write.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable
from typing import Protocol

from appliance import limits


class FileOps(Protocol):
    def make_dirs(self, path: str) -> None:
        """Create the directory and its missing parents, durably (make_dirs_durably)."""
        ...

    def list_dir(self, path: str) -> list[str]: ...

    def exists(self, path: str) -> bool: ...

    def size(self, path: str) -> int: ...

    def read_all(self, path: str) -> bytes: ...

    def read_at(self, path: str, offset: int, length: int) -> bytes: ...

    def create(self, path: str, data: bytes) -> None:
        """Create (or empty) the file and append data; not durable until fsync and fsync_dir."""
        ...

    def append(self, path: str, data: bytes) -> None: ...

    def fsync_job(self, path: str) -> Callable[[], None]:
        """A function that makes durable everything appended to path before this call."""
        ...

    def fsync(self, path: str) -> None: ...

    def fsync_dir(self, path: str) -> None: ...

    def truncate(self, path: str, size: int) -> None: ...

    def rename(self, source: str, target: str) -> None: ...

    def remove(self, path: str) -> None: ...

    def close_file(self, path: str) -> None: ...

    def close(self) -> None: ...


def write_file(ops: FileOps, path: str, data: bytes) -> None:
    """Create path holding data, durable contents (its name is durable after fsync_dir)."""
    ops.create(path, data)
    ops.fsync(path)
    ops.close_file(path)


class _MakesDirs(Protocol):
    def make_dir(self, path: str) -> None: ...

    def fsync_dir(self, path: str) -> None: ...


def make_dirs_durably(ops: _MakesDirs, path: str) -> None:
    """Create path and its missing parents, one at a time, then sync the parent of each one
    created: a directory's name is durable only once its parent directory is synced."""
    missing = []
    current = os.path.abspath(path)
    while not os.path.isdir(current):
        missing.append(current)
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    for directory in reversed(missing):
        try:
            ops.make_dir(directory)
        except FileExistsError:  # made meanwhile by another thread or process
            if not os.path.isdir(directory):
                raise
    for directory in reversed(missing):
        ops.fsync_dir(os.path.dirname(directory))


def write_atomic(ops: FileOps, path: str, data: bytes) -> None:
    """Replace path with data so that a crash leaves either the old or the new file."""
    tmp = path + ".tmp"
    write_file(ops, tmp, data)
    ops.rename(tmp, path)
    ops.fsync_dir(os.path.dirname(path) or ".")


class OsFileOps:
    """FileOps over the real file system (fdatasync for data, fsync for directories)."""

    def __init__(self, *, preallocate_bytes: int = 0) -> None:
        assert preallocate_bytes >= 0
        self._writers: dict[str, int] = {}
        self._ends: dict[str, int] = {}  # logical end of each file open for writing: where data goes
        self._allocated: dict[str, int] = {}  # physical size of a preallocated file (above its end)
        self._readers: OrderedDict[str, int] = OrderedDict()
        self._preallocate = preallocate_bytes

    def make_dirs(self, path: str) -> None:
        make_dirs_durably(self, path)

    def make_dir(self, path: str) -> None:
        os.mkdir(path)

    def list_dir(self, path: str) -> list[str]:
        return sorted(os.listdir(path))

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def size(self, path: str) -> int:
        end = self._ends.get(path)
        return end if end is not None else os.path.getsize(path)

    def read_all(self, path: str) -> bytes:
        end = self._ends.get(path)  # a file being written: its data, not the preallocated tail
        with open(path, "rb") as f:
            return f.read() if end is None else f.read(end)

    def read_at(self, path: str, offset: int, length: int) -> bytes:
        fd = self._writers.get(path)
        if fd is None:
            fd = self._reader(path)
        else:
            length = max(min(length, self._ends[path] - offset), 0)
        return os.pread(fd, length, offset)

    def _reader(self, path: str) -> int:
        fd = self._readers.get(path)
        if fd is not None:
            self._readers.move_to_end(path)
            return fd
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        self._readers[path] = fd
        if len(self._readers) > limits.STORE_READ_HANDLES_MAX:
            _, oldest = self._readers.popitem(last=False)
            os.close(oldest)
        return fd

    def _writer(self, path: str, *, truncate: bool = False) -> int:
        fd = self._writers.get(path)
        if fd is None or truncate:
            if fd is not None:
                self.close_file(path)
            # no O_APPEND: data goes to the logical end with pwrite (the file may be preallocated)
            flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | (os.O_TRUNC if truncate else 0)
            fd = os.open(path, flags, 0o644)
            self._writers[path] = fd
            self._ends[path] = os.fstat(fd).st_size
        return fd

    def create(self, path: str, data: bytes) -> None:
        self._drop_reader(path)
        fd = self._writer(path, truncate=True)
        _pwrite_all(fd, data, 0)
        self._ends[path] = len(data)

    def append(self, path: str, data: bytes) -> None:
        fd = self._writer(path)
        end = self._ends[path]
        after = end + len(data)
        if self._preallocate and after > self._allocated.get(path, end):
            self._extend(path, fd, after)
        _pwrite_all(fd, data, end)
        self._ends[path] = after

    def _extend(self, path: str, fd: int, needed: int) -> None:
        end = self._ends[path]
        start = max(self._allocated.get(path, 0), end)
        # ahead by the file's own size, from STORE_PREALLOCATE_MIN_BYTES up to preallocate_bytes:
        # many small streams do not each hold a megabyte of allocated zeros
        target = needed + min(self._preallocate, max(limits.STORE_PREALLOCATE_MIN_BYTES, end))
        try:
            os.posix_fallocate(fd, start, target - start)
        except OSError:  # not supported here (or no space): plain appends from now on
            self._preallocate = 0
            return
        self._allocated[path] = target

    def fsync_job(self, path: str) -> Callable[[], None]:
        fd = os.dup(self._writer(path))

        def run() -> None:
            try:
                os.fdatasync(fd)
            finally:
                os.close(fd)

        return run

    def fsync(self, path: str) -> None:
        os.fdatasync(self._writer(path))

    def fsync_dir(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def truncate(self, path: str, size: int) -> None:
        os.truncate(path, size)
        if path in self._ends:
            self._ends[path] = size
            self._allocated.pop(path, None)  # the file ends at size now

    def rename(self, source: str, target: str) -> None:
        self.close_file(source)
        self.close_file(target)
        os.replace(source, target)

    def remove(self, path: str) -> None:
        self.close_file(path)
        os.remove(path)

    def close_file(self, path: str) -> None:
        fd = self._writers.pop(path, None)
        end = self._ends.pop(path, None)
        allocated = self._allocated.pop(path, None)
        if fd is not None:
            try:
                if allocated is not None and end is not None and allocated > end:
                    os.ftruncate(fd, end)  # the unused preallocated tail goes (durable with the next fsync)
            finally:
                os.close(fd)
        self._drop_reader(path)

    def _drop_reader(self, path: str) -> None:
        fd = self._readers.pop(path, None)
        if fd is not None:
            os.close(fd)

    def close(self) -> None:
        for path in list(self._writers):
            self.close_file(path)
        for fd in self._readers.values():
            os.close(fd)
        self._readers.clear()


def _pwrite_all(fd: int, data: bytes, offset: int) -> None:
    written = os.pwrite(fd, data, offset)
    if written == len(data):
        return
    view = memoryview(data)
    while written < len(view):
        offset += written
        view = view[written:]
        written = os.pwrite(fd, view, offset)
