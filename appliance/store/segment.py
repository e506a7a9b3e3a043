"""Segment file formats (version 1), pure encode/decode. A golden test pins the byte layout.

Active segment (append-only, uncompressed):

    file header (32 B) = magic "APLSEGW\\0" | version u16 | flags u16 | first_seq u64 | 0 u64 | crc u32
    records...           (records.py framing; each record carries its own checksum)

Sealed segment (immutable, written to a temporary name, fsynced, renamed into place):

    file header (32 B) = magic "APLSEGZ\\0" | version u16 | flags u16 | first_seq u64 | dict_id u32
                         | 0 u32 | crc u32                      (flags bit 0: blocks use a dictionary)
    blocks...            = block header (56 B) | zstd frame of whole records (compressed, or
                           for a stream with `compression: none` a frame of raw zstd blocks:
                           the records verbatim, read by any zstd decoder)
        block header     = magic u32 | first_seq u64 | last_seq u64 | ts_min i64 | ts_max i64
                           | msg_count u32 | raw_len u32 | comp_len u32 | data_crc u32 | header_crc u32
    footer index         = one 48 B entry per block: offset u64 | first_seq u64 | last_seq u64
                           | ts_min i64 | ts_max i64 | msg_count u32 | comp_len u32
    trailer (32 B)       = index_offset u64 | block_count u32 | index_crc u32 | 0 u32
                           | trailer_crc u32 | magic "APLSEGE\\0"

first/last seq and ts min/max describe the MSG records of a block (all zero when it holds only
DELETE/FIRST records). Every byte of a sealed file is covered by a checksum or a magic, so any
flipped bit is detected. Each block decodes alone; the footer lets a reader find a sequence or a
time range without decompressing anything, and the block headers rebuild the footer if it is lost.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import zstandard

from appliance import limits
from appliance.errors import CorruptData
from appliance.store import records

VERSION = 1
ACTIVE_MAGIC = b"APLSEGW\x00"
SEALED_MAGIC = b"APLSEGZ\x00"
TRAILER_MAGIC = b"APLSEGE\x00"
BLOCK_MAGIC = 0xB10C5E61
FLAG_DICTIONARY = 1

ACTIVE_HEADER = struct.Struct("<8sHHQQI")
SEALED_HEADER = struct.Struct("<8sHHQIII")
BLOCK_HEADER = struct.Struct("<IQQqqIIIII")
INDEX_ENTRY = struct.Struct("<QQQqqII")
TRAILER = struct.Struct("<QIIII8s")
assert ACTIVE_HEADER.size == SEALED_HEADER.size == TRAILER.size == 32
assert BLOCK_HEADER.size == 56 and INDEX_ENTRY.size == 48
HEADER_BYTES = 32


@dataclass(frozen=True, slots=True)
class BlockInfo:
    offset: int  # of the block header in the file
    first_seq: int
    last_seq: int
    ts_min: int
    ts_max: int
    msg_count: int
    comp_len: int

    @property
    def data_offset(self) -> int:
        return self.offset + BLOCK_HEADER.size


def segment_name(first_seq: int) -> str:
    return f"{first_seq:020d}.seg"


def first_of(name: str) -> int:
    """The first sequence a segment file's name says it may hold (0: not a segment name)."""
    try:
        return int(name.removesuffix(".seg"))
    except ValueError:
        return 0


def _crc_tail(packed: bytes) -> bytes:
    return packed + struct.pack("<I", zlib.crc32(packed))


def encode_active_header(first_seq: int) -> bytes:
    return _crc_tail(ACTIVE_HEADER.pack(ACTIVE_MAGIC, VERSION, 0, first_seq, 0, 0)[:-4])


def encode_sealed_header(first_seq: int, dict_id: int) -> bytes:
    flags = FLAG_DICTIONARY if dict_id else 0
    return _crc_tail(SEALED_HEADER.pack(SEALED_MAGIC, VERSION, flags, first_seq, dict_id, 0, 0)[:-4])


@dataclass(frozen=True, slots=True)
class FileHeader:
    sealed: bool
    first_seq: int
    dict_id: int


def decode_header(data: bytes, path: str = "") -> FileHeader:
    if len(data) < HEADER_BYTES:
        raise CorruptData("short segment header", path=path, offset=0)
    if zlib.crc32(data[: HEADER_BYTES - 4]) != int.from_bytes(data[HEADER_BYTES - 4 : HEADER_BYTES], "little"):
        raise CorruptData("segment header checksum mismatch", path=path, offset=0)
    magic = data[:8]
    if magic == ACTIVE_MAGIC:
        _, version, _flags, first_seq, _, _ = ACTIVE_HEADER.unpack_from(data)
        dict_id = 0
    elif magic == SEALED_MAGIC:
        _, version, _flags, first_seq, dict_id, _, _ = SEALED_HEADER.unpack_from(data)
    else:
        raise CorruptData(f"unknown segment magic {magic!r}", path=path, offset=0)
    if version != VERSION:
        raise CorruptData(f"unsupported segment version {version}", path=path, offset=0)
    return FileHeader(magic == SEALED_MAGIC, first_seq, dict_id)


# --- sealing ----------------------------------------------------------------------------------------


def split_blocks(frames: list[records.Frame], block_raw_bytes: int) -> list[list[records.Frame]]:
    """Group records into blocks of at most block_raw_bytes raw bytes (a bigger record alone)."""
    blocks: list[list[records.Frame]] = []
    current: list[records.Frame] = []
    current_bytes = 0
    for frame in frames:
        size = frame[1] - frame[0]
        if current and current_bytes + size > block_raw_bytes:
            blocks.append(current)
            current, current_bytes = [], 0
        current.append(frame)
        current_bytes += size
    if current:
        blocks.append(current)
    return blocks


# A block to write: its raw records and (first_seq, last_seq, ts_min, ts_max, msg_count) of its MSGs.
BlockMeta = tuple[int, int, int, int, int]
# A block as a contiguous byte range of a buffer: (begin, end, *BlockMeta); see plan_blocks.
BlockPlan = tuple[int, int, int, int, int, int, int]


def block_meta(group: list[records.Frame]) -> BlockMeta:
    msgs = [f for f in group if f[2] == records.Kind.MSG]
    if not msgs:
        return (0, 0, 0, 0, 0)
    times = [f[4] for f in msgs]
    return (msgs[0][3], msgs[-1][3], min(times), max(times), len(msgs))


def plan_blocks(buf: bytes | memoryview, start: int, block_raw_bytes: int) -> tuple[list[BlockPlan], int]:
    """Blocks over every whole valid record from start, as contiguous ranges (twin of the C one)."""
    frames, stop = records.scan_frames(buf, start)
    plans = [(g[0][0], g[-1][1], *block_meta(g)) for g in split_blocks(frames, block_raw_bytes)]
    return plans, stop


def encode_sealed(
    first_seq: int,
    frames: list[records.Frame],
    raw: bytes | memoryview,
    *,
    zdict: zstandard.ZstdCompressionDict | None,
    block_raw_bytes: int = limits.STORE_BLOCK_RAW_BYTES,
    level: int | None = limits.STORE_SEAL_ZSTD_LEVEL,
) -> bytes:
    """A whole sealed segment holding the records `frames` point at in `raw` (chosen by the caller);
    level None stores the blocks uncompressed."""
    blocks = (
        (b"".join([raw[offset:end] for offset, end, _kind, _seq, _ts in group]), block_meta(group))
        for group in split_blocks(frames, block_raw_bytes)
    )
    return assemble_sealed(first_seq, blocks, zdict=zdict, level=level)


def encode_sealed_plan(
    first_seq: int,
    raw: bytes,
    plans: list[BlockPlan],
    *,
    zdict: zstandard.ZstdCompressionDict | None,
    level: int | None = limits.STORE_SEAL_ZSTD_LEVEL,
) -> bytes:
    """A whole sealed segment whose blocks are contiguous ranges of raw (the fast path)."""
    blocks = ((raw[p[0] : p[1]], (p[2], p[3], p[4], p[5], p[6])) for p in plans)
    return assemble_sealed(first_seq, blocks, zdict=zdict, level=level)


def assemble_sealed(
    first_seq: int,
    blocks: Iterable[tuple[bytes, BlockMeta]],
    *,
    zdict: zstandard.ZstdCompressionDict | None,
    level: int | None,
) -> bytes:
    compress: Callable[[bytes], bytes]
    if level is None:
        compress, zdict = stored_frame, None
    else:
        compressor = zstandard.ZstdCompressor(
            level=level, dict_data=zdict, write_content_size=True, write_dict_id=False
        )
        compress = compressor.compress
    parts = [encode_sealed_header(first_seq, zdict.dict_id() if zdict is not None else 0)]
    offset = HEADER_BYTES
    index: list[bytes] = []
    for data, (first, last, ts_min, ts_max, count) in blocks:
        compressed = compress(data)
        head = BLOCK_HEADER.pack(
            BLOCK_MAGIC, first, last, ts_min, ts_max, count, len(data), len(compressed), zlib.crc32(compressed), 0
        )[:-4]
        parts.append(_crc_tail(head) + compressed)
        index.append(INDEX_ENTRY.pack(offset, first, last, ts_min, ts_max, count, len(compressed)))
        offset += BLOCK_HEADER.size + len(compressed)
    index_bytes = b"".join(index)
    parts.append(index_bytes)
    trailer_head = struct.pack("<QIII", offset, len(index), zlib.crc32(index_bytes), 0)
    parts.append(trailer_head + struct.pack("<I", zlib.crc32(trailer_head)) + TRAILER_MAGIC)
    return b"".join(parts)


ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
STORED_FRAME_DESCRIPTOR = 0xE0  # an 8-byte content size, single segment, no checksum, no dictionary
ZSTD_RAW_BLOCK_MAX = 128 * 1024


def stored_frame(data: bytes) -> bytes:
    """`data` as a zstd frame of raw (uncompressed) blocks (RFC 8878 §3.1.1): stored verbatim,
    decoded by any zstd decoder (a copy), so a sealed file needs no second block format."""
    parts = [ZSTD_MAGIC, bytes([STORED_FRAME_DESCRIPTOR]), struct.pack("<Q", len(data))]
    view = memoryview(data)
    start = 0
    while True:
        chunk = view[start : start + ZSTD_RAW_BLOCK_MAX]
        start += len(chunk)
        last = start >= len(data)
        parts.append((len(chunk) << 3 | int(last)).to_bytes(3, "little"))  # block type 0: raw
        parts.append(bytes(chunk))
        if last:
            return b"".join(parts)


def with_footer(head_and_blocks: bytes, blocks: list[BlockInfo]) -> bytes:
    """A sealed segment's header and blocks with a fresh footer index and trailer (repair)."""
    index_bytes = b"".join(
        INDEX_ENTRY.pack(b.offset, b.first_seq, b.last_seq, b.ts_min, b.ts_max, b.msg_count, b.comp_len) for b in blocks
    )
    trailer_head = struct.pack("<QIII", len(head_and_blocks), len(blocks), zlib.crc32(index_bytes), 0)
    return head_and_blocks + index_bytes + trailer_head + struct.pack("<I", zlib.crc32(trailer_head)) + TRAILER_MAGIC


# --- reading sealed segments ------------------------------------------------------------------------


def read_footer(data: bytes, path: str = "") -> tuple[list[BlockInfo], int]:
    """The block table from the footer and where the index starts; CorruptData if damaged."""
    if len(data) < 2 * HEADER_BYTES:
        raise CorruptData("sealed segment too short for a trailer", path=path, offset=len(data))
    trailer_at = len(data) - TRAILER.size
    index_offset, count, index_crc, _zero, trailer_crc, magic = TRAILER.unpack_from(data, trailer_at)
    if magic != TRAILER_MAGIC or zlib.crc32(data[trailer_at : trailer_at + 20]) != trailer_crc:
        raise CorruptData("segment trailer damaged", path=path, offset=trailer_at)
    index_end = index_offset + count * INDEX_ENTRY.size
    if index_end != trailer_at or index_offset < HEADER_BYTES:
        raise CorruptData("segment footer index out of place", path=path, offset=trailer_at)
    if zlib.crc32(data[index_offset:index_end]) != index_crc:
        raise CorruptData("segment footer index checksum mismatch", path=path, offset=index_offset)
    blocks = []
    for i in range(count):
        offset, first, last, ts_min, ts_max, msg_count, comp_len = INDEX_ENTRY.unpack_from(
            data, index_offset + i * INDEX_ENTRY.size
        )
        blocks.append(BlockInfo(offset, first, last, ts_min, ts_max, msg_count, comp_len))
    return blocks, index_offset


def trailer_index_offset(data: bytes) -> int | None:
    """Where the footer index starts, if the trailer itself is intact (the index may not be)."""
    if len(data) < 2 * HEADER_BYTES:
        return None
    trailer_at = len(data) - TRAILER.size
    index_offset, count, _index_crc, _zero, trailer_crc, magic = TRAILER.unpack_from(data, trailer_at)
    if magic != TRAILER_MAGIC or zlib.crc32(data[trailer_at : trailer_at + 20]) != trailer_crc:
        return None
    if index_offset + count * INDEX_ENTRY.size != trailer_at:
        return None
    return int(index_offset)


def walk_blocks(data: bytes, path: str = "", end: int = -1) -> tuple[list[BlockInfo], list[CorruptData]]:
    """Rebuild the block table from block headers alone, up to `end` (default: the trailer)."""
    found: list[BlockInfo] = []
    problems: list[CorruptData] = []
    offset = HEADER_BYTES
    limit = len(data) - TRAILER.size if end < 0 else end
    while offset + BLOCK_HEADER.size <= limit:
        info = _block_header_at(data, offset)
        if info is None:
            problems.append(CorruptData("block header damaged", path=path, offset=offset))
            nxt = data.find(BLOCK_MAGIC.to_bytes(4, "little"), offset + 1, limit)
            if nxt < 0:
                break
            offset = nxt
            continue
        found.append(info)
        offset = info.data_offset + info.comp_len
    return found, problems


def _block_header_at(data: bytes, offset: int) -> BlockInfo | None:
    if offset + BLOCK_HEADER.size > len(data):
        return None
    fields = BLOCK_HEADER.unpack_from(data, offset)
    if fields[0] != BLOCK_MAGIC or zlib.crc32(data[offset : offset + BLOCK_HEADER.size - 4]) != fields[9]:
        return None
    return BlockInfo(offset, fields[1], fields[2], fields[3], fields[4], fields[5], fields[7])


def decode_block(
    data: bytes | memoryview,
    info: BlockInfo,
    *,
    zdict: zstandard.ZstdCompressionDict | None,
    path: str = "",
) -> bytes:
    """The raw records of one block, after checking its header against `info` and its checksums."""
    header = _block_header_at(bytes(data[info.offset : info.offset + BLOCK_HEADER.size]), 0)
    if header is None or header != BlockInfo(0, *_fields_after_offset(info)):
        raise CorruptData("block header damaged or disagrees with the index", path=path, offset=info.offset)
    compressed = bytes(data[info.data_offset : info.data_offset + info.comp_len])
    fields = BLOCK_HEADER.unpack_from(bytes(data[info.offset : info.offset + BLOCK_HEADER.size]))
    if len(compressed) != info.comp_len or zlib.crc32(compressed) != fields[8]:
        raise CorruptData("block checksum mismatch", path=path, offset=info.offset)
    try:
        decompressor = zstandard.ZstdDecompressor(dict_data=zdict) if zdict else zstandard.ZstdDecompressor()
        raw = decompressor.decompress(compressed, max_output_size=fields[6])
    except zstandard.ZstdError as exc:
        raise CorruptData(f"block does not decompress: {exc}", path=path, offset=info.offset) from exc
    if len(raw) != fields[6]:
        raise CorruptData("block raw length mismatch", path=path, offset=info.offset)
    return raw


def _fields_after_offset(info: BlockInfo) -> tuple[int, int, int, int, int, int]:
    return (info.first_seq, info.last_seq, info.ts_min, info.ts_max, info.msg_count, info.comp_len)


def verify_sealed(data: bytes, *, zdict: zstandard.ZstdCompressionDict | None, path: str = "") -> list[CorruptData]:
    """Every problem in a sealed segment: header, trailer, index, each block and each record."""
    problems: list[CorruptData] = []
    try:
        header = decode_header(data, path)
        if not header.sealed:
            problems.append(CorruptData("not a sealed segment", path=path, offset=0))
    except CorruptData as exc:
        problems.append(exc)
    try:
        blocks, index_offset = read_footer(data, path)
        walked, _ = walk_blocks(data, path, index_offset)
        if walked != blocks:
            problems.append(CorruptData("footer index disagrees with block headers", path=path, offset=HEADER_BYTES))
    except CorruptData as exc:
        problems.append(exc)
        blocks, walk_problems = walk_blocks(data, path, trailer_index_offset(data) or -1)
        problems.extend(walk_problems)
    for info in blocks:
        try:
            raw = decode_block(data, info, zdict=zdict, path=path)
        except CorruptData as exc:
            problems.append(exc)
            continue
        _frames, stop = records.scan_frames(raw)
        if stop != len(raw):
            problems.append(CorruptData("damaged record inside block", path=path, offset=info.offset))
    return problems
