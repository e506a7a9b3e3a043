"""Offline inspection of a stream directory: summary, per-segment table, verify, dump.

Never modifies the directory: the store is replayed over OverlayOps (writes stay in memory).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

import zstandard

from appliance.errors import CorruptData
from appliance.store import records, segment
from appliance.store.api import StoredMsg, StreamState
from appliance.store.filestore import FileStoreConfig, FileStreamStore
from appliance.store.layout import DICT_NAME, RecoveryReport
from appliance.store.overlay import OverlayOps
from appliance.store.recovery import incomplete_write


@dataclass(frozen=True, slots=True)
class SegmentRow:
    name: str
    kind: str  # "active" | "sealed" | "damaged"
    first_seq: int
    last_seq: int
    ts_min: int
    ts_max: int
    msgs: int  # message records in the file (live or not)
    blocks: int
    raw_bytes: int
    stored_bytes: int

    @property
    def ratio(self) -> float:
        return self.raw_bytes / self.stored_bytes if self.stored_bytes else 0.0


@dataclass(frozen=True, slots=True)
class Inspection:
    directory: str
    state: StreamState
    recovery: RecoveryReport
    segments: list[SegmentRow]
    dictionary_bytes: int


def _dictionary(directory: str) -> zstandard.ZstdCompressionDict | None:
    path = os.path.join(directory, DICT_NAME)
    if not os.path.isfile(path):
        return None
    with open(path, "rb") as f:
        return zstandard.ZstdCompressionDict(f.read())


def _segment_paths(directory: str) -> list[str]:
    return [os.path.join(directory, n) for n in sorted(os.listdir(directory)) if n.endswith(".seg")]


def segment_row(path: str, data: bytes) -> SegmentRow:
    name = os.path.basename(path)
    try:
        header = segment.decode_header(data, path)
    except CorruptData:
        return SegmentRow(name, "damaged", 0, 0, 0, 0, 0, 0, 0, len(data))
    if not header.sealed:
        frames = _intact_frames(data)
        msgs = [f for f in frames if f[2] == records.Kind.MSG]
        times = [f[4] for f in msgs]
        return SegmentRow(
            name, "active", msgs[0][3] if msgs else 0, msgs[-1][3] if msgs else 0,
            min(times, default=0), max(times, default=0), len(msgs), 0, len(data), len(data),
        )
    try:
        blocks, _ = segment.read_footer(data, path)
    except CorruptData:
        blocks, _ = segment.walk_blocks(data, path)
    with_msgs = [b for b in blocks if b.msg_count]
    raw_bytes = sum(segment.BLOCK_HEADER.unpack_from(data, b.offset)[6] for b in blocks)
    return SegmentRow(
        name, "sealed", with_msgs[0].first_seq if with_msgs else 0, with_msgs[-1].last_seq if with_msgs else 0,
        min((b.ts_min for b in with_msgs), default=0), max((b.ts_max for b in with_msgs), default=0),
        sum(b.msg_count for b in blocks), len(blocks), raw_bytes, len(data),
    )


def _intact_frames(data: bytes) -> list[records.Frame]:
    """Every valid record of an active segment, including those after a damaged stretch."""
    frames: list[records.Frame] = []
    offset = segment.HEADER_BYTES
    for _begin, _end, resume in records.damaged_spans(data, offset):
        frames += records.scan_frames(data, offset)[0]
        if resume is None:
            return frames
        offset = resume
    return frames + records.scan_frames(data, offset)[0]


def inspect(directory: str) -> Inspection:
    store = FileStreamStore(FileStoreConfig(directory, sync_always=False), ops=OverlayOps())
    try:
        rows = []
        for path in _segment_paths(directory):
            with open(path, "rb") as f:
                rows.append(segment_row(path, f.read()))
        zdict_path = os.path.join(directory, DICT_NAME)
        dict_bytes = os.path.getsize(zdict_path) if os.path.isfile(zdict_path) else 0
        return Inspection(directory, store.state(), store.recovery, rows, dict_bytes)
    finally:
        store.close()


def verify(directory: str) -> list[CorruptData]:
    """Every checksum of every segment: sealed blocks, footers, each active record; and segment
    files missing between others (what recovery would report lost)."""
    problems: list[CorruptData] = []
    zdict = _dictionary(directory)
    paths = _segment_paths(directory)
    for i, path in enumerate(paths):
        with open(path, "rb") as f:
            data = f.read()
        try:
            header = segment.decode_header(data, path)
        except CorruptData as exc:
            problems.append(exc)
            continue
        if header.sealed:
            problems.extend(segment.verify_sealed(data, zdict=zdict if header.dict_id else None, path=path))
            continue
        problems.extend(_active_problems(path, data, is_last=i == len(paths) - 1))
    problems.extend(_missing(directory))
    return problems


def _active_problems(path: str, data: bytes, *, is_last: bool) -> list[CorruptData]:
    """Damaged stretches of an active segment, each resynced to the next valid record: only an
    incomplete last write is a torn tail; anything else keeps the records after it."""
    found: list[CorruptData] = []
    for begin, end, resume in records.damaged_spans(data, segment.HEADER_BYTES):
        if resume is None and is_last and incomplete_write(data, begin):
            text = f"torn tail (recovery truncates it): {end - begin} bytes"
        elif resume is None:
            text = f"damaged records: {end - begin} bytes to the end of the segment (kept, reported lost)"
        else:
            text = f"damaged records: {end - begin} bytes; the records after offset {resume} are intact"
        found.append(CorruptData(text, path=path, offset=begin))
    return found


def _missing(directory: str) -> list[CorruptData]:
    """Sequence ranges recovery finds missing between segments (a segment file gone)."""
    store = FileStreamStore(FileStoreConfig(directory, sync_always=False), ops=OverlayOps())
    try:
        return [
            CorruptData(f"{directory}: sequences {r.first_seq}..{r.last_seq} {r.detail}")
            for r in store.recovery.corrupt
            if r.offset < 0
        ]
    finally:
        store.close()


@dataclass(frozen=True, slots=True)
class StreamDir:
    """One stream's message directory found under a path a user gave."""

    label: str  # "ACCOUNT > STREAM" when the layout says so, else the directory
    directory: str


def find_streams(path: str) -> list[StreamDir]:
    """The stream directories at or below path: a msgs dir, a stream dir, an account, a store
    dir (the -sd directory or its jetstream/ child). Empty when there is none."""
    path = os.path.abspath(path)
    if _holds_segments(path):
        return [StreamDir(_label(path), path)]
    found: list[StreamDir] = []
    for root, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if d != "_raft")  # RAFT logs hold no stream data
        if any(f.endswith(".seg") for f in files):
            found.append(StreamDir(_label(root), root))
            dirs[:] = []
    return found


def _holds_segments(path: str) -> bool:
    return os.path.isdir(path) and any(n.endswith(".seg") for n in os.listdir(path))


def _label(msgs_dir: str) -> str:
    """`ACCOUNT > STREAM` for <store>/jetstream/<account>/streams/<stream>/msgs."""
    parts = msgs_dir.rstrip(os.sep).split(os.sep)
    if len(parts) >= 4 and parts[-1] == "msgs" and parts[-3] == "streams":
        return f"{parts[-4]} > {parts[-2]}"
    return msgs_dir


def dump(directory: str, start_seq: int = 1, filter_subject: str = ">") -> Iterator[StoredMsg]:
    store = FileStreamStore(FileStoreConfig(directory, sync_always=False), ops=OverlayOps())
    try:
        yield from store.scan(start_seq, filter_subject)
    finally:
        store.close()
