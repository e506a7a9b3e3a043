"""Recovery on open: replay every segment of a stream directory, in order, into a fresh index.

The per-subject index is rebuilt here (from records, without reading payloads into objects).
A torn tail of the last segment is truncated and counted; a damaged record or block anywhere
else becomes a CorruptRegion (file, offset, sequences) that the store never serves. Removal
records (DELETE, FIRST) are applied as they come, so the result is the state at the crash.
"""

from __future__ import annotations

import logging
import os
from bisect import bisect_right

import zstandard

from appliance.errors import CorruptData
from appliance.store import records, segment, speedups
from appliance.store.fileops import FileOps
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
            self._recover_segment(os.path.join(self.directory, name), is_last=i == len(seg_names) - 1)
        self.report.segments = len(self.segments)
        return self

    def _recover_segment(self, path: str, *, is_last: bool) -> None:
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
            self._corrupt(path, 0, 0, 0, str(exc))
            return
        if header.sealed:
            self._recover_sealed(path, data, header)
        else:
            self._recover_active(path, data, header.first_seq, is_last=is_last)

    def _recover_active(self, path: str, data: bytes, first_seq: int, *, is_last: bool) -> None:
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
            resume = records.resync(data, stop)
            if resume is None and is_last:
                self._truncate_torn(seg, stop, len(data) - stop)
                break
            next_seq = records.decode_at(data, resume).seq if resume is not None else 0
            self._corrupt(path, stop, self.index.last_seq + 1, max(next_seq - 1, 0), detail)
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
        try:
            blocks, _ = segment.read_footer(data, path)
        except CorruptData as exc:
            self._corrupt(path, exc.offset, 0, 0, str(exc))
            blocks, problems = segment.walk_blocks(data, path, segment.trailer_index_offset(data) or -1)
            for problem in problems:
                self._corrupt(path, problem.offset, 0, 0, str(problem))
        zdict = dict_for(self.zdict, header.dict_id)
        good: list[segment.BlockInfo] = []
        seg = sealed_from(path, header.first_seq, header.dict_id, [])
        seg.file_bytes = len(data)
        self._add(seg)
        for info in blocks:
            try:
                if header.dict_id and zdict is None:
                    raise CorruptData("segment needs a missing dictionary", path=path, offset=info.offset)
                raw = segment.decode_block(data, info, zdict=zdict, path=path)
                frames, stop = speedups.replay_frames(raw, 0, False)
                if stop != len(raw):
                    raise CorruptData("damaged record inside block", path=path, offset=info.offset)
            except CorruptData as exc:
                self._corrupt(path, info.offset, info.first_seq, info.last_seq, str(exc))
                self.index.advance_last(info.last_seq)
                continue
            good.append(info)
            self._replay(frames, raw, seg)
        complete = sealed_from(path, header.first_seq, header.dict_id, good)
        seg.blocks, seg.block_firsts = complete.blocks, complete.block_firsts

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
                index.advance_last(record.seq)
            else:
                self._count_removed(index.skip_to(record.seq))
            index.last_ts_ns = record.timestamp_ns
        flush()

    def _corrupt(self, path: str, offset: int, first_seq: int, last_seq: int, detail: str) -> None:
        detail = detail.removeprefix(f"{path}:{offset}: ")
        self.report.corrupt.append(CorruptRegion(path, offset, first_seq, last_seq, detail))

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
