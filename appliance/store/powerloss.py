"""Power loss for real processes: the FileOps every store and RAFT log of a process writes
through, and, with APPLIANCE_FAULT_FS set, a journal of what was durable so that a test can put
every file back to it after killing the processes (the disk as a power cut leaves it).

`file_ops()` is the one place the choice is made: OsFileOps normally (the variable is read when a
store or log opens, never on a write), JournaledOps when APPLIANCE_FAULT_FS=<directory> is set.

JournaledOps does every operation on the real file system (OsFileOps) and also records, in
`<directory>/<pid>.journal` (page cache is enough: the harness kills processes, the OS lives on),
the model of appliance/testing/faultfs.py, the one the simulator crashes stores on:

- an fsync makes the bytes of a file durable: its record holds the bytes appended (or rewritten
  after a truncate) since the last recorded fsync of that file;
- a created, renamed or removed name is durable only after `fsync_dir` of its directory, and so
  is a directory made by `make_dirs` (FileOps makes them durably: it syncs each one's parent);
  a directory whose name is not durable vanishes with everything in it;
- a file that existed when the process first touched it is copied into the journal then (its
  durable content: the journal opens with `os.sync()`, so what is on disk at that moment is
  durable indeed; journals of dead processes are dropped then, as the sync made them moot).

`power_loss(directory)` (run when every process writing there is dead) replays the journals and
rewrites each file they name to its durable content: unsynced appends are dropped (with `torn`, a
file also keeps the first half of the bytes written after its last fsync, a torn last write),
a name never made durable vanishes, a removed or renamed name whose directory was not synced
comes back. Only directories made through FileOps are modelled (one made otherwise stays, as if
durable), and a file changed outside FileOps (shutil.rmtree of a deleted stream) is not either.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass

from appliance.store.fileops import FileOps, OsFileOps, make_dirs_durably

ENV = "APPLIANCE_FAULT_FS"
JOURNAL_SUFFIX = ".journal"
_LENGTH = struct.Struct("<II")  # header length, data length; then the JSON header and the data


def file_ops(*, preallocate_bytes: int = 0) -> FileOps:
    """The FileOps a store or RAFT log of this process writes through (module doc)."""
    directory = os.environ.get(ENV)
    if not directory:
        return OsFileOps(preallocate_bytes=preallocate_bytes)
    return JournaledOps(OsFileOps(preallocate_bytes=preallocate_bytes), _process_journal(directory))


_journal_lock = threading.Lock()
_journal: PowerJournal | None = None


def _process_journal(directory: str) -> PowerJournal:
    global _journal
    with _journal_lock:
        if _journal is None or _journal.pid != os.getpid() or _journal.directory != directory:
            _journal = PowerJournal(directory)
        return _journal


@dataclass(slots=True)
class _File:
    ino: int
    recorded: int  # durable length as the journal has it
    low: int  # the lowest size a truncate cut it to since its last recorded fsync


class PowerJournal:
    """The process's record of what is durable (module doc). Thread-safe: fsync jobs record
    from the store's sync threads."""

    def __init__(self, directory: str, *, sync_first: bool = True) -> None:
        os.makedirs(directory, exist_ok=True)
        if sync_first:  # what is on disk now is durable: the baseline of a file first touched later
            os.sync()
        self.directory = directory
        self.pid = os.getpid()
        for name in os.listdir(directory):
            if name.endswith(JOURNAL_SUFFIX) and not _alive(name.removesuffix(JOURNAL_SUFFIX)):
                os.remove(os.path.join(directory, name))
        path = os.path.join(directory, f"{self.pid}{JOURNAL_SUFFIX}")
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND | os.O_CLOEXEC, 0o644)
        self._lock = threading.Lock()
        self._files: dict[str, _File] = {}  # by path: every file this process touched
        self._next = 1

    def _write(self, header: dict[str, object], data: bytes = b"") -> None:
        raw = json.dumps(header, separators=(",", ":")).encode()
        record = _LENGTH.pack(len(raw), len(data)) + raw + data
        written = os.write(self._fd, record)  # one write: a kill never leaves half a record
        assert written == len(record), "short journal write"

    def _new(self, path: str, recorded: int) -> _File:
        entry = _File(self._next, recorded, recorded)
        self._next += 1
        self._files[path] = entry
        return entry

    def _touch(self, path: str) -> _File | None:
        """The file at path, copied into the journal as durable if this process meets it first."""
        entry = self._files.get(path)
        if entry is None and os.path.isfile(path):
            with open(path, "rb") as handle:
                data = handle.read()
            entry = self._new(path, len(data))
            self._write({"op": "base", "ino": entry.ino, "path": path}, data)
        return entry

    def made_dir(self, path: str) -> None:
        with self._lock:
            self._write({"op": "mkdir", "path": os.path.abspath(path)})

    def created(self, path: str) -> None:
        path = os.path.abspath(path)
        with self._lock:
            self._touch(path)
            entry = self._new(path, 0)
            self._write({"op": "new", "ino": entry.ino, "path": path})

    def appending(self, path: str) -> None:
        """Before an append: a file the append creates is a new name."""
        if path in self._files:
            return
        path = os.path.abspath(path)
        with self._lock:
            if self._touch(path) is None:
                entry = self._new(path, 0)
                self._write({"op": "new", "ino": entry.ino, "path": path})

    def truncating(self, path: str, size: int) -> None:
        path = os.path.abspath(path)
        with self._lock:
            entry = self._touch(path)
            if entry is not None:
                entry.low = min(entry.low, size)

    def sync_start(self, path: str, read: Callable[[int], bytes]) -> tuple[_File, int, bytes] | None:
        """At an fsync's call: what it will make durable (read(start) -> the bytes from start on)."""
        path = os.path.abspath(path)
        with self._lock:
            entry = self._touch(path)
            if entry is None:
                return None
            start = min(entry.recorded, entry.low)
            return entry, start, read(start)

    def synced(self, started: tuple[_File, int, bytes] | None) -> None:
        """The fsync returned: its bytes are durable."""
        if started is None:
            return
        entry, start, data = started
        with self._lock:
            self._write({"op": "sync", "ino": entry.ino, "start": start}, data)
            entry.recorded = start + len(data)
            entry.low = entry.recorded

    def renaming(self, source: str, target: str) -> None:
        source, target = os.path.abspath(source), os.path.abspath(target)
        with self._lock:
            self._touch(source)
            self._touch(target)
            entry = self._files.pop(source, None)
            if entry is not None:
                self._files[target] = entry
            self._write({"op": "rename", "source": source, "target": target})

    def removing(self, path: str) -> None:
        path = os.path.abspath(path)
        with self._lock:
            self._touch(path)
            self._files.pop(path, None)
            self._write({"op": "remove", "path": path})

    def dir_synced(self, directory: str) -> None:
        with self._lock:
            self._write({"op": "dirsync", "dir": os.path.abspath(directory)})


def _alive(pid: str) -> bool:
    if not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class JournaledOps:
    """FileOps on the real file system that journals what is durable (module doc)."""

    def __init__(self, inner: OsFileOps, journal: PowerJournal) -> None:
        self._inner = inner
        self._journal = journal

    def make_dirs(self, path: str) -> None:
        make_dirs_durably(self, path)

    def make_dir(self, path: str) -> None:
        self._inner.make_dir(path)
        self._journal.made_dir(path)

    def list_dir(self, path: str) -> list[str]:
        return self._inner.list_dir(path)

    def exists(self, path: str) -> bool:
        return self._inner.exists(path)

    def size(self, path: str) -> int:
        return self._inner.size(path)

    def read_all(self, path: str) -> bytes:
        return self._inner.read_all(path)

    def read_at(self, path: str, offset: int, length: int) -> bytes:
        return self._inner.read_at(path, offset, length)

    def create(self, path: str, data: bytes) -> None:
        self._journal.created(path)
        self._inner.create(path, data)

    def append(self, path: str, data: bytes) -> None:
        self._journal.appending(path)
        self._inner.append(path, data)

    def _tail(self, path: str) -> Callable[[int], bytes]:
        end = self._inner.size(path)
        return lambda start: self._inner.read_at(path, start, end - start)

    def fsync_job(self, path: str) -> Callable[[], None]:
        started = self._journal.sync_start(path, self._tail(path))
        job = self._inner.fsync_job(path)

        def run() -> None:
            job()
            self._journal.synced(started)

        return run

    def fsync(self, path: str) -> None:
        started = self._journal.sync_start(path, self._tail(path))
        self._inner.fsync(path)
        self._journal.synced(started)

    def fsync_dir(self, path: str) -> None:
        self._inner.fsync_dir(path)
        self._journal.dir_synced(path)

    def truncate(self, path: str, size: int) -> None:
        self._journal.truncating(path, size)
        self._inner.truncate(path, size)

    def rename(self, source: str, target: str) -> None:
        self._journal.renaming(source, target)
        self._inner.rename(source, target)

    def remove(self, path: str) -> None:
        self._journal.removing(path)
        self._inner.remove(path)

    def close_file(self, path: str) -> None:
        self._inner.close_file(path)

    def close(self) -> None:
        self._inner.close()


# --- the power cut (offline) --------------------------------------------------------------------


@dataclass(slots=True)
class _Replay:
    names: dict[str, int]  # path -> inode, as the process saw them
    durable: dict[str, int]  # path -> inode, as a power cut leaves them
    content: dict[int, bytearray]  # durable bytes of each inode
    dirs: set[str]  # directories made
    durable_dirs: set[str]  # ... whose names were synced

    def lost(self, path: str) -> str | None:
        """The outermost directory made but never made durable that path is in (or is)."""
        found = None
        current = path
        while True:
            if current in self.dirs and current not in self.durable_dirs:
                found = current
            parent = os.path.dirname(current)
            if parent == current:
                return found
            current = parent


def read_journal(data: bytes) -> list[tuple[dict[str, object], bytes]]:
    """The records of one journal; a record cut short (a kill mid-write) ends it."""
    records = []
    offset = 0
    while offset + _LENGTH.size <= len(data):
        header_len, data_len = _LENGTH.unpack_from(data, offset)
        begin = offset + _LENGTH.size
        end = begin + header_len + data_len
        if end > len(data):
            break
        records.append((json.loads(data[begin : begin + header_len]), bytes(data[begin + header_len : end])))
        offset = end
    return records


def _replay(records: list[tuple[dict[str, object], bytes]]) -> _Replay:
    state = _Replay({}, {}, {}, set(), set())
    for header, data in records:
        op = header["op"]
        if op == "base":
            ino, path = int(str(header["ino"])), str(header["path"])
            state.content[ino] = bytearray(data)
            state.names[path] = state.durable[path] = ino
        elif op == "new":
            ino = int(str(header["ino"]))
            state.content[ino] = bytearray()
            state.names[str(header["path"])] = ino
        elif op == "sync":
            ino, start = int(str(header["ino"])), int(str(header["start"]))
            content = state.content[ino]
            del content[start:]
            content += bytes(start - len(content))  # a later fsync's record before an earlier one's
            content += data
        elif op == "rename":
            ino = state.names.pop(str(header["source"]), None)
            if ino is not None:
                state.names[str(header["target"])] = ino
        elif op == "remove":
            state.names.pop(str(header["path"]), None)
        elif op == "mkdir":
            state.dirs.add(str(header["path"]))
        elif op == "dirsync":
            directory = str(header["dir"])
            state.durable_dirs |= {d for d in state.dirs if os.path.dirname(d) == directory}
            for path in [p for p in state.durable if os.path.dirname(p) == directory and p not in state.names]:
                del state.durable[path]
            state.durable.update({p: i for p, i in state.names.items() if os.path.dirname(p) == directory})
    return state


def power_loss(directory: str, *, torn: bool = False) -> list[str]:
    """Every file the journals in `directory` name, back to what a power cut leaves (module doc);
    the journals are removed. Run it only when every process that wrote them is dead. Returns
    the paths changed."""
    changed: list[str] = []
    if not os.path.isdir(directory):
        return changed
    for name in sorted(os.listdir(directory)):
        if not name.endswith(JOURNAL_SUFFIX):
            continue
        path = os.path.join(directory, name)
        with open(path, "rb") as handle:
            state = _replay(read_journal(handle.read()))
        changed += _restore(state, torn=torn)
        os.remove(path)
    return changed


def _restore(state: _Replay, *, torn: bool) -> list[str]:
    changed = []
    for directory in sorted({d for d in map(state.lost, state.dirs) if d is not None}):
        if os.path.isdir(directory):
            shutil.rmtree(directory)
            changed.append(directory)
    for path in sorted(set(state.names) | set(state.durable)):
        ino = state.durable.get(path)
        if state.lost(path) is not None:
            continue  # went with its directory
        if ino is None:
            if os.path.exists(path):
                os.remove(path)
                changed.append(path)
            continue
        content = bytes(state.content[ino])
        current = _read(path)
        if torn and current is not None and state.names.get(path) == ino and current.startswith(content):
            content = current[: len(content) + (len(current) - len(content)) // 2]
        if current != content:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            with open(path, "wb") as handle:
                handle.write(content)
            changed.append(path)
    if changed:
        os.sync()
    return changed


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except (FileNotFoundError, IsADirectoryError):
        return None
