"""Sequential reads over a file store: each active file or sealed block is decoded once.

This is the fast path behind `StreamStore.scan` (consumers replaying a stream, snapshots, the
Spark reader). Liveness and the subject filter come from the store's index; matches of the
filter are cached per subject.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from appliance.errors import CorruptData
from appliance.store import api, records, subjects
from appliance.store.layout import ActiveSegment

if TYPE_CHECKING:
    from appliance.store.filestore import FileStreamStore

_HEAD = records.RECORD_HEAD
_MSG = int(records.Kind.MSG)


def scan_segments(store: FileStreamStore, start_seq: int, filter_subject: str) -> Iterator[api.StoredMsg]:
    index = store.index
    everything = subjects.matches_all(filter_subject)
    matched: dict[str, bool] = {}
    start = max(start_seq, index.first_seq)
    for seg in store.segments():
        if seg.live == 0:
            continue
        if isinstance(seg, ActiveSegment):
            found: Iterator[api.StoredMsg] = _active_messages(store, seg, start)
        else:
            if seg.blocks and seg.blocks[-1].last_seq < start:
                continue
            found = (
                msg
                for k, info in enumerate(seg.blocks)
                if info.last_seq >= start
                for msg in _messages(store.block(seg, k), start)
            )
        for msg in found:
            if not index.is_live(msg.seq):
                continue
            if not everything:
                hit = matched.get(msg.subject)
                if hit is None:
                    hit = matched[msg.subject] = subjects.subject_matches(filter_subject, msg.subject)
                if not hit:
                    continue
            yield msg


def _active_messages(store: FileStreamStore, seg: ActiveSegment, start: int) -> Iterator[api.StoredMsg]:
    if not seg.offsets:
        return
    raw = store.ops.read_all(seg.path)
    for seq, offset in list(seg.offsets.items()):
        if seq < start:
            continue
        try:
            record = records.decode_at(raw, offset)
        except records.BadRecord as exc:
            raise CorruptData(str(exc), path=seg.path, offset=offset) from exc
        yield api.StoredMsg(seq, record.subject, record.headers, record.payload, record.timestamp_ns)


def _messages(raw: bytes, start: int) -> Iterator[api.StoredMsg]:
    """Messages of a decoded sealed block (its checksum was verified when it was decoded)."""
    offset = 0
    end_of = len(raw)
    unpack = _HEAD.unpack_from
    while offset < end_of:
        length, _crc, kind, seq, ts, subject_len, headers_len, _payload_len = unpack(raw, offset)
        end = offset + 8 + length
        if kind == _MSG and seq >= start:
            s = offset + 35
            h = s + subject_len
            p = h + headers_len
            yield api.StoredMsg(seq, raw[s:h].decode(), raw[h:p], raw[p:end], ts)
        offset = end
