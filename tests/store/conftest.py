"""Store makers for the contract suite: memory, file on the OS, file on FaultFS (tiny segments)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from appliance.store.api import StoreLimits, StreamStore
from appliance.store.filestore import FileStoreConfig, FileStreamStore
from appliance.store.memory import MemoryStreamStore
from appliance.testing.faultfs import FaultFS

SMALL_SEGMENT_BYTES = 2048


@dataclass
class Harness:
    name: str
    make: Callable[[StoreLimits], StreamStore]
    reopen: Callable[[StreamStore], StreamStore]
    persistent: bool


def memory_harness() -> Harness:
    return Harness("memory", lambda lim: MemoryStreamStore(lim), lambda store: store, persistent=False)


def file_harness(tmp_path: Path, *, fault_fs: bool = False, use_dictionary: bool = False) -> Harness:
    counter = itertools.count()
    fs = FaultFS() if fault_fs else None

    def make(lim: StoreLimits) -> StreamStore:
        directory = str(tmp_path / f"stream{next(counter)}")
        config = FileStoreConfig(
            directory, limits=lim, segment_bytes=SMALL_SEGMENT_BYTES, use_dictionary=use_dictionary
        )
        return FileStreamStore(config, ops=fs)

    def reopen(store: StreamStore) -> StreamStore:
        assert isinstance(store, FileStreamStore)
        store.close()
        return FileStreamStore(store.config, ops=fs)

    name = "file-faultfs" if fault_fs else "file"
    return Harness(name, make, reopen, persistent=True)


@pytest.fixture(params=["memory", "file", "file-faultfs"])
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Harness:
    if request.param == "memory":
        return memory_harness()
    return file_harness(tmp_path, fault_fs=request.param == "file-faultfs")
