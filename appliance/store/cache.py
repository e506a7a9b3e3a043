"""BlockCache: decoded sealed blocks, least recently used first out, bounded in bytes.

A random read of a sealed segment needs its whole block decompressed (blocks are the unit of
compression); the cache keeps the raw records of recently read blocks so the next read of a
neighbour costs one record decode. Bounded by STORE_BLOCK_CACHE_BYTES of raw block bytes per
store; one block bigger than the budget is still returned, just not kept.
"""

from __future__ import annotations

from collections import OrderedDict

from appliance import limits

Key = tuple[str, int]  # (segment path, block offset in the file)


class BlockCache:
    def __init__(self, budget_bytes: int = limits.STORE_BLOCK_CACHE_BYTES) -> None:
        self.budget_bytes = budget_bytes
        self._blocks: OrderedDict[Key, bytes] = OrderedDict()
        self.bytes = 0
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._blocks)

    def get(self, key: Key) -> bytes | None:
        raw = self._blocks.get(key)
        if raw is None:
            self.misses += 1
            return None
        self.hits += 1
        self._blocks.move_to_end(key)
        return raw

    def put(self, key: Key, raw: bytes) -> None:
        if len(raw) > self.budget_bytes:
            return
        old = self._blocks.pop(key, None)
        if old is not None:
            self.bytes -= len(old)
        self._blocks[key] = raw
        self.bytes += len(raw)
        while self.bytes > self.budget_bytes:
            _, evicted = self._blocks.popitem(last=False)
            self.bytes -= len(evicted)

    def drop_file(self, path: str) -> None:
        """Forget every block of a segment that was removed or rewritten."""
        for key in [k for k in self._blocks if k[0] == path]:
            self.bytes -= len(self._blocks.pop(key))
