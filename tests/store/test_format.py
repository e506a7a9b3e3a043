"""Segment format v1: the golden byte layout, round trips, and every flipped bit detected."""

from __future__ import annotations

import struct
import zlib

import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.store import records, segment
from appliance.store.filestore import FileStoreConfig, FileStreamStore
from appliance.store.layout import SealedSegment
from appliance.testing.faultfs import FaultFS


def test_golden_record_layout() -> None:
    record = records.encode_msg(7, b"a.b", b"H", b"xyz", 0x0102030405060708)
    body = bytes.fromhex(
        "01"  # kind MSG
        "0700000000000000"  # seq 7
        "0807060504030201"  # timestamp ns
        "0300"  # subject length
        "01000000"  # headers length
        "03000000"  # payload length
    ) + b"a.b" + b"H" + b"xyz"
    assert record == struct.pack("<II", len(body), zlib.crc32(body, len(body))) + body
    first_body = records.BODY_HEAD.pack(3, 9, 77, 0, 0, 0)  # FIRST, seq 9, stream last ts 77
    assert records.encode_first(9, 77) == struct.pack("<II", 27, zlib.crc32(first_body, 27)) + first_body
    delete = records.decode_at(records.encode_delete([(2, 4), (9, 9)]), 0)
    assert (delete.kind, delete.seq, delete.ranges()) == (records.Kind.DELETE, 9, [(2, 4), (9, 9)])


def test_golden_file_headers() -> None:
    active = segment.encode_active_header(42)
    assert active[:28] == b"APLSEGW\x00" + b"\x01\x00" + b"\x00\x00" + (42).to_bytes(8, "little") + bytes(8)
    assert active[28:] == zlib.crc32(active[:28]).to_bytes(4, "little")
    sealed = segment.encode_sealed_header(42, 0xABCDEF)
    assert sealed[:28] == (
        b"APLSEGZ\x00" + b"\x01\x00" + b"\x01\x00" + (42).to_bytes(8, "little") + (0xABCDEF).to_bytes(4, "little") + bytes(4)
    )
    assert sealed[28:] == zlib.crc32(sealed[:28]).to_bytes(4, "little")


def sealed_bytes(count: int = 12, block_raw_bytes: int = 200) -> tuple[bytes, list[records.Frame]]:
    raw = b"".join(records.encode_msg(10 + i, b"s.%d" % (i % 2), b"", b"v%02d" % i * 4, 1000 + 10 * i) for i in range(count))
    raw += records.encode_delete([(11, 11)])
    frames, stop = records.scan_frames(raw)
    assert stop == len(raw)
    return segment.encode_sealed(10, frames, raw, zdict=None, block_raw_bytes=block_raw_bytes), frames


def test_golden_sealed_layout_blocks_footer_and_trailer() -> None:
    data, found = sealed_bytes()
    assert segment.decode_header(data) == segment.FileHeader(True, 10, 0)
    trailer = data[-32:]
    index_offset, count, index_crc, zero, trailer_crc = struct.unpack_from("<QIIII", trailer)
    assert trailer[24:] == b"APLSEGE\x00" and zero == 0
    assert trailer_crc == zlib.crc32(trailer[:20])
    assert index_offset + 48 * count == len(data) - 32
    assert index_crc == zlib.crc32(data[index_offset : index_offset + 48 * count])
    blocks, _ = segment.read_footer(data)
    assert len(blocks) == count >= 3
    assert blocks[0].offset == 32
    raw_again = b""
    for info in blocks:
        magic, first, last, ts_min, ts_max, msgs, raw_len, comp_len, data_crc, header_crc = struct.unpack_from(
            "<IQQqqIIIII", data, info.offset
        )
        assert magic == 0xB10C5E61 and header_crc == zlib.crc32(data[info.offset : info.offset + 52])
        compressed = data[info.offset + 56 : info.offset + 56 + comp_len]
        assert data_crc == zlib.crc32(compressed)
        raw = zstandard.ZstdDecompressor().decompress(compressed)
        assert len(raw) == raw_len
        inside = [r for r in records.decode_all(raw)[0] if r.kind == records.Kind.MSG]
        assert (first, last, msgs) == ((inside[0].seq, inside[-1].seq, len(inside)) if inside else (0, 0, 0))
        assert (ts_min, ts_max) == ((min(r.timestamp_ns for r in inside), max(r.timestamp_ns for r in inside)) if inside else (0, 0))
        raw_again += raw
    assert [r.seq for r in records.decode_all(raw_again)[0]] == [f[3] for f in found]
    assert blocks[-1].offset + 56 + blocks[-1].comp_len == index_offset


def test_the_footer_finds_a_sequence_or_a_time_without_decompressing() -> None:
    data, _ = sealed_bytes(count=30)
    blocks, _ = segment.read_footer(data)
    holding_seq_25 = [b for b in blocks if b.first_seq <= 25 <= b.last_seq]
    assert len(holding_seq_25) == 1
    in_time = [b for b in blocks if b.ts_max >= 1100 and b.ts_min <= 1150]
    assert in_time and all(b.msg_count for b in in_time)


def test_every_flipped_bit_of_a_sealed_segment_is_detected_and_never_served() -> None:
    fs = FaultFS()
    config = FileStoreConfig("/bits", segment_bytes=400, block_raw_bytes=160)
    store = FileStreamStore(config, ops=fs)
    for i in range(14):
        store.store_msg("b.%d" % (i % 2), b"", b"%02d" % i * 3, 7 + i)
    first = store.segments()[0]
    assert isinstance(first, SealedSegment) and len(first.blocks) >= 2
    truth = {m.seq: m for m in store.scan()}
    store.close()
    original = fs.read_all(first.path)
    assert segment.verify_sealed(original, zdict=None) == []
    assert 2000 < len(original) * 8 < 8000
    for bit in range(len(original) * 8):
        flipped = bytearray(original)
        flipped[bit // 8] ^= 1 << (bit % 8)
        assert segment.verify_sealed(bytes(flipped), zdict=None), f"bit {bit} not detected"
        damaged = fs.after_crash("flush")
        damaged.flip_bit(first.path, bit)
        reopened = FileStreamStore(config, ops=damaged)
        assert reopened.recovery.corrupt or reopened.recovery.repaired, f"bit {bit} not reported on open"
        for msg in reopened.scan():
            assert truth[msg.seq] == msg, f"bit {bit} served a wrong message"


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.text(min_size=1, max_size=12), st.binary(max_size=30), st.binary(max_size=300), st.integers(0, 2**62)),
        min_size=1,
        max_size=40,
    ),
    st.integers(64, 2048),
)
def test_sealed_segments_round_trip(msgs: list[tuple[str, bytes, bytes, int]], block_raw_bytes: int) -> None:
    raw = b"".join(records.encode_msg(i + 1, s.encode(), h, p, t) for i, (s, h, p, t) in enumerate(msgs))
    frames, _ = records.scan_frames(raw)
    data = segment.encode_sealed(1, frames, raw, zdict=None, block_raw_bytes=block_raw_bytes)
    plans, _ = segment.plan_blocks(raw, 0, block_raw_bytes)
    assert segment.encode_sealed_plan(1, raw, plans, zdict=None) == data, "both sealing paths write the same bytes"
    assert segment.verify_sealed(data, zdict=None) == []
    blocks, _ = segment.read_footer(data)
    decoded = [r for info in blocks for r in records.decode_all(segment.decode_block(data, info, zdict=None))[0]]
    assert [(r.seq, r.subject, r.headers, r.payload, r.timestamp_ns) for r in decoded] == [
        (i + 1, s, h, p, t) for i, (s, h, p, t) in enumerate(msgs)
    ]


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=400), st.integers(0, 400))
def test_garbage_never_decodes_as_a_record_silently(garbage: bytes, cut: int) -> None:
    record = records.encode_msg(1, b"s", b"", b"payload", 5)
    damaged = record[: min(cut, len(record))] + garbage
    try:
        decoded = records.decode_at(damaged, 0)
    except records.BadRecord:
        return
    assert zlib.crc32(damaged[8 : decoded.end], decoded.end - 8) == int.from_bytes(damaged[4:8], "little")
