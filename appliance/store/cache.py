"""BlockCache: decoded sealed blocks, least recently used first out, bounded in bytes.

A random read of a sealed segment needs its whole block decompressed (blocks are the unit of
compression); the cache keeps the raw records of recently read blocks, with a (seq, offset)
index built on the first random read of a block, so the next read of a neighbour is a binary
search and one record decode. Sequential reads (scan.py) decode each block once and use no index.
Bounded by STORE_BLOCK_CACHE_BYTES of raw block and index bytes per store; a block bigger than
the budget is still returned, just not kept.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from appliance import limits

Key = tuple[str, int]  # (segment path, block offset in the file)


@dataclass(slots=True)
class CachedBlock:
    raw: bytes  # the block's records, checksums verified when it was decoded
    index: bytes | None = None  # speedups.msg_index(raw), built on the first random read

    @property
    def cost(self) -> int:
        return len(self.raw) + (len(self.index) if self.index is not None else 0)


class BlockCache:
    def __init__(self, budget_bytes: int = limits.STORE_BLOCK_CACHE_BYTES) -> None:
        self.budget_bytes = budget_bytes
        self._blocks: OrderedDict[Key, CachedBlock] = OrderedDict()
        self.bytes = 0
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._blocks)

    def get(self, key: Key) -> CachedBlock | None:
        block = self._blocks.get(key)
        if block is None:
            self.misses += 1
            return None
        self.hits += 1
        self._blocks.move_to_end(key)
        return block

    def put(self, key: Key, block: CachedBlock) -> None:
        old = self._blocks.pop(key, None)
        if old is not None:
            self.bytes -= old.cost
        if block.cost > self.budget_bytes:
            return
        self._blocks[key] = block
        self.bytes += block.cost
        self._evict()

    def set_index(self, key: Key, block: CachedBlock, index: bytes) -> None:
        """Attach a block's index, counting its bytes (the block may have left the cache meanwhile)."""
        block.index = index
        if self._blocks.get(key) is block:
            self.bytes += len(index)
            self._evict()

    def _evict(self) -> None:
        while self.bytes > self.budget_bytes:
            _, evicted = self._blocks.popitem(last=False)
            self.bytes -= evicted.cost

    def drop_file(self, path: str) -> None:
        """Forget every block of a segment that was removed or rewritten."""
        for key in [k for k in self._blocks if k[0] == path]:
            self.bytes -= self._blocks.pop(key).cost
