"""Sequential reads over a file store: each active file or sealed block is decoded once.

This is the fast path behind `StreamStore.scan` (consumers replaying a stream, snapshots, the
Spark reader). Liveness comes from the index as a per-block set of dead sequences (usually
empty); matches of the subject filter are cached per subject.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from appliance.errors import CorruptData
from appliance.store import api, records, segment, speedups, subjects
from appliance.store.layout import ActiveSegment, SealedSegment

if TYPE_CHECKING:
    from appliance.store.filestore import FileStreamStore


def scan_segments(store: FileStreamStore, start_seq: int, filter_subject: str) -> Iterator[api.StoredMsg]:
    index = store.index
    everything = subjects.matches_all(filter_subject)
    matched: dict[str, bool] = {}
    start = max(start_seq, index.first_seq)
    for seg in store.segments():
        if seg.live == 0:
            continue
        generation = seg.generation if isinstance(seg, ActiveSegment) else 0
        if isinstance(seg, ActiveSegment):
            if not seg.offsets or index.last_seq < start:
                continue
            batches = [(seg.first_seq, index.last_seq, _active_messages(store, seg, start))]
        else:
            batches = [
                (info.first_seq, info.last_seq, _block_messages(store, seg, k, start))
                for k, info in enumerate(seg.blocks)
                if info.last_seq >= start
            ]
        for first, last, lazy in batches:
            try:
                loaded = lazy()
            except CorruptData as exc:
                if not store.is_current(seg, generation):
                    raise  # a view from before a seal or erase: the caller reads again
                store.quarantine(exc, store.live_between(first, last))  # damaged since recovery: lost
                continue
            dead = index.dead_in(first, last)
            if everything and not dead:
                yield from loaded
                continue
            for msg in loaded:
                if dead and msg.seq in dead:
                    continue
                if not everything:
                    hit = matched.get(msg.subject)
                    if hit is None:
                        hit = matched[msg.subject] = subjects.subject_matches(filter_subject, msg.subject)
                    if not hit:
                        continue
                yield msg


def _block_messages(store: FileStreamStore, seg: SealedSegment, k: int, start: int) -> Callable[[], list[api.StoredMsg]]:
    def load() -> list[api.StoredMsg]:
        # a scan reads each block once: it does not push the random readers' blocks out of the cache
        raw = store.block(seg, k, keep=False)
        return speedups.block_msgs(raw, start, api.StoredMsg)  # type: ignore[return-value]

    return load


def _active_messages(store: FileStreamStore, seg: ActiveSegment, start: int) -> Callable[[], list[api.StoredMsg]]:
    def load() -> list[api.StoredMsg]:
        raw = store.ops.read_all(seg.path)
        _frames, stop = speedups.scan_frames(raw, segment.HEADER_BYTES)
        if stop == len(raw):
            return speedups.block_msgs(raw[segment.HEADER_BYTES :], start, api.StoredMsg)  # type: ignore[return-value]
        return list(_checked_messages(store, raw, seg, start))

    return load


def _checked_messages(store: FileStreamStore, raw: bytes, seg: ActiveSegment, start: int) -> Iterator[api.StoredMsg]:
    """Record by record through the offsets map: the active file holds a damaged record (a record
    damaged since recovery is quarantined: lost from now on, never served)."""
    generation = seg.generation
    for seq, offset in list(seg.offsets.items()):
        if seq < start or not store.index.is_live(seq):
            continue
        try:
            record = records.decode_at(raw, offset)
            if record.seq != seq:
                raise records.BadRecord(f"record at {offset} is not seq {seq}")
        except records.BadRecord as exc:
            damage = CorruptData(str(exc), path=seg.path, offset=offset)
            if not store.is_current(seg, generation):
                raise damage from exc  # a view from before a seal or erase: the caller reads again
            store.quarantine(damage, [seq])
            continue
        yield api.StoredMsg(seq, record.subject, record.headers, record.payload, record.timestamp_ns)
