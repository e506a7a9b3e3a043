"""Recovery on open: replay every segment of a stream directory, in order, into a fresh index.

The per-subject index is rebuilt here (from records, without reading payloads into objects).
A torn tail of the last segment is truncated and counted; a damaged record or block anywhere
else becomes a CorruptRegion (file, offset, sequences) that the store never serves. Removal
records (DELETE, FIRST) are applied as they come, so the result is the state at the crash.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from bisect import bisect_right

import zstandard

from appliance import limits
from appliance.errors import CorruptData
from appliance.store import records, segment, speedups
from appliance.store.fileops import FileOps, write_atomic
from appliance.store.index import StreamIndex
from appliance.store.layout import (
    DICT_NAME,
    ActiveSegment,
    CorruptRegion,
    RecoveryReport,
    Segment,
    dict_for,
    sealed_from,
)

logger = logging.getLogger(__name__)


class Recovery:
    """One replay of a directory: afterwards `segments`, `names`, `zdict`, `report` describe it."""

    def __init__(self, ops: FileOps, directory: str, index: StreamIndex) -> None:
        self.ops = ops
        self.directory = directory
        self.index = index
        self.segments: list[Segment] = []
        self.names: list[int] = []
        self.zdict: zstandard.ZstdCompressionDict | None = None
        self.report = RecoveryReport()
        self._gaps: list[tuple[int, int, str, str]] = []  # (first, last, segment, next segment)
        self._removed: list[tuple[int, int]] = []  # every DELETE range seen, merged at the end
        self._removed_firsts: list[int] = []
        self._first_floor = 0  # the highest FIRST record: everything below it was removed

    def run(self) -> Recovery:
        ops = self.ops
        ops.make_dirs(self.directory)
        names = ops.list_dir(self.directory)
        for name in names:
            if name.endswith(".tmp"):
                ops.remove(os.path.join(self.directory, name))
                self.report.tmp_files_removed += 1
        if self.report.tmp_files_removed:
            ops.fsync_dir(self.directory)
        if DICT_NAME in names:
            self.zdict = zstandard.ZstdCompressionDict(ops.read_all(os.path.join(self.directory, DICT_NAME)))
        seg_names = sorted(n for n in names if n.endswith(".seg"))
        for i, name in enumerate(seg_names):
            is_last = i == len(seg_names) - 1
            next_first = 0 if is_last else segment.first_of(seg_names[i + 1])
            self._recover_segment(os.path.join(self.directory, name), is_last=is_last, next_first=next_first)
            if next_first:
                self._gaps.append((self.index.last_seq + 1, next_first - 1, name, seg_names[i + 1]))
        self._removed = _merged(self._removed)
        self._removed_firsts = [lo for lo, _hi in self._removed]
        self._unexplained_gaps()
        self._trim_explained()
        self.report.segments = len(self.segments)
        return self

    def _recover_segment(self, path: str, *, is_last: bool, next_first: int) -> None:
        data = self.ops.read_all(path)
        try:
            header = segment.decode_header(data, path)
        except CorruptData as exc:
            if is_last and (len(data) < segment.HEADER_BYTES or unwritten_tail(data, 0)):
                logger.warning("store: removing torn new segment %s (%d bytes)", path, len(data))
                self.ops.remove(path)
                self.ops.fsync_dir(self.directory)
                self.report.torn_bytes += len(data)
                self.report.torn_segments.append(path)
                return
            rebuilt = self._rebuilt_header(path, data)
            if rebuilt is None:
                last = next_first - 1 if next_first else 0
                first = self.index.last_seq + 1
                if last >= first:
                    self.index.advance_last(last)
                self._corrupt(path, 0, first if last >= first else 0, last if last >= first else 0, str(exc), len(data))
                return
            logger.warning("store: rebuilt the damaged header of %s (%s)", path, exc)
            self.report.repaired.append(f"{path}: segment header rebuilt from its name and contents")
            data, header = rebuilt
        if header.sealed:
            self._recover_sealed(path, data, header)
        else:
            self._recover_active(path, data, header.first_seq, is_last=is_last, next_first=next_first)

    def _rebuilt_header(self, path: str, data: bytes) -> tuple[bytes, segment.FileHeader] | None:
        """A segment whose 32-byte header is damaged but whose contents are whole: the header is
        rewritten from the file name (its first sequence) and what follows it (records or blocks
        and a footer). None when the contents do not prove what the segment was."""
        first = segment.first_of(os.path.basename(path))
        if not first or len(data) < segment.HEADER_BYTES:
            return None
        body = data[segment.HEADER_BYTES :]
        candidates: list[bytes] = []
        if data.endswith(segment.TRAILER_MAGIC):
            ids = [0] + ([self.zdict.dict_id()] if self.zdict is not None else [])
            candidates += [segment.encode_sealed_header(first, dict_id) for dict_id in ids]
        elif unwritten_tail(data, segment.HEADER_BYTES):  # nothing written after the header yet
            candidates.append(segment.encode_active_header(first))
        else:
            frames, stop = speedups.scan_frames(data, segment.HEADER_BYTES)
            if frames and frames[0][3] >= first and (stop == len(data) or unwritten_tail(data, stop)):
                candidates.append(segment.encode_active_header(first))
        for head in candidates:
            repaired = head + body
            header = segment.decode_header(repaired, path)
            if header.sealed and segment.verify_sealed(repaired, zdict=dict_for(self.zdict, header.dict_id), path=path):
                continue
            write_atomic(self.ops, path, repaired)
            return repaired, header
        return None

    def _recover_active(self, path: str, data: bytes, first_seq: int, *, is_last: bool, next_first: int) -> None:
        """Replay the record chain; a damaged stretch is skipped to the next valid record (resync).

        Only a physically last, incomplete write of the last segment (beyond its last fsync) is
        truncated as torn; damage anywhere else becomes a CorruptRegion over the sequences it
        hid, and the records after it are kept.
        """
        seg = ActiveSegment(path, first_seq, len(data))
        self._add(seg)
        offset = segment.HEADER_BYTES
        while offset < len(data):
            frames, stop = speedups.replay_frames(data, offset, True)
            self._replay(frames, data, seg)
            if stop >= len(data):
                break
            if unwritten_tail(data, stop):  # preallocated space never written (fileops.py): not torn
                self._trim_unwritten(seg, stop)
                break
            detail = _bad_record_detail(data, stop)
            resume = records.resync(data, stop, self.index.last_seq + 1)
            if resume is None and is_last and incomplete_write(data, stop):
                self._truncate_torn(seg, stop, len(data) - stop)
                break
            first = self.index.last_seq + 1
            if resume is not None:
                last = records.decode_at(data, resume).seq - 1
                last = last if records.decode_at(data, resume).kind == records.Kind.MSG else first - 1
            elif not is_last:
                last = next_first - 1  # nothing valid follows: the rest of this segment is lost
            else:
                last = _plausible_seq(data, stop, first)  # a whole record, damaged: never truncated
            if last >= first:
                self.index.advance_last(last)
            end = len(data) if resume is None else resume
            self._corrupt(path, stop, first, max(last, first - 1), detail, end - stop)
            if resume is None:
                break
            offset = resume

    def _truncate_torn(self, seg: ActiveSegment, offset: int, torn: int) -> None:
        logger.warning("store: truncating torn tail of %s at %d (%d bytes)", seg.path, offset, torn)
        self.ops.truncate(seg.path, offset)
        self.ops.fsync(seg.path)
        seg.size = offset
        self.report.torn_bytes += torn
        self.report.torn_segments.append(seg.path)

    def _trim_unwritten(self, seg: ActiveSegment, offset: int) -> None:
        logger.debug("store: trimming the unwritten preallocated tail of %s at %d", seg.path, offset)
        self.ops.truncate(seg.path, offset)
        self.ops.fsync(seg.path)
        seg.size = offset

    def _recover_sealed(self, path: str, data: bytes, header: segment.FileHeader) -> None:
        footer_damage: CorruptData | None = None
        inner: list[CorruptData] = []  # damaged block headers before the last whole block
        try:
            blocks, _ = segment.read_footer(data, path)
        except CorruptData as exc:
            footer_damage = exc
            blocks, problems = segment.walk_blocks(data, path, segment.trailer_index_offset(data) or -1)
            end = blocks[-1].data_offset + blocks[-1].comp_len if blocks else segment.HEADER_BYTES
            inner = [p for p in problems if p.offset < end]  # later ones are the footer's own bytes
            for problem in inner:
                self._corrupt(path, problem.offset, 0, 0, str(problem))
        zdict = dict_for(self.zdict, header.dict_id)
        good: list[segment.BlockInfo] = []
        seg = sealed_from(path, header.first_seq, header.dict_id, [])
        seg.file_bytes = len(data)
        self._add(seg)
        damaged = 0
        for info in blocks:
            try:
                if header.dict_id and zdict is None:
                    raise CorruptData("segment needs a missing dictionary", path=path, offset=info.offset)
                raw = segment.decode_block(data, info, zdict=zdict, path=path)
                frames, stop = speedups.replay_frames(raw, 0, False)
                if stop != len(raw):
                    raise CorruptData("damaged record inside block", path=path, offset=info.offset)
            except CorruptData as exc:
                damaged += 1
                first = max(info.first_seq, self.index.last_seq + 1)
                self._corrupt(path, info.offset, first, info.last_seq, str(exc), segment.BLOCK_HEADER.size + info.comp_len)
                self.index.advance_last(info.last_seq)
                continue
            good.append(info)
            self._replay(frames, raw, seg)
        if footer_damage is not None:
            self._footer_damaged(path, data, blocks, footer_damage, repairable=not damaged and not inner)
        complete = sealed_from(path, header.first_seq, header.dict_id, good)
        seg.blocks, seg.block_firsts = complete.blocks, complete.block_firsts

    def _footer_damaged(
        self, path: str, data: bytes, blocks: list[segment.BlockInfo], damage: CorruptData, *, repairable: bool
    ) -> None:
        """A lost footer is rebuilt from the block headers (each is checksummed) when every block
        is whole; otherwise (a cut file, a damaged block) the damage stays reported."""
        end = blocks[-1].data_offset + blocks[-1].comp_len if blocks else segment.HEADER_BYTES
        rest = data[end:]
        if repairable and rest:  # footer bytes follow the last block: no block was cut off
            repaired = segment.with_footer(data[:end], blocks)
            write_atomic(self.ops, path, repaired)
            logger.warning("store: rebuilt the damaged footer of %s from its %d block headers (%s)", path, len(blocks), damage)
            self.report.repaired.append(f"{path}: footer rebuilt from {len(blocks)} block headers")
            return
        self._corrupt(path, damage.offset, 0, 0, str(damage), len(data) - damage.offset)

    def _replay(self, frames: list[speedups.Replayed], raw: bytes, seg: Segment) -> None:
        """Apply recovered records in order; runs of consecutive messages go to the index at once."""
        index = self.index
        offsets = seg.offsets if isinstance(seg, ActiveSegment) else None
        names: list[str] = []
        sizes: list[int] = []
        times: list[int] = []
        run_first = 0

        def flush() -> None:
            if names:
                index.add_many(run_first, names.copy(), sizes.copy(), times.copy())
                seg.live += len(names)
                names.clear()
                sizes.clear()
                times.clear()

        for offset, _end, kind, seq, ts, subject, size in frames:
            if kind == records.Kind.MSG:
                assert subject is not None
                if names and seq != run_first + len(names):
                    flush()
                if not names:
                    if seq <= index.last_seq:
                        logger.warning("store: ignoring out-of-order record seq %d in %s", seq, seg.path)
                        continue
                    run_first = seq
                names.append(subject)
                sizes.append(size)
                times.append(ts)
                if offsets is not None:
                    offsets[seq] = offset
                continue
            flush()
            record = records.decode_at(raw, offset, check=False)
            if kind == records.Kind.DELETE:
                for first, last in record.ranges():
                    self._count_removed(self._live_in(first, last))
                    self._removed.append((first, last))
                index.advance_last(record.seq)
            else:
                self._count_removed(index.skip_to(record.seq))
                self._first_floor = max(self._first_floor, record.seq)
            index.last_ts_ns = record.timestamp_ns
        flush()

    def _corrupt(self, path: str, offset: int, first_seq: int, last_seq: int, detail: str, length: int = 0) -> None:
        detail = detail.removeprefix(f"{path}:{offset}: ")
        self.report.corrupt.append(CorruptRegion(path, offset, first_seq, last_seq, detail, length))

    def _unexplained_gaps(self) -> None:
        """Sequences between two segments that no removal record accounts for: a missing segment.

        A segment is named after the first sequence it may hold, so every sequence below the
        next segment's name was written to this one or an earlier one. Sealing drops only
        messages a DELETE or FIRST record removed, and only the oldest segment is ever removed:
        a sequence in such a gap that no removal covers was lost with its file.
        """
        for first, last, name, next_name in self._gaps:
            lost = [seq for seq in range(first, last + 1) if not self._explained(seq)]
            if not lost:
                continue
            ranges = records.to_ranges(lost)
            for lo, hi in ranges:
                detail = f"missing between {name} and {next_name} (a segment file is gone?)"
                self._corrupt(os.path.join(self.directory, name), -1, lo, hi, detail)

    def _trim_explained(self) -> None:
        """A damaged record whose message a later DELETE or FIRST record removed lost nothing:
        regions keep only the sequences no removal accounts for (the damage itself stays)."""
        trimmed: list[CorruptRegion] = []
        for region in self.report.corrupt:
            if not region.last_seq >= region.first_seq > 0:
                trimmed.append(region)
                continue
            kept = records.to_ranges([s for s in range(region.first_seq, region.last_seq + 1) if not self._explained(s)])
            if not kept:
                trimmed.append(dataclasses.replace(region, first_seq=0, last_seq=0))
            trimmed += [dataclasses.replace(region, first_seq=lo, last_seq=hi) for lo, hi in kept]
        self.report.corrupt = trimmed

    def _explained(self, seq: int) -> bool:
        if seq < self._first_floor:
            return True
        k = bisect_right(self._removed_firsts, seq) - 1
        return k >= 0 and seq <= self._removed[k][1]

    def _live_in(self, first: int, last: int) -> list[int]:
        found: list[int] = []
        for seq in self.index.live_seqs(first):
            if seq > last:
                break
            found.append(seq)
        for seq in found:
            self.index.remove(seq)
        return found

    def _add(self, seg: Segment) -> None:
        assert not self.names or seg.first_seq > self.names[-1]
        self.segments.append(seg)
        self.names.append(seg.first_seq)

    def _count_removed(self, removed: list[int]) -> None:
        for seq in removed:
            self.segments[bisect_right(self.names, seq) - 1].live -= 1


def unwritten_tail(data: bytes, offset: int) -> bool:
    """Only zero bytes from offset to the end: space a crash left preallocated but never written
    (an all-zero frame is never a valid record, so no record can hide there)."""
    return data.count(0, offset) == len(data) - offset


def _bad_record_detail(data: bytes, offset: int) -> str:
    try:
        records.decode_at(data, offset)
    except records.BadRecord as exc:
        return str(exc)
    return f"unreadable record at {offset}"


def incomplete_write(data: bytes, offset: int) -> bool:
    """The bytes from offset look like a write that stopped part way (a torn tail), not damage.

    A torn append leaves a short header, a record whose length runs past the end of the file, or
    (over preallocated, zero-filled space) a record whose last bytes and everything after it are
    zero. A whole record with a bad checksum is damage: its bytes are kept and reported.
    """
    if offset + records.HEAD_BYTES > len(data):
        return True
    length = int.from_bytes(data[offset : offset + 4], "little")
    end = offset + records.FRAME.size + length
    if length > limits.STORE_RECORD_BYTES_MAX or end > len(data):
        return True
    return data[end - 1] == 0 and unwritten_tail(data, end)


def _plausible_seq(data: bytes, offset: int, first: int) -> int:
    """The sequence a whole damaged last record held, if its unverified header says it is the next
    message (then it is counted lost and never reused); else first - 1 (no sequence)."""
    kind = data[offset + records.FRAME.size]
    seq = int.from_bytes(data[offset + records.FRAME.size + 1 : offset + records.FRAME.size + 9], "little")
    return seq if kind == records.Kind.MSG and seq == first else first - 1


def _merged(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged
