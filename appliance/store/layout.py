"""In-memory view of a stream directory: its segments, what recovery found, sync jobs.

A stream directory holds `<first_seq:020d>.seg` files (zero padding: lexical order is numeric
order), `stream.zdict` when a dictionary was trained, and transient `*.tmp` files that recovery
deletes. Segment k holds the sequences in [name_k, name_{k+1}); only the last is appended to.
Earlier segments are sealed, or closed (fsynced, uncompressed) until their seal job lands.
"""

from __future__ import annotations

import os
import time
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field

import zstandard

from appliance.store import segment

DICT_NAME = "stream.zdict"


@dataclass(slots=True)
class ActiveSegment:
    path: str
    first_seq: int
    size: int
    offsets: dict[int, int] = field(default_factory=dict)  # seq -> record offset in the file
    live: int = 0
    generation: int = 0  # bumped when the file is rewritten (erase): a seal job of it is stale


@dataclass(slots=True)
class SealedSegment:
    path: str
    first_seq: int
    dict_id: int
    blocks: list[segment.BlockInfo]  # good blocks holding messages, by first_seq
    block_firsts: list[int]
    live: int = 0
    file_bytes: int = 0

    def block_for(self, seq: int) -> int | None:
        k = bisect_right(self.block_firsts, seq) - 1
        if k < 0 or seq > self.blocks[k].last_seq:
            return None
        return k


Segment = ActiveSegment | SealedSegment


def sealed_from(path: str, first_seq: int, dict_id: int, blocks: list[segment.BlockInfo]) -> SealedSegment:
    with_msgs = [b for b in blocks if b.msg_count]
    return SealedSegment(path, first_seq, dict_id, with_msgs, [b.first_seq for b in with_msgs])


def dict_for(zdict: zstandard.ZstdCompressionDict | None, dict_id: int) -> zstandard.ZstdCompressionDict | None:
    """The stream's dictionary if it is the one dict_id names (0: no dictionary needed)."""
    if not dict_id or zdict is None or zdict.dict_id() != dict_id:
        return None
    return zdict


def segment_path(directory: str, first_seq: int) -> str:
    return os.path.join(directory, segment.segment_name(first_seq))


@dataclass(frozen=True, slots=True)
class CorruptRegion:
    """Damaged bytes the store will not serve: the gap marker a repair fills.

    The sequences first_seq..last_seq are absent from the index (a gap, like deleted messages)
    but not removed: no DELETE record is written and the damaged bytes are never rewritten
    around, so recovery finds the same region again until it is repaired. A repair (a peer's
    copy of the sequences: FileStreamStore.repair, repair.py) rewrites the file atomically with
    the peer's records in place of the damaged bytes, as erase rewrites a segment; recovery then
    finds no region and the sequences are live again.
    """

    path: str
    offset: int  # -1: the bytes are gone (a missing file)
    first_seq: int  # 0 when unknown
    last_seq: int  # < first_seq: no message was lost (a removal record, a footer)
    detail: str
    length: int = 0  # damaged bytes from offset, when known

    def covers(self, seq: int) -> bool:
        return self.first_seq <= seq <= self.last_seq and self.first_seq > 0


@dataclass(slots=True)
class RecoveryReport:
    segments: int = 0
    torn_bytes: int = 0  # truncated from the tail of the last segment
    torn_segments: list[str] = field(default_factory=list)
    tmp_files_removed: int = 0
    corrupt: list[CorruptRegion] = field(default_factory=list)
    repaired: list[str] = field(default_factory=list)  # damage recovery fixed from what was intact


@dataclass(slots=True)
class SyncJob:
    """One group-commit fsync: run() may happen on another thread; then finish_sync(job)."""

    seq: int  # every message up to here is durable once run() returns
    actions: list[Callable[[], None]]
    covered: int = 0  # messages this fsync makes durable (the group commit's batch size)
    elapsed_s: float = 0.0  # how long run() took (set by run(), on the thread that ran it)

    def run(self) -> None:
        started = time.perf_counter()
        for action in self.actions:
            action()
        self.elapsed_s = time.perf_counter() - started


SEAL_TMP_SUFFIX = ".seal.tmp"  # a finished seal waiting for finish_seal(); recovery deletes *.tmp


@dataclass(slots=True)
class SealJob:
    """Compress one closed segment and write the result beside it; run() may happen on any thread.

    run() is CPU (zstd releases the GIL) plus the write and fsync of `tmp_path`, a file no other
    code touches; finish_seal() on the owner's thread renames it over the segment (or removes it
    when the segment changed meanwhile). A crash anywhere leaves the old segment or the new one.
    """

    path: str
    first_seq: int
    generation: int
    encode: Callable[[], bytes]
    dict_id: int
    write: Callable[[str, bytes], None]  # create + fsync + close of a file (fileops.write_file)
    raw_bytes: int = 0
    result: bytes | None = None

    @property
    def tmp_path(self) -> str:
        return self.path + SEAL_TMP_SUFFIX

    def run(self) -> None:
        result = self.encode()
        self.write(self.tmp_path, result)
        self.result = result
