"""Repair of damaged records from a good copy: a peer's messages go back at their own sequences.

A damaged record (a CorruptRegion, layout.py) is a gap the store never serves. A replicated
stream fetches the lost sequences from a peer that holds them intact and hands them here, with
the sequences the peer no longer holds (deleted or purged there since: `gone`). The segment that
held the damage is rebuilt with the good records in place of the damaged bytes and replaces the
file atomically (as erase does); recovery of the rebuilt file then finds no region.

A damaged stretch is replaced only when every sequence it lost is supplied (a message or gone),
never in part: a stretch replaced by fewer records than it hid would make the missing sequences
look deleted. Pure: bytes in, bytes out (FileStreamStore.repair does the file work).

    active-format segment: the record chain is walked as recovery walks it (resync past damaged
        bytes); each damaged stretch becomes the supplied records whose sequences lie between
        the good message before it and the good message after it, plus one DELETE record for
        the gone ones (so a later recovery knows them removed, not lost);
    sealed segment: each block that fails its checksums becomes the supplied records of its
        sequence range (plus a DELETE for the gone ones); the segment is encoded again.
"""

from __future__ import annotations

from collections.abc import Mapping, Set

import zstandard

from appliance.errors import CorruptData
from appliance.store import records, segment
from appliance.store.api import StoredMsg


def _replacement(seqs: list[int], fill: Mapping[int, StoredMsg], gone: Set[int], last_ts: int) -> bytes:
    """The records standing for `seqs`: supplied messages in order, then a DELETE of the gone."""
    parts: list[bytes] = []
    for seq in seqs:
        msg = fill.get(seq)
        if msg is not None:
            parts.append(records.encode_msg(seq, msg.subject.encode(), msg.headers, msg.payload, msg.timestamp_ns))
            last_ts = max(last_ts, msg.timestamp_ns)
    removed = [seq for seq in seqs if seq in gone and seq not in fill]
    if removed:
        parts.append(records.encode_delete(records.to_ranges(removed), last_ts))
    return b"".join(parts)


def _covered(seqs: list[int], fill: Mapping[int, StoredMsg], gone: Set[int]) -> bool:
    return bool(seqs) and all(seq in fill or seq in gone for seq in seqs)


def repair_active(
    raw: bytes, lost: Set[int], fill: Mapping[int, StoredMsg], gone: Set[int], *, next_first: int = 0
) -> tuple[bytes, list[int]] | None:
    """The active-format segment `raw` with each fully supplied damaged stretch replaced, and
    the sequences restored (messages and gone); None when no stretch could be replaced.

    `lost` is every sequence the store holds lost (the stretch between two good messages hid
    the lost ones in that interval); `next_first` the next segment's first sequence (0: none),
    which bounds a stretch that runs to the end of the file.
    """
    size = len(raw)
    pieces: list[bytes] = [raw[: segment.HEADER_BYTES]]
    restored: list[int] = []
    offset = segment.HEADER_BYTES
    last_msg = segment.decode_header(raw).first_seq - 1
    last_ts = 0
    while offset < size:
        frames, stop = records.scan_frames(raw, offset)
        for _start, _end, kind, seq, ts in frames:
            if kind == records.Kind.MSG:
                last_msg = seq
            last_ts = ts if ts else last_ts
        pieces.append(raw[offset:stop])
        if stop >= size or raw.count(0, stop) == size - stop:
            break  # the end, or preallocated space never written (kept out: recovery trims it)
        resume = records.resync(raw, stop, last_msg + 1)
        end = size if resume is None else resume
        bound = next_first if next_first else None
        clear = True
        if resume is not None:  # the next good message after the stretch bounds what it hid
            after, until = records.scan_frames(raw, resume)
            following = [f[3] for f in after if f[2] == records.Kind.MSG]
            bound = following[0] if following else bound
            # another damaged stretch before any good message: where one ends is unknown
            clear = bool(following) or until >= size or raw.count(0, until) == size - until
        hidden = sorted(seq for seq in lost if seq > last_msg and (bound is None or seq < bound))
        if clear and _covered(hidden, fill, gone):
            pieces.append(_replacement(hidden, fill, gone, last_ts))
            restored += hidden
        else:
            pieces.append(raw[stop:end])
        offset = end
    if not restored:
        return None
    return b"".join(pieces), restored


def repair_sealed(
    data: bytes, lost: Set[int], fill: Mapping[int, StoredMsg], gone: Set[int], *,
    zdict: zstandard.ZstdCompressionDict | None, block_raw_bytes: int, level: int | None, path: str = "",
) -> tuple[bytes, list[int]] | None:
    """The sealed segment `data` encoded again with each fully supplied damaged block replaced by
    the supplied records of its range; None when nothing could be replaced (or the footer, which
    names the blocks, is itself damaged)."""
    header = segment.decode_header(data, path)
    blocks, _ = segment.read_footer(data, path)
    frames: list[records.Frame] = []
    chunks: list[bytes] = []
    base = 0
    restored: list[int] = []
    last_ts = 0
    for info in blocks:
        try:
            raw = segment.decode_block(data, info, zdict=zdict, path=path)
            found, stop = records.scan_frames(raw)
            if stop != len(raw):
                raise CorruptData("damaged record inside block", path=path, offset=info.offset)
        except CorruptData:
            hidden = sorted(seq for seq in lost if info.first_seq <= seq <= info.last_seq)
            if not _covered(hidden, fill, gone):
                return None
            raw = _replacement(hidden, fill, gone, last_ts)
            found, _ = records.scan_frames(raw)
            restored += hidden
        for start, end, kind, seq, ts in found:
            chunks.append(raw[start:end])
            frames.append((base, base + end - start, kind, seq, ts))
            base += end - start
            last_ts = ts if ts else last_ts
    if not restored:
        return None
    new = segment.encode_sealed(header.first_seq, frames, b"".join(chunks), zdict=zdict,
                                block_raw_bytes=block_raw_bytes, level=level)
    return new, restored


def missing_segment(first_seq: int, seqs: list[int], fill: Mapping[int, StoredMsg], gone: Set[int]) -> bytes | None:
    """A whole active-format segment standing for a lost segment file (its sequences from
    first_seq on), when every lost sequence is supplied; None otherwise."""
    if not _covered(seqs, fill, gone):
        return None
    return segment.encode_active_header(first_seq) + _replacement(seqs, fill, gone, 0)
