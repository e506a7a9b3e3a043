"""Offline reading of stream directories (no server, no Spark here): plan which blocks a query
needs from the segment footers, then decode them with their checksums verified.

A segment is read with the store's own format code (appliance/store/segment.py, records.py,
speedups.py): sealed segments through their footer index (first/last seq and min/max time per
block, so a seq or time range skips blocks without reading them) and decode_block (header and
data CRCs, length); active segments record by record (each record's CRC). A damaged block or
record raises CorruptData naming file:offset, or is skipped and counted when asked.

Removals (DELETE and FIRST records, written after the message they remove) are applied from the
blocks a read covers and every later block and active segment, so no removed message is returned
while blocks entirely before the range stay unread.

The files are read once each (a copy of a live store is safe: an active segment's torn or not yet
written tail is where reading stops; a sealed file is immutable once renamed into place).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import zstandard

from appliance.errors import CorruptData
from appliance.spark.block_columns import MalformedBlock, block_layout, columns_of
from appliance.store import records, segment
from appliance.store.layout import DICT_NAME
from appliance.store.recovery import unwritten_tail

SEQ_MAX = (1 << 63) - 1
TIME_MIN_NS = -(1 << 63)
TIME_MAX_NS = (1 << 63) - 1


@dataclass(frozen=True, slots=True)
class StreamDir:
    name: str
    path: str  # the directory holding the .seg files


@dataclass(frozen=True, slots=True)
class Piece:
    """One unit of reading: a sealed block, or a whole active segment (block_offset -1)."""

    stream: str
    path: str
    block_offset: int
    first_seq: int
    last_seq: int
    ts_min: int
    ts_max: int
    msg_count: int


@dataclass(slots=True)
class StorePlan:
    pieces: list[Piece]
    removed_below: dict[str, int]  # stream -> every seq below is removed (FIRST records)
    removed: dict[str, set[int]]  # stream -> removed seqs (DELETE records)
    corrupt: list[CorruptData] = field(default_factory=list)


def stream_dirs(path: str) -> list[StreamDir]:
    """The stream directories at or under `path` (a store dir, an account, a stream or its msgs/)."""
    found = []
    for root, dirs, files in os.walk(path):
        dirs.sort()
        if any(f.endswith(".seg") for f in files):
            base = os.path.basename(os.path.normpath(root))
            name = os.path.basename(os.path.dirname(os.path.normpath(root))) if base == "msgs" else base
            found.append(StreamDir(name, root))
    if not found and not os.path.isdir(path):
        raise FileNotFoundError(f"jetstream-store: no such directory {path!r}")
    return found


def segment_paths(directory: str) -> list[str]:
    return [os.path.join(directory, n) for n in sorted(os.listdir(directory)) if n.endswith(".seg")]


def dictionary(directory: str) -> zstandard.ZstdCompressionDict | None:
    path = os.path.join(directory, DICT_NAME)
    if not os.path.isfile(path):
        return None
    with open(path, "rb") as f:
        return zstandard.ZstdCompressionDict(f.read())


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def plan_stream(
    stream: StreamDir, seq_lo: int, seq_hi: int, ts_lo: int, ts_hi: int, *, skip_corrupt: bool, removals: bool = True
) -> StorePlan:
    """The pieces of `stream` that may hold messages in the ranges, and the removals that apply."""
    result = StorePlan([], {}, {})
    zdict = dictionary(stream.path)
    all_pieces: list[Piece] = []
    for path in segment_paths(stream.path):
        data = _read(path)
        try:
            header = segment.decode_header(data, path)
            if header.sealed:
                blocks, _ = segment.read_footer(data, path)
                all_pieces.extend(
                    Piece(stream.name, path, b.offset, b.first_seq, b.last_seq, b.ts_min, b.ts_max, b.msg_count)
                    for b in blocks
                )
            else:
                all_pieces.append(Piece(stream.name, path, -1, header.first_seq, SEQ_MAX, TIME_MIN_NS, TIME_MAX_NS, -1))
        except CorruptData as exc:
            if not skip_corrupt:
                raise
            result.corrupt.append(exc)
    first_wanted = None
    for k, piece in enumerate(all_pieces):
        if piece.msg_count == 0:
            continue  # only removal records: nothing to return
        if piece.last_seq < seq_lo or piece.first_seq > seq_hi or piece.ts_max < ts_lo or piece.ts_min > ts_hi:
            continue
        result.pieces.append(piece)
        if first_wanted is None:
            first_wanted = k
    if removals and first_wanted is not None:
        for piece in all_pieces[first_wanted:]:
            try:
                _collect_removals(piece, zdict, stream.name, result)
            except CorruptData as exc:
                if not skip_corrupt:
                    raise
                result.corrupt.append(exc)
    return result


def piece_records(piece: Piece, zdict: zstandard.ZstdCompressionDict | None, *, frames: bool = True) -> bytes:
    """The raw records of a piece, checksums verified (an active segment: up to its last whole
    record). frames=False leaves the framing check of a sealed block's records to the caller."""
    if piece.block_offset < 0:
        data = _read(piece.path)
        stop = columns_of(data, segment.HEADER_BYTES, check=True).stop
        if stop != len(data) and not unwritten_tail(data, stop) and records.resync(data, stop) is not None:
            raise CorruptData("damaged record in active segment", path=piece.path, offset=stop)
        return data[segment.HEADER_BYTES : stop]
    with open(piece.path, "rb") as f:
        f.seek(piece.block_offset)
        head = f.read(segment.BLOCK_HEADER.size)
        fields = segment.BLOCK_HEADER.unpack_from(head) if len(head) == segment.BLOCK_HEADER.size else None
        comp_len = fields[7] if fields else 0
        body = f.read(comp_len)
    info = segment.BlockInfo(
        segment.HEADER_BYTES, piece.first_seq, piece.last_seq, piece.ts_min, piece.ts_max, piece.msg_count, comp_len
    )
    # decode_block checks the header CRC, that it agrees with the footer, the data CRC and lengths;
    # it reads from a buffer holding just this block, placed where `info` says
    buffer = bytes(segment.HEADER_BYTES) + head + body
    try:
        raw = segment.decode_block(buffer, info, zdict=zdict, path=piece.path)
    except CorruptData as exc:
        raise CorruptData(str(exc).split(": ", 1)[-1], path=piece.path, offset=piece.block_offset) from None
    if frames:
        if columns_of(raw).stop != len(raw):
            raise CorruptData("damaged record inside block", path=piece.path, offset=piece.block_offset)
    return raw


def _collect_removals(piece: Piece, zdict: zstandard.ZstdCompressionDict | None, stream: str, plan: StorePlan) -> None:
    raw = piece_records(piece, zdict, frames=False)
    try:
        others = block_layout(raw).others  # checks the framing of every record, finds the non-MSG ones
    except MalformedBlock as exc:
        raise CorruptData(f"damaged record inside block: {exc}", path=piece.path, offset=piece.block_offset) from None
    for offset in others:
        record = records.decode_at(raw, offset, check=False)
        if record.kind == records.Kind.DELETE:
            target = plan.removed.setdefault(stream, set())
            for first, last in record.ranges():
                target.update(range(first, last + 1))
        elif record.kind == records.Kind.FIRST:
            plan.removed_below[stream] = max(plan.removed_below.get(stream, 0), record.seq)
        # any other kind of record removes nothing
