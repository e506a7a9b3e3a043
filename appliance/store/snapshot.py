"""Stream snapshots: a portable, zstd-compressed byte stream of a stream's live messages.

    zstd( "APLSNAP1" | first_seq u64 | last_seq u64 | last_ts i64 | MSG records... )

Either store can restore what either store snapshotted. Chunks are bounded so a snapshot can be
streamed over the network (JetStream's snapshot API chunks it again).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator

import zstandard

from appliance import limits
from appliance.errors import CorruptData
from appliance.store import api, records

MAGIC = b"APLSNAP1"
HEAD = struct.Struct("<8sQQq")
CHUNK_BYTES = 256 * 1024


def encode(first_seq: int, last_seq: int, last_ts_ns: int, msgs: Iterable[api.StoredMsg]) -> Iterator[bytes]:
    compressor = zstandard.ZstdCompressor(level=limits.STORE_ZSTD_LEVEL).compressobj()
    pending = [HEAD.pack(MAGIC, first_seq, last_seq, last_ts_ns)]
    pending_bytes = HEAD.size
    for msg in msgs:
        record = records.encode_msg(msg.seq, msg.subject.encode(), msg.headers, msg.payload, msg.timestamp_ns)
        pending.append(record)
        pending_bytes += len(record)
        if pending_bytes >= CHUNK_BYTES:
            out = compressor.compress(b"".join(pending))
            pending, pending_bytes = [], 0
            if out:
                yield out
    out = compressor.compress(b"".join(pending)) + compressor.flush()
    if out:
        yield out


def decode(chunks: Iterable[bytes]) -> tuple[int, int, int, list[api.StoredMsg]]:
    """(first_seq, last_seq, last_ts_ns, messages) of a snapshot; CorruptData if damaged or cut short."""
    decompressor = zstandard.ZstdDecompressor().decompressobj()
    try:
        raw = b"".join(decompressor.decompress(chunk) for chunk in chunks)
    except zstandard.ZstdError as exc:
        raise CorruptData(f"snapshot does not decompress: {exc}") from exc
    if not decompressor.eof:
        raise CorruptData("snapshot is cut short")
    if len(raw) < HEAD.size or raw[:8] != MAGIC:
        raise CorruptData("not a stream snapshot")
    _, first_seq, last_seq, last_ts_ns = HEAD.unpack_from(raw)
    found, stop = records.decode_all(raw, HEAD.size)
    if stop != len(raw):
        raise CorruptData("damaged record in snapshot", offset=stop)
    msgs = [api.StoredMsg(r.seq, r.subject, r.headers, r.payload, r.timestamp_ns) for r in found]
    return first_seq, last_seq, last_ts_ns, msgs
