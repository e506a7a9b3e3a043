"""Sequential reads over a file store: each active file or sealed block is decoded once.

This is the fast path behind `StreamStore.scan` (consumers replaying a stream, snapshots, the
Spark reader). Liveness and the subject filter come from the store's index; matches of the
filter are cached per subject.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from appliance.store import api, records, segment, subjects
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
            if not seg.offsets or index.last_seq < start:
                continue
            raw = store.ops.read_all(seg.path)
            chunks = [(raw, segment.HEADER_BYTES, True)]
        else:
            if seg.blocks and seg.blocks[-1].last_seq < start:
                continue
            chunks = [(store.block(seg, k), 0, False) for k, b in enumerate(seg.blocks) if b.last_seq >= start]
        for raw, offset, check in chunks:
            for msg in _messages(raw, offset, start, check):
                if not index.is_live(msg.seq):
                    continue
                if not everything:
                    hit = matched.get(msg.subject)
                    if hit is None:
                        hit = matched[msg.subject] = subjects.subject_matches(filter_subject, msg.subject)
                    if not hit:
                        continue
                yield msg


def _messages(raw: bytes, offset: int, start: int, check: bool) -> Iterator[api.StoredMsg]:
    end_of = len(raw)
    unpack = _HEAD.unpack_from
    while offset < end_of:
        length, _crc, kind, seq, ts, subject_len, headers_len, _payload_len = unpack(raw, offset)
        end = offset + 8 + length
        if kind == _MSG and seq >= start:
            if check:
                record = records.decode_at(raw, offset)
                yield api.StoredMsg(seq, record.subject, record.headers, record.payload, ts)
            else:
                s = offset + 35
                h = s + subject_len
                p = h + headers_len
                yield api.StoredMsg(seq, raw[s:h].decode(), raw[h:p], raw[p:end], ts)
        offset = end
