"""Sealed-block compression as a stream's `compression` asks: compressed (zstd) blocks, or, for
`none`, the records stored verbatim in raw zstd blocks that every reader decodes alike."""

from __future__ import annotations

import os

import pytest
import zstandard
from hypothesis import given
from hypothesis import strategies as st

from appliance.store import segment
from appliance.store.filestore import FileStoreConfig, FileStreamStore
from appliance.store.layout import SealedSegment
from appliance.testing.faultfs import FaultFS

RAW_BLOCK = segment.ZSTD_RAW_BLOCK_MAX


@given(st.binary(max_size=3000))
def test_a_stored_frame_decodes_to_its_bytes(data: bytes) -> None:
    frame = segment.stored_frame(data)
    assert zstandard.ZstdDecompressor().decompress(frame, max_output_size=max(len(data), 1)) == data
    assert data in frame  # verbatim: one raw block below 128 KiB


@pytest.mark.parametrize("size", [0, 1, RAW_BLOCK - 1, RAW_BLOCK, RAW_BLOCK + 1, 3 * RAW_BLOCK + 7])
def test_a_stored_frame_splits_into_raw_blocks_of_at_most_128_kib(size: int) -> None:
    data = os.urandom(size)
    frame = segment.stored_frame(data)
    assert zstandard.ZstdDecompressor().decompress(frame, max_output_size=max(size, 1)) == data
    blocks = max(1, -(-size // RAW_BLOCK))
    assert len(frame) == 4 + 1 + 8 + 3 * blocks + size


def _fill(store: FileStreamStore, count: int) -> dict[int, bytes]:
    payloads = {}
    for i in range(count):
        payload = b"compressible payload %04d " % i * 8
        payloads[store.store_msg("s.%d" % (i % 3), b"", payload, i + 1)] = payload
    return payloads


def _sealed(store: FileStreamStore) -> list[bytes]:
    return [store.ops.read_all(s.path) for s in store.segments() if isinstance(s, SealedSegment)]


def _config(compress: bool) -> FileStoreConfig:
    return FileStoreConfig("/c", segment_bytes=4000, compress=compress)


@pytest.mark.parametrize("compress", [True, False])
def test_sealed_segments_are_compressed_only_when_asked(compress: bool) -> None:
    fs = FaultFS()
    store = FileStreamStore(_config(compress), ops=fs)
    payloads = _fill(store, 120)
    sealed = _sealed(store)
    assert len(sealed) >= 3
    verbatim = [b"compressible payload 0000 " * 8 in data for data in sealed[:1]]
    assert verbatim == [not compress]
    raw_bytes = sum(len(payload) for payload in payloads.values())
    sealed_bytes = sum(len(data) for data in sealed)
    if compress:
        assert sealed_bytes * 4 < raw_bytes  # repetitive payloads shrink a lot
    for data in sealed:
        assert segment.verify_sealed(data, zdict=None) == []
    assert {m.seq: m.payload for m in store.scan()} == payloads
    assert all(store.load(seq).payload == payload for seq, payload in payloads.items())  # type: ignore[union-attr]
    store.close()
    reopened = FileStreamStore(_config(compress), ops=fs)  # recovery reads both kinds
    assert {m.seq: m.payload for m in reopened.scan()} == payloads


def test_a_changed_setting_applies_to_segments_sealed_afterwards() -> None:
    store = FileStreamStore(_config(True), ops=FaultFS())
    before = _fill(store, 60)
    count = len(_sealed(store))
    store.set_compression(False)
    assert not store.compressing
    for i in range(60):
        store.store_msg("t", b"", b"after the change %04d " % i * 8, 1000 + i)
    sealed = _sealed(store)
    assert count and b"compressible payload 0000 " * 8 not in sealed[0]
    assert any(b"after the change 0000 " * 8 in data for data in sealed[count:])
    last_stored = [s for s in store.segments() if isinstance(s, SealedSegment)][-1]
    victim = last_stored.first_seq
    store.delete(victim, erase=True)  # an erase rewrites the sealed segment, still uncompressed
    assert store.load(victim) is None
    assert b"after the change" in store.ops.read_all(last_stored.path)
    assert {m.seq: m.payload for m in store.scan(1, "s.*")} == {k: v for k, v in before.items() if k != victim}
    assert len(list(store.scan(1))) == 119
