"""FileStreamStore: the StreamStore contract over segment files, durable before acknowledged.

Writes append records to the active segment (one write per batch); `sync()` fsyncs it (and the
directory when a segment was created), so with `sync_always` a store returns only after fsync.
Group commit is explicit: `append_batch()` any number of times, then `begin_sync()` /
`SyncJob.run()` (may run on an executor thread) / `finish_sync()` make everything appended so
far durable with one fsync (see commit.py). A full active segment is closed (fsynced; it
never changes again) and a new one started; the closed one is sealed: inline (seal_inline), by
a BackgroundSealer (sealer.py, one thread for the process) or by the owner through
`begin_seal()` / `SealJob.run()` (any thread) / `finish_seal()`. The job reads the segment,
compresses it as 1 MiB zstd blocks (segment.py) and writes and fsyncs `<segment>.seal.tmp`;
finish_seal renames it over the segment. A backlog of closed segments is sealed at a faster
zstd level, and past STORE_UNSEALED_SEGMENTS_MAX inline on the append path (backpressure).

Reads: a sealed block is decoded whole (checksums verified) into a byte-bounded LRU cache
(cache.py) with a (seq, offset) index, so a random read of a cached block is a binary search
and one record decode; the last block read is kept at hand for a consumer reading on. Loads
from the active segment share one read-ahead. scan() decodes each block once, bypassing the
cache (scan.py).

Removals (delete, purge, limits, expiry) append DELETE / FIRST records to the active segment.
Only the oldest segment is ever removed (once it has no live message), so a removal record
always outlives the messages it removes. Recovery (recovery.py) replays every segment in order
into a fresh `StreamIndex`, truncates a torn tail (an incomplete last write) of the last segment,
and reports damaged records or blocks elsewhere as `CorruptRegion`s that are never served: their
sequences are a gap (`lost()`, nats-server's LostStreamData; loading one raises CorruptData
"message N is lost"). Damage met later while reading is quarantined the same way (`quarantine`),
in memory only: nothing is rewritten around it, so a repair (a peer's copy) can fill the gap:
`repair()` (repair.py) writes the good records back at their sequences and reads the store again.

Fail closed: an OSError during a write or fsync breaks the store (BrokenError from then on);
the owner reopens it, and recovery finds what is really on disk.
"""

from __future__ import annotations

import functools
import itertools
import logging
import os
import time
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Concatenate, ParamSpec, TypeVar

import zstandard

from appliance import limits as bounds
from appliance.errors import BrokenError, CorruptData, LimitExceeded
from appliance.store import api, applied, records, repair, segment, snapshot, speedups
from appliance.store.cache import BlockCache, CachedBlock
from appliance.store.fileops import FileOps, write_atomic, write_file
from appliance.store.index import StreamIndex
from appliance.store.layout import (
    DICT_NAME,
    ActiveSegment,
    CorruptRegion,
    RecoveryReport,
    SealedSegment,
    SealJob,
    Segment,
    SyncJob,
    dict_for,
    sealed_from,
    segment_path,
)
from appliance.store.memory import state_of
from appliance.store.powerloss import file_ops
from appliance.store.recovery import Recovery
from appliance.store.scan import scan_segments
from appliance.store.sealer import BackgroundSealer
from appliance.store.sync_stats import SyncStats

logger = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")


def _fails_closed(method: Callable[Concatenate[FileStreamStore, P], R]) -> Callable[Concatenate[FileStreamStore, P], R]:
    """An OSError while mutating leaves the store broken: later calls raise BrokenError.

    After a failed write or fsync the kernel may have dropped the dirty pages, so nothing after
    it can be called durable (the fsyncgate lesson). The owner reopens the store, which recovers
    what really is on disk.
    """

    def guarded(store: FileStreamStore, /, *args: P.args, **kwargs: P.kwargs) -> R:
        if store._broken is not None:
            raise BrokenError(f"{store._dir}: store is broken; reopen it to recover") from store._broken
        try:
            return method(store, *args, **kwargs)
        except OSError as exc:
            store._broken = exc
            logger.error("store: %s broken by %s", store._dir, exc)
            raise BrokenError(f"{store._dir}: {exc}") from exc

    guarded.__name__ = method.__name__
    guarded.__doc__ = method.__doc__
    return guarded


@dataclass(frozen=True, slots=True)
class FileStoreConfig:
    directory: str
    limits: api.StoreLimits = field(default_factory=api.StoreLimits)
    sync_always: bool = True  # False: the owner calls sync() every sync_interval (nats-server)
    segment_bytes: int = bounds.STORE_SEGMENT_BYTES
    block_raw_bytes: int = bounds.STORE_BLOCK_RAW_BYTES
    block_cache_bytes: int = bounds.STORE_BLOCK_CACHE_BYTES  # decoded sealed blocks kept for reads
    use_dictionary: bool = False
    # False: the owner runs begin_seal()/SealJob.run()/finish_seal(); ignored when the store is
    # given a BackgroundSealer (sealer.py), which does that on its thread.
    seal_inline: bool = True
    zstd_level: int = bounds.STORE_SEAL_ZSTD_LEVEL
    compress: bool = True  # False: sealed blocks keep the records uncompressed (compression "none")


class FileStreamStore:
    def __init__(
        self, config: FileStoreConfig, *, ops: FileOps | None = None, sealer: BackgroundSealer | None = None,
        sync_stats: SyncStats | None = None,
    ) -> None:
        self.config = config
        self.sync_stats = sync_stats if sync_stats is not None else SyncStats()  # shared by a JetStream service
        preallocate = bounds.STORE_PREALLOCATE_BYTES
        self._ops: FileOps = ops if ops is not None else file_ops(preallocate_bytes=preallocate)
        self._dir = config.directory
        self._index = StreamIndex(config.limits)
        self._segments: list[Segment] = []
        self._names: list[int] = []
        self._zdict: zstandard.ZstdCompressionDict | None = None
        self._blocks = BlockCache(config.block_cache_bytes)
        self._hot: _HotBlock | None = None  # the block of the last sealed load (see _load_sealed)
        # (segment, generation, begin, end, bytes): the last read-ahead of an active segment
        self._chunk: tuple[ActiveSegment, int, int, int, bytes] | None = None
        self._sealer = sealer
        self._inline = config.seal_inline and sealer is None
        self._sealing: set[str] = set()  # segments with a seal job handed out and not finished
        self._seal_retry_later: set[str] = set()  # a seal failed off-thread: retried after the next roll
        self._closed = False
        self._compress = config.compress  # set_compression(): a stream update
        self.fast_seals = 0  # seals at STORE_SEAL_FAST_ZSTD_LEVEL because a backlog waited
        self.backpressure_seals = 0  # rolls that sealed inline because the backlog was too long
        self._written_seq = 0
        self._durable_seq = 0
        self._unsynced = False
        self._dir_dirty = False
        self._broken: OSError | None = None
        self._unsealable: set[str] = set()
        self.recovery = RecoveryReport()
        self._lost_floor = 0  # lost sequences below it were purged, compacted or expired since
        # called when a read finds damage (quarantine): a replicated stream repairs from a peer
        self.on_damage: Callable[[], None] | None = None
        # segments from this one on are never sealed (compressed): a replicated stream may still
        # cut the store back into them (rewind, applied.py); read from its journal before recovery
        # seals anything, moved by the stream with hold_seal()
        self._seal_hold: int | None = applied.held_segment(self._ops, self._dir)
        self._recover()

    # --- recovery ---------------------------------------------------------------------------------

    def _recover(self) -> None:
        recovered = Recovery(self._ops, self._dir, self._index).run()
        self._segments, self._names = recovered.segments, recovered.names
        self._zdict, self.recovery = recovered.zdict, recovered.report
        removed = self._index.enforce()
        if not self._segments or not isinstance(self._segments[-1], ActiveSegment):
            self._start_active()
        if removed:
            self._persist_removal(removed)
        self._written_seq = self._durable_seq = self._index.last_seq
        if self._unsynced or self._dir_dirty:
            self.sync()
        if self._inline:
            self._seal_all_now()
        elif self._sealer is not None and self.has_unsealed():
            self._sealer.request(self)
        for line in self.lost().regions:
            logger.error("store: corrupt data not served (until repaired): %s", line)
        for line in self.recovery.repaired:
            logger.warning("store: repaired on open: %s", line)

    def _dict_for(self, dict_id: int) -> zstandard.ZstdCompressionDict | None:
        return dict_for(self._zdict, dict_id)

    # --- segments ---------------------------------------------------------------------------------

    def _add_segment(self, seg: Segment) -> None:
        assert not self._names or seg.first_seq > self._names[-1]
        self._segments.append(seg)
        self._names.append(seg.first_seq)

    @property
    def _active(self) -> ActiveSegment:
        seg = self._segments[-1]
        assert isinstance(seg, ActiveSegment)
        return seg

    def _segment_of(self, seq: int) -> Segment:
        k = bisect_right(self._names, seq) - 1
        assert k >= 0, f"no segment holds seq {seq}"
        return self._segments[k]

    def _start_active(self) -> None:
        first = self._index.last_seq + 1
        if self._names:
            first = max(first, self._names[-1] + 1)
        path = segment_path(self._dir, first)
        self._ops.create(path, segment.encode_active_header(first))
        self._add_segment(ActiveSegment(path, first, segment.HEADER_BYTES))
        self._dir_dirty = True
        self._unsynced = True

    def _roll(self) -> None:
        """Close the full active segment (fsync: it never changes again) and start a new one.

        The closed segment is sealed now (seal_inline) or by the owner through begin_seal() /
        SealJob.run() / finish_seal(), e.g. on an executor thread; until then it is read as is.
        """
        old = self._active
        self._ops.close_file(old.path)  # trims a preallocated tail (fileops.py)
        self._ops.fsync(old.path)
        self._durable_seq = self._written_seq
        self._unsynced = False
        self._start_active()
        self._seal_retry_later.clear()
        if self._inline:
            self._seal_all_now()
        elif self._unsealed_count() > bounds.STORE_UNSEALED_SEGMENTS_MAX:
            self.backpressure_seals += 1  # a writer outrunning the sealer pays for it here
            self._seal_all_now()
        elif self._sealer is not None:
            self._sealer.request(self)

    def _seal_all_now(self) -> None:
        while (job := self.begin_seal()) is not None:
            try:
                job.run()
            except CorruptData as exc:
                self.seal_failed(job, exc)
                continue
            self.finish_seal(job)

    def _unsealed_count(self) -> int:
        return sum(1 for seg in self._segments[:-1] if isinstance(seg, ActiveSegment))

    def has_unsealed(self) -> bool:
        """A closed segment could be sealed now (none in flight, damaged, failing or held)."""
        skip = self._unsealable | self._sealing | self._seal_retry_later
        return any(isinstance(seg, ActiveSegment) and seg.path not in skip and not self._held(seg)
                   for seg in self._segments[:-1])

    def _held(self, seg: Segment) -> bool:
        return self._seal_hold is not None and seg.first_seq >= self._seal_hold

    @property
    def seal_hold(self) -> int | None:
        return self._seal_hold

    @_fails_closed
    def hold_seal(self, segment_first: int | None) -> None:
        """Seal (or remove as dead) no segment from `segment_first` on (None: no hold); what the
        hold released is sealed as after a roll."""
        released = self._seal_hold is not None and (segment_first is None or segment_first > self._seal_hold)
        self._seal_hold = segment_first
        if not released or self._closed or self._broken is not None:
            return
        self._drop_dead_head()
        if not self.has_unsealed():
            return
        if self._inline:
            self._seal_all_now()
        elif self._sealer is not None:
            self._sealer.request(self)

    def seal_failed(self, job: SealJob, error: BaseException) -> None:
        """A seal job raised: the segment stays closed and readable as it is.

        A damaged segment (CorruptData) is never sealed (never rewritten around the damage);
        after another error (an OSError writing the copy) it is tried again after the next roll.
        """
        self._sealing.discard(job.path)
        if isinstance(error, CorruptData):
            self._unsealable.add(job.path)
            logger.error("store: %s is damaged at offset %s; kept unsealed: %s", job.path, error.offset, error)
            return
        self._seal_retry_later.add(job.path)
        logger.warning("store: sealing %s failed (%s); it stays uncompressed for now", job.path, error)

    @property
    def closed(self) -> bool:
        return self._closed

    @_fails_closed
    def begin_seal(self) -> SealJob | None:
        """The compression of the oldest closed, unsealed segment, or None."""
        skip = self._unsealable | self._sealing | self._seal_retry_later
        for k, seg in enumerate(self._segments[:-1]):
            if not isinstance(seg, ActiveSegment) or seg.path in skip or self._held(seg):
                continue
            # A backlog (more than this segment waits) is sealed at the fast level to catch up.
            backlog = self._unsealed_count() > 1
            level = min(self.config.zstd_level, bounds.STORE_SEAL_FAST_ZSTD_LEVEL) if backlog else self.config.zstd_level
            job = self._seal_job(k, seg, level if self._compress else None)
            if job is not None:
                self._sealing.add(seg.path)
                self.fast_seals += self._compress and level != self.config.zstd_level
                return job
            # Damaged (reported at recovery): keep it as it is, never rewrite around the damage.
            self._unsealable.add(seg.path)
        return None

    def _seal_job(self, k: int, seg: ActiveSegment, level: int | None) -> SealJob | None:
        """level None: the blocks are stored uncompressed."""
        dead = self._index.dead_in(seg.first_seq, self._names[k + 1] - 1)
        training = self.config.use_dictionary and self._zdict is None and level is not None
        first_seq, block_raw_bytes, path, ops = seg.first_seq, self.config.block_raw_bytes, seg.path, self._ops
        encode: Callable[[], bytes]
        if dead or training:  # the owner picks the records (and trains once): rarely taken
            raw = ops.read_all(path)
            frames, stop = speedups.scan_frames(raw, segment.HEADER_BYTES)
            if stop != len(raw):
                return None
            keep = [f for f in frames if f[2] != records.Kind.MSG or f[3] not in dead] if dead else frames
            zdict = self._maybe_train(keep, raw) if level is not None else None

            def encode() -> bytes:
                return segment.encode_sealed(first_seq, keep, raw, zdict=zdict, block_raw_bytes=block_raw_bytes, level=level)

        else:  # every record stays: read, check and plan (natively) off the owner's thread too
            zdict = self._zdict if level is not None else None

            def encode() -> bytes:
                raw = ops.read_all(path)
                plans, stop = speedups.plan_blocks(raw, segment.HEADER_BYTES, block_raw_bytes)
                if stop != len(raw):
                    raise CorruptData("damaged record in a closed segment", path=path, offset=stop)
                return segment.encode_sealed_plan(first_seq, raw, plans, zdict=zdict, level=level)

        write = functools.partial(write_file, self._ops)
        dict_id = zdict.dict_id() if zdict else 0
        return SealJob(seg.path, seg.first_seq, seg.generation, encode, dict_id, write, seg.size)

    @_fails_closed
    def finish_seal(self, job: SealJob) -> bool:
        """Install a finished seal (rename over the segment); False if it changed or went meanwhile."""
        assert job.result is not None, "run() the job first"
        self._sealing.discard(job.path)
        k = bisect_right(self._names, job.first_seq) - 1
        seg = self._segments[k] if 0 <= k < len(self._segments) - 1 else None
        if (
            not isinstance(seg, ActiveSegment)
            or seg.path != job.path
            or seg.generation != job.generation
            or self._closed
        ):
            if not self._closed and self._ops.exists(job.tmp_path):
                self._ops.remove(job.tmp_path)  # recovery would remove it too
            return False
        self._ops.rename(job.tmp_path, seg.path)
        self._ops.fsync_dir(self._dir)
        blocks, _ = segment.read_footer(job.result, seg.path)
        sealed = sealed_from(seg.path, seg.first_seq, job.dict_id, blocks)
        sealed.live = seg.live
        sealed.file_bytes = len(job.result)
        self._segments[k] = sealed
        return True

    def _maybe_train(self, keep: list[records.Frame], raw: bytes) -> zstandard.ZstdCompressionDict | None:
        if not self.config.use_dictionary or self._zdict is not None:
            return self._zdict
        samples: list[bytes | bytearray | memoryview] = [raw[f[0] : f[1]] for f in keep if f[2] == records.Kind.MSG]
        samples = samples[: bounds.STORE_DICT_SAMPLES_MAX]
        if len(samples) < bounds.STORE_DICT_SAMPLES_MIN:
            return None
        try:
            zdict = zstandard.train_dictionary(bounds.STORE_DICT_BYTES, samples)
        except zstandard.ZstdError as exc:
            logger.info("store: no dictionary trained for %s: %s", self._dir, exc)
            return None
        write_atomic(self._ops, os.path.join(self._dir, DICT_NAME), zdict.as_bytes())
        self._zdict = zdict
        return zdict

    def _drop_dead_head(self) -> None:
        """Remove leading segments without live messages (never the active one, nor a held one:
        a rewind may cut back into it)."""
        if len(self._segments) < 2 or self._segments[0].live or self._held(self._segments[0]):
            return
        if self._unsynced or self._dir_dirty:
            self.sync()  # the removal records must be durable before the messages' files go
        while len(self._segments) > 1 and self._segments[0].live == 0 and not self._held(self._segments[0]):
            seg = self._segments.pop(0)
            self._names.pop(0)
            self._ops.remove(seg.path)
            self._blocks.drop_file(seg.path)
        self._hot = None
        self._ops.fsync_dir(self._dir)

    # --- writes -----------------------------------------------------------------------------------

    def msg_size(self, subject: str, headers: bytes, payload: bytes) -> int:
        return api.file_msg_size(subject, headers, payload)

    @_fails_closed
    def append_batch(self, msgs: Sequence[api.MsgInput]) -> list[int]:
        """Write messages to the OS without fsync; returns their sequences (see begin_sync)."""
        if len(msgs) > bounds.STORE_BATCH_MSGS_MAX:
            raise LimitExceeded(f"batch of {len(msgs)} > STORE_BATCH_MSGS_MAX")
        index = self._index
        active = self._active
        offsets = active.offsets
        lim = index.limits
        enforcing = lim.max_msgs > 0 or lim.max_bytes > 0 or lim.max_msgs_per_subject > 0
        checking = lim.discard == "new" or lim.max_msg_size >= 0
        if not enforcing and not checking:
            return self._append_unlimited(msgs)
        parts: list[bytes] = []
        seqs: list[int] = []
        removed: list[int] = []
        position = active.size
        encode = records.encode_msg
        try:
            for subject, headers, payload, timestamp_ns in msgs:
                size = api.file_msg_size(subject, headers, payload)
                if checking:
                    index.check_admit(subject, size, len(headers) + len(payload))
                seq = index.last_seq + 1
                try:
                    record = encode(seq, subject.encode(), headers, payload, timestamp_ns)
                except ValueError as exc:
                    raise api.StoreLimitError(api.MAX_MSG_SIZE_EXCEEDED) from exc
                index.add(seq, subject, size, timestamp_ns)
                offsets[seq] = position
                position += len(record)
                parts.append(record)
                seqs.append(seq)
                if enforcing:
                    removed.extend(index.enforce(subject))
        finally:
            active.live += len(seqs)
            if removed:
                parts.append(records.encode_delete(records.to_ranges(removed), index.last_ts_ns))
            if parts:
                self._ops.append(active.path, b"".join(parts))
                active.size = position + (len(parts[-1]) if removed else 0)
                self._written_seq = index.last_seq
                self._unsynced = True
            if removed:
                self._count_removed(removed)
        if active.size >= self.config.segment_bytes:
            self._roll()
        if removed:
            self._drop_dead_head()
        return seqs

    def _append_unlimited(self, msgs: Sequence[api.MsgInput]) -> list[int]:
        """append_batch when no limit can refuse or evict: one encode, one write, one index update."""
        if not msgs:
            return []
        index = self._index
        active = self._active
        batch = msgs if isinstance(msgs, list) else list(msgs)
        first = index.last_seq + 1
        try:
            buffer, offsets, sizes, times = speedups.encode_msgs(batch, first, active.size)
        except ValueError as exc:  # a subject or record over the format's limits: nothing was written
            raise api.StoreLimitError(api.MAX_MSG_SIZE_EXCEEDED) from exc
        self._ops.append(active.path, buffer)
        last = first + len(batch) - 1
        active.offsets.update(zip(range(first, last + 1), offsets))
        index.add_many(first, [m[0] for m in batch], sizes, times)
        active.live += len(batch)
        active.size += len(buffer)
        self._written_seq = last
        self._unsynced = True
        if active.size >= self.config.segment_bytes:
            self._roll()
        return list(range(first, last + 1))

    def store_msg(self, subject: str, headers: bytes, payload: bytes, timestamp_ns: int) -> int:
        (seq,) = self.store_batch([(subject, headers, payload, timestamp_ns)])
        return seq

    @_fails_closed
    def store_batch(self, msgs: Sequence[api.MsgInput]) -> list[int]:
        try:
            return self.append_batch(msgs)
        finally:
            if self.config.sync_always:
                self.sync()

    @_fails_closed
    def begin_sync(self) -> SyncJob | None:
        """The fsync that will make everything appended so far durable, or None if nothing is pending."""
        if not self._unsynced and not self._dir_dirty:
            return None
        actions = [self._ops.fsync_job(self._active.path)]
        if self._dir_dirty:
            directory, ops = self._dir, self._ops
            actions.append(lambda: ops.fsync_dir(directory))
        self._unsynced = self._dir_dirty = False
        return SyncJob(self._written_seq, actions, covered=self._written_seq - self._durable_seq)

    def fail_sync(self, job: SyncJob, error: OSError) -> None:
        """The job's fsync failed: nothing unsynced may ever be called durable; the store is broken."""
        self._broken = error
        logger.error("store: fsync of %s failed (%s); the store is broken until reopened", self._dir, error)

    @property
    def broken(self) -> bool:
        return self._broken is not None

    def finish_sync(self, job: SyncJob) -> int:
        self.sync_stats.record(job.elapsed_s, job.covered)
        self._durable_seq = max(self._durable_seq, job.seq)
        return self._durable_seq

    @_fails_closed
    def sync(self) -> int:
        """Everything appended so far durable now, on this thread (no job, no duplicated fd)."""
        if self._unsynced or self._dir_dirty:
            seq, dir_dirty = self._written_seq, self._dir_dirty
            started = time.perf_counter()
            self._ops.fsync(self._active.path)
            if dir_dirty:
                self._ops.fsync_dir(self._dir)
            self.sync_stats.record(time.perf_counter() - started, seq - self._durable_seq)
            self._unsynced = self._dir_dirty = False
            self._durable_seq = max(self._durable_seq, seq)
        return self._durable_seq

    @property
    def durable_seq(self) -> int:
        return self._durable_seq

    def _persist_removal(self, removed: list[int], *, first: int = 0) -> None:
        """Append the removal record, update segment counts, drop dead head segments."""
        if not removed and not first:
            return
        last_ts = self._index.last_ts_ns
        if first:
            self._lost_floor = max(self._lost_floor, first)
            record = records.encode_first(first, last_ts)
        else:
            record = records.encode_delete(records.to_ranges(removed), last_ts)
        active = self._active
        self._ops.append(active.path, record)
        active.size += len(record)
        self._unsynced = True
        self._count_removed(removed)
        if self.config.sync_always:
            self.sync()
        self._drop_dead_head()

    def _count_removed(self, removed: list[int]) -> None:
        for seq in removed:
            self._segment_of(seq).live -= 1

    @_fails_closed
    def delete(self, seq: int, *, erase: bool = False) -> bool:
        if not self._index.remove(seq):
            return False
        seg = self._segment_of(seq)
        self._persist_removal([seq])
        if erase and any(s is seg for s in self._segments):
            if any(region.path == seg.path for region in self.recovery.corrupt):
                # never rewrite around damage (a repair needs it as found): removed, not erased
                logger.warning("store: %s holds damaged data; seq %d is deleted but not erased", seg.path, seq)
            else:
                self._rewrite_without(seg, seq)
        return True

    @_fails_closed
    def purge(self, subject: str = "", *, keep: int = 0, up_to_seq: int = 0) -> int:
        index = self._index
        if not subject and not keep and not up_to_seq:
            removed = index.skip_to(index.last_seq + 1)
            self._persist_removal(removed, first=index.last_seq + 1)
            return len(removed)
        if up_to_seq and not subject:
            self._lost_floor = max(self._lost_floor, up_to_seq)
        plan = index.purge_plan(subject, keep=keep, up_to_seq=up_to_seq)
        for seq in plan:
            index.remove(seq)
        if plan:
            self._persist_removal(plan)
        return len(plan)

    @_fails_closed
    def compact(self, seq: int) -> int:
        if seq <= 0:
            return self.purge()  # nats-server: Compact(0) purges everything
        removed = self._index.skip_to(seq)
        self._persist_removal(removed, first=seq)
        return len(removed)

    @_fails_closed
    def expire(self, now_ns: int) -> int:
        removed = self._index.expire(now_ns)
        if removed:
            self._lost_floor = max(self._lost_floor, removed[-1] + 1)  # lost ones below were older
            self._persist_removal(removed)
        return len(removed)

    def next_expiry_ns(self) -> int | None:
        return self._index.next_expiry_ns()

    @property
    def compressing(self) -> bool:
        """Whether segments sealed from now on are compressed."""
        return self._compress

    def set_compression(self, compress: bool) -> None:
        """Whether segments sealed from now on are compressed (a stream's `compression` changed);
        sealed ones stay as they are, both kinds are read alike."""
        self._compress = compress

    @_fails_closed
    def set_limits(self, store_limits: api.StoreLimits) -> None:
        self._index.limits = store_limits
        removed = self._index.enforce()
        if removed:
            self._persist_removal(removed)

    def _rewrite_without(self, seg: Segment, seq: int) -> None:
        """Erase: rewrite the segment holding seq without its record (atomic replace)."""
        if isinstance(seg, ActiveSegment):
            raw = self._ops.read_all(seg.path)
            found, stop = records.decode_all(raw, segment.HEADER_BYTES)
            assert stop == len(raw)
            kept = [r for r in found if not (r.kind == records.Kind.MSG and r.seq == seq)]
            data = segment.encode_active_header(seg.first_seq) + b"".join(raw[r.offset : r.end] for r in kept)
            write_atomic(self._ops, seg.path, data)
            seg.generation += 1
            seg.offsets.clear()
            for record in records.decode_all(data, segment.HEADER_BYTES)[0]:
                if record.kind == records.Kind.MSG:
                    seg.offsets[record.seq] = record.offset
            seg.size = len(data)
            if seg is self._segments[-1]:
                self._unsynced = False
            return
        frames: list[records.Frame] = []
        chunks: list[bytes] = []
        base = 0
        data = self._ops.read_all(seg.path)
        zdict = self._dict_for(seg.dict_id)
        blocks, _ = segment.read_footer(data, seg.path)
        for info in blocks:
            raw = segment.decode_block(data, info, zdict=zdict, path=seg.path)
            for offset, end, kind, record_seq, ts in records.scan_frames(raw)[0]:
                if not (kind == records.Kind.MSG and record_seq == seq):
                    chunks.append(raw[offset:end])
                    frames.append((base, base + end - offset, kind, record_seq, ts))
                    base += end - offset
        new = segment.encode_sealed(
            seg.first_seq, frames, b"".join(chunks), zdict=zdict, block_raw_bytes=self.config.block_raw_bytes,
            level=self.config.zstd_level if self._compress else None,
        )
        write_atomic(self._ops, seg.path, new)
        rebuilt = sealed_from(seg.path, seg.first_seq, seg.dict_id, segment.read_footer(new, seg.path)[0])
        seg.blocks, seg.block_firsts, seg.file_bytes = rebuilt.blocks, rebuilt.block_firsts, len(new)
        self._blocks.drop_file(seg.path)
        self._hot = None

    # --- reads ------------------------------------------------------------------------------------

    def load(self, seq: int) -> api.StoredMsg | None:
        if not self._index.is_live(seq):
            if seq >= self._lost_floor:
                for region in self.recovery.corrupt:
                    if region.covers(seq):
                        raise CorruptData(
                            f"message {seq} is lost: the stored record is damaged ({region.detail})",
                            path=region.path, offset=region.offset,
                        )
            return None
        hot = self._hot
        if hot is not None and hot[0] <= seq <= hot[1]:
            return self._from_block(hot, seq)
        seg = self._segment_of(seq)
        try:
            if isinstance(seg, ActiveSegment):
                return self._load_active(seg, seq)
            return self._load_sealed(seg, seq)
        except CorruptData as exc:  # damaged since recovery: the record (or its block) is lost
            k = seg.block_for(seq) if isinstance(seg, SealedSegment) else None
            block = seg.blocks[k] if isinstance(seg, SealedSegment) and k is not None else None
            self.quarantine(exc, [seq] if block is None else self.live_between(block.first_seq, block.last_seq))
            raise

    def live_between(self, first: int, last: int) -> list[int]:
        return list(itertools.takewhile(lambda s: s <= last, self._index.live_seqs(first)))

    def is_current(self, seg: Segment, generation: int) -> bool:
        """seg (seen at generation) is still what the store reads: not sealed, erased or dropped since."""
        if not any(s is seg for s in self._segments):
            return False
        return not isinstance(seg, ActiveSegment) or seg.generation == generation

    def quarantine(self, damage: CorruptData, seqs: list[int]) -> None:
        """Damage found while reading (after recovery): the sequences it hides become lost, as if
        recovery had found it. Nothing is written: a repair (or the next recovery) decides."""
        path = damage.path or self._dir
        offset = damage.offset if damage.offset is not None else 0
        lost = [seq for seq in seqs if self._index.is_live(seq)]
        for seq in lost:
            self._index.remove(seq)
            self._segment_of(seq).live -= 1
        self._hot = None
        detail = str(damage).removeprefix(f"{path}:{offset}: ")
        for first, last in records.to_ranges(lost) or [(1, 0)]:
            self.recovery.corrupt.append(CorruptRegion(path, offset, first, last, detail))
        logger.error("store: corrupt data found while reading, not served: %s:%d: sequences %s: %s",
                     path, offset, records.to_ranges(lost), detail)
        if self.on_damage is not None:
            self.on_damage()

    def lost(self) -> api.LostData:
        """The damage recovery (or a read) found that still matters, as LostData."""
        paths = {seg.path for seg in self._segments}
        listed: list[int] = []
        count = damaged_bytes = 0
        lines: list[str] = []
        for region in self.recovery.corrupt:
            holds_seqs = region.last_seq >= region.first_seq > 0
            if holds_seqs and region.last_seq < self._lost_floor:
                continue  # removed since (purge, compact, expiry): nothing left to repair
            if not holds_seqs and region.path not in paths:
                continue  # the damaged file is gone
            first = max(region.first_seq, self._lost_floor)
            if holds_seqs:
                count += region.last_seq - first + 1
                room = bounds.STORE_LOST_LISTED_MAX - len(listed)
                listed.extend(range(first, min(region.last_seq, first + room - 1) + 1))
                span = f"sequences {first}..{region.last_seq}"
            else:
                span = "no message lost"
            damaged_bytes += region.length
            where = region.path if region.offset < 0 else f"{region.path}:{region.offset}"
            lines.append(f"{where}: {span}: {region.detail}")
        if not lines:
            return api.NO_LOSS
        return api.LostData(tuple(listed), count, damaged_bytes, tuple(lines))

    def lost_ranges(self) -> list[tuple[int, int]]:
        """Every lost sequence (damaged, not removed since) as sorted inclusive ranges: what a
        repair asks a peer for (lost() lists only the first STORE_LOST_LISTED_MAX)."""
        spans: list[tuple[int, int]] = []
        for region in self.recovery.corrupt:
            first = max(region.first_seq, self._lost_floor)
            if region.first_seq > 0 and region.last_seq >= first:
                spans.append((first, region.last_seq))
        merged: list[tuple[int, int]] = []
        for lo, hi in sorted(spans):
            if merged and lo <= merged[-1][1] + 1:
                merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
            else:
                merged.append((lo, hi))
        return merged

    @_fails_closed
    def repair(self, msgs: Sequence[api.StoredMsg], gone: Iterable[int] = ()) -> list[int]:
        """Put lost messages back at their own sequences from a good copy (a peer's), and mark
        `gone` the lost sequences that copy no longer holds (removed there since). Each segment
        holding a damaged stretch whose every lost sequence is given is rebuilt and replaces its
        file atomically (repair.py); the store is then read back from disk. Returns the
        sequences restored, in order ([] when nothing could be, e.g. while a seal job runs)."""
        lost = {seq for lo, hi in self.lost_ranges() for seq in range(lo, hi + 1)}
        fill = {msg.seq: msg for msg in msgs if msg.seq in lost}
        gone_set = {seq for seq in gone if seq in lost and seq not in fill}
        if not fill and not gone_set or self._sealing:
            return []
        self.sync()  # re-reading the store below calls everything written so far durable
        restored: list[int] = []
        paths = {region.path for region in self.recovery.corrupt if region.first_seq > 0}
        for k, seg in enumerate(self._segments):
            if seg.path not in paths:
                continue
            next_first = self._names[k + 1] if k + 1 < len(self._segments) else 0
            done = self._repaired_file(seg, lost, fill, gone_set, next_first)
            if done is None:
                continue
            data, seqs = done
            write_atomic(self._ops, seg.path, data)
            self._unsealable.discard(seg.path)
            restored += seqs
        restored += self._repair_missing(lost - set(restored), fill, gone_set)
        if not restored:
            return []
        self._reread()
        for lo, hi in records.to_ranges(restored):
            logger.warning("store: repaired %s: sequences %d..%d restored from a good copy", self._dir, lo, hi)
        return sorted(restored)

    def _repaired_file(
        self, seg: Segment, lost: set[int], fill: dict[int, api.StoredMsg], gone: set[int], next_first: int
    ) -> tuple[bytes, list[int]] | None:
        data = self._ops.read_all(seg.path)
        try:
            if isinstance(seg, ActiveSegment):
                return repair.repair_active(data, lost, fill, gone, next_first=next_first)
            return repair.repair_sealed(
                data, lost, fill, gone, zdict=self._dict_for(seg.dict_id), block_raw_bytes=self.config.block_raw_bytes,
                level=self.config.zstd_level if self._compress else None, path=seg.path,
            )
        except CorruptData as exc:  # a damaged header or footer: this file is not rebuilt from here
            logger.warning("store: %s cannot be repaired in place: %s", seg.path, exc)
            return None

    def _repair_missing(self, lost: set[int], fill: dict[int, api.StoredMsg], gone: set[int]) -> list[int]:
        """Lost sequences of a segment file that is gone (a region at offset -1) or unreadable
        as a whole (its header damaged past rebuilding: recovery kept no segment of it): a new
        segment file holds them again, named after the first of them or in place of the
        unreadable one."""
        restored: list[int] = []
        held = {seg.path for seg in self._segments}
        for region in self.recovery.corrupt:
            if region.first_seq <= 0 or (region.offset >= 0 and region.path in held):
                continue
            seqs = sorted(seq for seq in lost if region.first_seq <= seq <= region.last_seq)
            if not seqs:
                continue
            first = seqs[0] if region.offset < 0 else segment.first_of(os.path.basename(region.path))
            if not 0 < first <= seqs[0] or first in self._names:
                continue
            k = bisect_right(self._names, first)
            if k >= len(self._names) or self._names[k] <= seqs[-1]:
                continue  # only between two segments (the active one is never missing)
            data = repair.missing_segment(first, seqs, fill, gone)
            if data is None:
                continue
            write_atomic(self._ops, segment_path(self._dir, first), data)
            restored += seqs
        return restored

    def _reread(self) -> None:
        """Read the store back from disk (after files were rewritten under it), as on open."""
        for seg in self._segments:
            self._ops.close_file(seg.path)
        self._index = StreamIndex(self._index.limits)
        self._blocks = BlockCache(self.config.block_cache_bytes)
        self._hot = self._chunk = None
        self._seal_retry_later.clear()
        self._unsynced = self._dir_dirty = False
        self._recover()

    def _load_active(self, seg: ActiveSegment, seq: int) -> api.StoredMsg:
        """From a read-ahead chunk of the file (its bytes never change while the generation holds)."""
        offset = seg.offsets[seq]
        chunk = self._chunk
        if chunk is None or chunk[0] is not seg or chunk[1] != seg.generation or not chunk[2] <= offset < chunk[3]:
            data = self._ops.read_at(seg.path, offset, bounds.STORE_ACTIVE_READAHEAD_BYTES)
            chunk = self._chunk = (seg, seg.generation, offset, offset + len(data), data)
        at = offset - chunk[2]
        buf = chunk[4]
        if at + records.FRAME.size > len(buf) or at + records.FRAME.size + int.from_bytes(buf[at : at + 4], "little") > len(buf):
            length = int.from_bytes(self._ops.read_at(seg.path, offset, 4), "little")
            data = self._ops.read_at(seg.path, offset, max(records.FRAME.size + length, bounds.STORE_ACTIVE_READAHEAD_BYTES))
            chunk = self._chunk = (seg, seg.generation, offset, offset + len(data), data)
            at, buf = 0, data
        try:
            msg: api.StoredMsg = speedups.msg_at(buf, at, api.StoredMsg, True)  # type: ignore[assignment]
        except (ValueError, UnicodeDecodeError) as exc:
            raise CorruptData(f"no valid record of seq {seq}: {exc}", path=seg.path, offset=offset) from exc
        if msg.seq != seq:
            raise CorruptData(f"record at offset is not seq {seq}", path=seg.path, offset=offset)
        return msg

    def _block(self, seg: SealedSegment, k: int, *, keep: bool = True) -> CachedBlock:
        """A decoded (verified) block, through the LRU cache of decoded blocks (kept there if keep)."""
        key = (seg.path, seg.blocks[k].offset)
        cached = self._blocks.get(key)
        if cached is not None:
            return cached
        info = seg.blocks[k]
        head = self._ops.read_at(seg.path, info.offset, segment.BLOCK_HEADER.size + info.comp_len)
        shifted = segment.BlockInfo(0, *_tail(info))
        block = CachedBlock(segment.decode_block(head, shifted, zdict=self._dict_for(seg.dict_id), path=seg.path))
        if keep:
            self._blocks.put(key, block)
        return block

    def _load_sealed(self, seg: SealedSegment, seq: int) -> api.StoredMsg:
        k = seg.block_for(seq)
        assert k is not None, f"live seq {seq} has no block"
        info = seg.blocks[k]
        block = self._block(seg, k)
        if block.index is None:
            self._blocks.set_index((seg.path, info.offset), block, speedups.msg_index(block.raw))
        # the next load is most likely a neighbour (a consumer reading on): it skips the lookups
        hot = self._hot = (info.first_seq, info.last_seq, block, seg.path, info.offset)
        return self._from_block(hot, seq)

    def _from_block(self, hot: _HotBlock, seq: int) -> api.StoredMsg:
        block = hot[2]
        assert block.index is not None
        offset = speedups.index_find(block.index, seq)
        if offset < 0:
            raise CorruptData(f"live seq {seq} missing from its block", path=hot[3], offset=hot[4])
        msg: api.StoredMsg = speedups.msg_at(block.raw, offset, api.StoredMsg)  # type: ignore[assignment]
        return msg

    def load_next(self, filter_subject: str, start_seq: int) -> api.StoredMsg | None:
        """The next matching message; one found damaged now is quarantined and skipped."""
        for _attempt in range(bounds.STORE_DAMAGED_SKIPS_MAX):
            seq = self._index.next_live(start_seq, filter_subject)
            if seq is None:
                return None
            try:
                return self.load(seq)
            except CorruptData:
                start_seq = seq + 1  # quarantined by load(): no longer live
        raise CorruptData(f"more than {bounds.STORE_DAMAGED_SKIPS_MAX} damaged records in a row", path=self._dir)

    def load_last(self, filter_subject: str) -> api.StoredMsg | None:
        for _attempt in range(bounds.STORE_DAMAGED_SKIPS_MAX):
            seq = self._index.last_live(filter_subject)
            if seq is None:
                return None
            try:
                return self.load(seq)
            except CorruptData:
                continue  # quarantined by load(): the one before it is the last now
        raise CorruptData(f"more than {bounds.STORE_DAMAGED_SKIPS_MAX} damaged records in a row", path=self._dir)

    def scan(self, start_seq: int = 1, filter_subject: str = ">") -> Iterator[api.StoredMsg]:
        """Sequential read: decodes each block or active file once, yields live matching messages."""
        return scan_segments(self, start_seq, filter_subject)

    def state(self, *, with_deleted: bool = False) -> api.StreamState:
        return state_of(self._index, with_deleted=with_deleted)

    def subject_counts(self, filter_subject: str = ">") -> dict[str, int]:
        return self._index.subject_counts(filter_subject)

    def snapshot(self) -> Iterator[bytes]:
        index = self._index
        return snapshot.encode(index.first_seq, index.last_seq, index.last_ts_ns, self.scan())

    @classmethod
    def restore(cls, config: FileStoreConfig, chunks: Iterable[bytes], *, ops: FileOps | None = None) -> FileStreamStore:
        """A new store in an empty directory holding exactly a snapshot's stream (limits not applied)."""
        first_seq, last_seq, last_ts_ns, msgs = snapshot.decode(chunks)
        store = cls(config, ops=ops)
        assert store._index.last_seq == 0, "restore into an empty directory"
        if first_seq > 1:
            store.compact(first_seq)
        step = bounds.STORE_BATCH_MSGS_MAX // 16
        for start in range(0, len(msgs), step):
            store.append_restored(msgs[start : start + step])
        store.finish_restore(last_seq, last_ts_ns)
        return store

    def finish_restore(self, last_seq: int, last_ts_ns: int) -> None:
        """End a restore: last_seq and the last timestamp as the snapshot had them (also across
        a reopen, when the last messages were deleted), all of it synced."""
        if last_seq > self._index.last_seq or last_ts_ns != self._index.last_ts_ns:
            record = records.encode_delete([(last_seq, last_seq)], last_ts_ns)
            self._ops.append(self._active.path, record)
            self._active.size += len(record)
            self._index.advance_last(last_seq)
            self._index.last_ts_ns = last_ts_ns
            self._unsynced = True
        self.sync()

    def append_restored(self, msgs: list[api.StoredMsg]) -> None:
        """Messages with their own ascending sequences (gaps allowed), as a snapshot holds them;
        into a store being restored (limits not applied). finish_restore() ends it."""
        parts: list[bytes] = []
        position = self._active.size
        for msg in msgs:
            record = records.encode_msg(msg.seq, msg.subject.encode(), msg.headers, msg.payload, msg.timestamp_ns)
            active = self._active
            self._index.add(msg.seq, msg.subject, api.file_msg_size(msg.subject, msg.headers, msg.payload), msg.timestamp_ns)
            active.offsets[msg.seq] = position
            active.live += 1
            parts.append(record)
            position += len(record)
            if position >= self.config.segment_bytes:
                self._flush_restored(parts)
                parts = []
                self._roll()
                position = self._active.size
        self._flush_restored(parts)

    def _flush_restored(self, parts: list[bytes]) -> None:
        if not parts:
            return
        data = b"".join(parts)
        self._ops.append(self._active.path, data)
        self._active.size += len(data)
        self._written_seq = self._index.last_seq
        self._unsynced = True

    # --- a replicated stream's applied position (store/applied.py) ----------------------------------

    def position(self) -> tuple[int, int]:
        """Where the store's writes end now: (active segment's first sequence, its size in bytes)."""
        active = self._active
        return active.first_seq, active.size

    @_fails_closed
    def rewind(self, segment_first: int, size: int) -> bool:
        """Cut the store back to the moment `position()` was (segment_first, size): every record
        written since (messages, removals) is dropped, and the store is read back from disk.

        False (nothing changed) when that moment cannot be restored: its segment is gone or
        sealed (compressed since), a seal job holds it, or it is shorter now than then.
        """
        k = bisect_right(self._names, segment_first) - 1
        if k < 0 or self._names[k] != segment_first:
            return False
        tail = self._segments[k:]
        if any(not isinstance(seg, ActiveSegment) or seg.path in self._sealing for seg in tail):
            return False
        target = tail[0]
        assert isinstance(target, ActiveSegment)
        if size < segment.HEADER_BYTES or size > target.size:
            return False
        if (target.size, len(tail)) == (size, 1):
            return True
        for seg in tail:
            self._ops.close_file(seg.path)
        for seg in tail[1:]:  # only records written after that moment are in them
            self._ops.remove(seg.path)
        self._ops.truncate(target.path, size)
        self._ops.fsync(target.path)
        self._ops.fsync_dir(self._dir)
        self._index = StreamIndex(self._index.limits)
        self._blocks = BlockCache(self.config.block_cache_bytes)
        self._hot = self._chunk = None
        self._seal_retry_later.clear()
        self._unsynced = self._dir_dirty = False
        self._lost_floor = 0
        self._recover()
        return True

    @property
    def can_reset(self) -> bool:
        """No seal job holds a segment: reset() may remove them all now."""
        return not self._sealing and not self._closed

    @_fails_closed
    def reset(self) -> None:
        """Remove every message and start over empty at sequence 0, as a new store (a replica
        that differs from its leader refills it from the leader: jetstream/resync.py). Segments
        go newest first: a crash midway leaves an older prefix of the stream, never a gap."""
        assert self.can_reset, "reset while a seal job holds a segment"
        for seg in reversed(self._segments):
            self._ops.close_file(seg.path)
            self._ops.remove(seg.path)
        self._ops.fsync_dir(self._dir)
        self._index = StreamIndex(self._index.limits)
        self._segments, self._names = [], []
        self._blocks = BlockCache(self.config.block_cache_bytes)
        self._hot = self._chunk = None
        self._seal_retry_later.clear()
        self._unsealable.clear()
        self._unsynced = self._dir_dirty = False
        self._lost_floor = 0
        self._recover()

    # --- introspection for scan.py and inspect ----------------------------------------------------

    @property
    def index(self) -> StreamIndex:
        return self._index

    @property
    def ops(self) -> FileOps:
        return self._ops

    def segments(self) -> list[Segment]:
        return list(self._segments)

    @property
    def block_cache(self) -> BlockCache:
        return self._blocks

    def block(self, seg: SealedSegment, k: int, *, keep: bool = True) -> bytes:
        """The raw records of block k, from the cache or decoded (and then cached if keep)."""
        return self._block(seg, k, keep=keep).raw

    def close(self) -> None:
        if self._sealer is not None:
            self._sealer.forget(self)  # its job in flight (using our FileOps) finishes first
        self._closed = True
        try:
            if (self._unsynced or self._dir_dirty) and self._broken is None:
                self.sync()
        finally:
            self._ops.close()


# The block of the last sealed load: (first_seq, last_seq, block, segment path, block offset); a
# plain tuple, since one is made per random read.
_HotBlock = tuple[int, int, CachedBlock, str, int]


def _tail(info: segment.BlockInfo) -> tuple[int, int, int, int, int, int]:
    return (info.first_seq, info.last_seq, info.ts_min, info.ts_max, info.msg_count, info.comp_len)
