"""The stream backup formats, pure: S2 framing (CRC-32C, block decoding, C against Python) and
nats-server's backup archive, round trips at every split of the input and refusals of damage."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.errors import CorruptData
from appliance.store import archive, s2frame


def test_crc32c_check_value() -> None:
    assert s2frame.crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    assert s2frame.crc32c_py(b"123456789") == 0xE3069283


@given(st.binary(max_size=3000))
def test_native_crc_matches_python(data: bytes) -> None:
    assert s2frame.crc32c(data) == s2frame.crc32c_py(data)


def _literal(data: bytes) -> bytes:
    assert 0 < len(data) <= 60
    return bytes([(len(data) - 1) << 2]) + data


def test_block_decode_literals_copies_and_repeat() -> None:
    # "abcd" + copy-1(offset 4, len 8) + copy-2(offset 2, len 3) + repeat(len 4) -> 19 bytes
    block = bytes([19]) + _literal(b"abcd") + bytes([0x01 | (4 << 2), 4]) + bytes([0x02 | (2 << 2), 2, 0])
    block += bytes([0x01, 0])  # copy-1 with offset 0: S2's repeat of the last offset (2), length 4
    expected = b"abcd" + b"abcdabcd" + b"cdc" + b"dcdc"
    for decode in (s2frame.s2_decode, s2frame.s2_decode_py):
        assert decode(block) == expected


@pytest.mark.parametrize(
    "block",
    [
        b"",  # no length
        bytes([5]) + _literal(b"abc"),  # shorter than declared
        bytes([2]) + _literal(b"abc"),  # longer than declared
        bytes([8, 0x01 | (4 << 2), 4]),  # a copy before any byte
        bytes([4]) + _literal(b"ab") + bytes([0x02 | (1 << 2), 9, 0]),  # offset past the start
        bytes([0x80] * 11),  # endless varint
    ],
)
def test_block_decode_refuses_damage(block: bytes) -> None:
    for decode in (s2frame.s2_decode, s2frame.s2_decode_py):
        with pytest.raises(ValueError):
            decode(block)


@settings(max_examples=50)
@given(st.lists(st.binary(max_size=70_000), max_size=4), st.integers(min_value=1, max_value=9000))
def test_frames_round_trip_at_any_split(parts: list[bytes], step: int) -> None:
    framed = b"".join(s2frame.frame(part, first=i == 0) for i, part in enumerate(parts or [b""]))
    reader = s2frame.FrameReader()
    out = b"".join(reader.feed(framed[i : i + step]) for i in range(0, len(framed), step))
    reader.finish()
    assert out == b"".join(parts)


def test_frames_refuse_damage() -> None:
    framed = s2frame.frame(b"hello backup" * 100, first=True)
    flipped = bytearray(framed)
    flipped[-5] ^= 0xFF
    with pytest.raises(CorruptData, match="checksum"):
        s2frame.FrameReader().feed(bytes(flipped))
    with pytest.raises(CorruptData, match="stream identifier"):
        s2frame.FrameReader().feed(framed[10:])
    reader = s2frame.FrameReader()
    reader.feed(framed[:-3])
    with pytest.raises(CorruptData, match="cut short"):
        reader.finish()


entries = st.lists(
    st.tuples(
        st.text(max_size=40).filter(bool),
        st.integers(min_value=-(2**63), max_value=2**63 - 1),
        st.integers(min_value=1, max_value=2**64 - 1),
        st.binary(max_size=300),
        st.binary(max_size=3000),
    ),
    max_size=20,
)


@settings(max_examples=60)
@given(entries, st.integers(min_value=1, max_value=500))
def test_archive_round_trip_at_any_split(items: list[tuple[str, int, int, bytes, bytes]], step: int) -> None:
    data = archive.MAGIC + b"".join(archive.entry(*item) for item in items) + archive.END
    reader = archive.ArchiveReader()
    got = [e for i in range(0, len(data), step) for e in reader.feed(data[i : i + step])]
    reader.finish()
    assert [(e.name, e.timestamp, e.seq, e.headers, e.payload) for e in got[:-1]] == items
    assert got[-1].is_end


def test_archive_refuses_damage() -> None:
    with pytest.raises(CorruptData, match="NATSARC1"):
        archive.ArchiveReader().feed(b"NOTANARC" + archive.END)
    reader = archive.ArchiveReader()
    reader.feed(archive.MAGIC + archive.entry("a", 1, 1, b"", b"x"))
    with pytest.raises(CorruptData, match="truncated"):
        reader.finish()
    with pytest.raises(CorruptData, match="after the end"):
        archive.ArchiveReader().feed(archive.MAGIC + archive.END + archive.entry("a", 1, 1, b"", b"x"))
    huge = archive.MAGIC + bytes([1, 2, 2]) + bytes([0]) + bytes([0xFF, 0xFF, 0xFF, 0xFF, 0x7F])
    with pytest.raises(CorruptData, match="larger"):
        archive.ArchiveReader().feed(huge)


@pytest.mark.skipif(s2frame.s2_encode is None, reason="compression needs the C extension")
@settings(max_examples=80)
@given(st.one_of(st.binary(max_size=65536), st.lists(st.sampled_from([b"abc", b"hello ", b"\x00" * 9, b"xyzzy"]), max_size=4000).map(b"".join)))
def test_block_encode_round_trips(data: bytes) -> None:
    data = data[:65536]
    assert s2frame.s2_encode is not None
    block = s2frame.s2_encode(data)
    assert s2frame.s2_decode(block) == data
    assert s2frame.s2_decode_py(block) == data


@pytest.mark.skipif(s2frame.s2_encode is None, reason="compression needs the C extension")
def test_frames_compress_what_shrinks() -> None:
    framed = s2frame.frame(b'{"order": 1, "status": "new"} ' * 5000, first=True)
    assert framed[len(s2frame.MAGIC_CHUNK)] == s2frame.CHUNK_COMPRESSED
    assert len(framed) < 20_000
    reader = s2frame.FrameReader()
    assert reader.feed(framed) == b'{"order": 1, "status": "new"} ' * 5000


@settings(max_examples=60)
@given(entries, st.binary(max_size=40))
def test_native_archive_parser_matches_python(items: list[tuple[str, int, int, bytes, bytes]], tail: bytes) -> None:
    from appliance.store.s2frame import NATIVE

    data = b"".join(archive.entry(*item) for item in items) + tail
    expected: object
    try:
        expected = archive.archive_entries_py(data, 0, archive.NAME_BYTES_MAX, archive.ENTRY_BYTES_MAX)
    except ValueError as exc:
        expected = str(exc)
    if NATIVE is None:
        return
    try:
        got: object = NATIVE.archive_entries(data, 0, archive.NAME_BYTES_MAX, archive.ENTRY_BYTES_MAX)
    except ValueError as exc:
        got = str(exc)
    assert got == expected
