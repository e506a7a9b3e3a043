"""OverlayOps: read a real store directory while every write stays in memory (offline tools).

`appliance store inspect` opens a FileStreamStore to replay and report, and recovery may want to
truncate a torn tail or create an active segment. Over this FileOps those changes land in an
in-memory copy: the directory on disk is never modified.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from appliance.store.fileops import OsFileOps


class OverlayOps:
    def __init__(self) -> None:
        self._disk = OsFileOps()
        self._files: dict[str, bytearray] = {}  # written or copied-on-write files
        self._removed: set[str] = set()

    def _visible_on_disk(self, path: str) -> bool:
        return path not in self._removed and path not in self._files and os.path.isfile(path)

    def _own(self, path: str) -> bytearray:
        if path not in self._files:
            self._files[path] = bytearray(self._disk.read_all(path)) if self._visible_on_disk(path) else bytearray()
            self._removed.discard(path)
        return self._files[path]

    def make_dirs(self, path: str) -> None:
        if not os.path.isdir(path):
            raise FileNotFoundError(f"no store directory {path}")

    def list_dir(self, path: str) -> list[str]:
        names = {n for n in os.listdir(path) if self._visible_on_disk(os.path.join(path, n))}
        names |= {os.path.basename(p) for p in self._files if os.path.dirname(p) == path}
        return sorted(names)

    def exists(self, path: str) -> bool:
        return path in self._files or self._visible_on_disk(path)

    def size(self, path: str) -> int:
        return len(self._files[path]) if path in self._files else self._disk.size(path)

    def read_all(self, path: str) -> bytes:
        return bytes(self._files[path]) if path in self._files else self._disk.read_all(path)

    def read_at(self, path: str, offset: int, length: int) -> bytes:
        if path in self._files:
            return bytes(self._files[path][offset : offset + length])
        return self._disk.read_at(path, offset, length)

    def create(self, path: str, data: bytes) -> None:
        self._files[path] = bytearray(data)
        self._removed.discard(path)

    def append(self, path: str, data: bytes) -> None:
        self._own(path).extend(data)

    def fsync_job(self, path: str) -> Callable[[], None]:
        return lambda: None

    def fsync(self, path: str) -> None:
        pass

    def fsync_dir(self, path: str) -> None:
        pass

    def truncate(self, path: str, size: int) -> None:
        del self._own(path)[size:]

    def rename(self, source: str, target: str) -> None:
        self._files[target] = self._own(source)
        del self._files[source]
        self._removed.add(source)
        self._removed.discard(target)

    def remove(self, path: str) -> None:
        self._files.pop(path, None)
        self._removed.add(path)

    def close_file(self, path: str) -> None:
        pass

    def close(self) -> None:
        self._disk.close()
