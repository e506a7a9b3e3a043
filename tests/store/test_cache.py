"""The cache of decoded blocks: bounded in bytes, least recently used out, random reads served from it."""

from __future__ import annotations

import random

from appliance.store.cache import BlockCache, CachedBlock
from appliance.store.filestore import FileStoreConfig, FileStreamStore
from appliance.store.layout import SealedSegment
from appliance.testing.faultfs import FaultFS


def test_least_recently_used_blocks_leave_first_and_the_budget_holds() -> None:
    cache = BlockCache(300)
    for n in range(3):
        cache.put(("a", n), CachedBlock(b"x" * 100))
    assert cache.get(("a", 0)) is not None  # now the most recent
    cache.put(("a", 3), CachedBlock(b"y" * 100))
    assert cache.get(("a", 1)) is None and cache.get(("a", 0)) is not None
    assert cache.bytes == 300 and len(cache) == 3


def test_an_index_counts_against_the_budget_and_a_block_larger_than_it_is_not_kept() -> None:
    cache = BlockCache(250)
    first, second = CachedBlock(b"x" * 100), CachedBlock(b"y" * 100)
    cache.put(("a", 0), first)
    cache.put(("a", 1), second)
    cache.set_index(("a", 1), second, b"i" * 60)
    assert cache.bytes == 160 and cache.get(("a", 0)) is None, "the oldest block made room for the index"
    cache.put(("a", 2), CachedBlock(b"z" * 251))
    assert cache.get(("a", 2)) is None and cache.bytes == 160
    cache.drop_file("a")
    assert cache.bytes == 0 and len(cache) == 0


def test_random_reads_through_a_small_cache_return_every_message() -> None:
    config = FileStoreConfig("/c", segment_bytes=4096, block_raw_bytes=512, block_cache_bytes=2048)
    store = FileStreamStore(config, ops=FaultFS())
    payloads = {store.store_msg(f"s.{i % 5}", b"h" * (i % 3), b"p%05d" % i * 3, i): b"p%05d" % i * 3 for i in range(600)}
    assert sum(isinstance(s, SealedSegment) for s in store.segments()) > 5
    rng = random.Random(11)
    for seq in [rng.randint(1, 600) for _ in range(2000)]:
        msg = store.load(seq)
        assert msg is not None and msg.payload == payloads[seq] and msg.subject == f"s.{(seq - 1) % 5}"
    cache = store.block_cache
    assert cache.bytes <= 2048 and cache.hits and cache.misses


def test_a_scan_does_not_push_random_readers_blocks_out() -> None:
    config = FileStoreConfig("/c", segment_bytes=4096, block_raw_bytes=512, block_cache_bytes=2048)
    store = FileStreamStore(config, ops=FaultFS())
    for i in range(600):
        store.store_msg("s", b"", b"p%05d" % i * 3, i)
    assert store.load(1) is not None
    before = len(store.block_cache)
    assert len(list(store.scan())) == 600
    misses = store.block_cache.misses
    assert store.load(2) is not None
    assert len(store.block_cache) == before and store.block_cache.misses == misses


def test_loads_from_the_active_segment_see_appends_and_erasures_after_a_read_ahead() -> None:
    store = FileStreamStore(FileStoreConfig("/c"), ops=FaultFS())
    for i in range(1, 6):
        store.store_msg("s", b"", b"m%d" % i, i)
    assert store.load(1) is not None  # reads ahead past message 5
    store.store_msg("s", b"", b"m6", 6)
    assert [m.payload for m in map(store.load, range(1, 7)) if m is not None] == [b"m%d" % i for i in range(1, 7)]
    store.delete(3, erase=True)  # rewrites the active file
    assert store.load(3) is None
    assert [m.payload for m in map(store.load, (1, 2, 4, 5, 6)) if m is not None] == [b"m1", b"m2", b"m4", b"m5", b"m6"]
    big = b"x" * 200_000  # larger than one read-ahead
    seq = store.store_msg("s", b"", big, 7)
    assert store.load(6) is not None
    loaded = store.load(seq)
    assert loaded is not None and loaded.payload == big
