"""The subscription index of one account: a token trie with a bounded match cache.

Theory of operation: subscriptions are stored in a trie keyed by subject tokens, with the `*`
and `>` wildcards as separate branches of each level (nats-server's sublist shape). `match`
returns a `(plain, queues)` pair of tuples — plain subscriptions, and one tuple of members per
queue group — and caches it by subject. A cached result is immutable, so the router may iterate
it while a delivery changes the sublist. Inserting or removing a subscription drops only the
cached subjects its pattern matches.
"""

from __future__ import annotations

from typing import Any

from appliance import limits
from appliance.protocol.subjects import subject_matches

Result = tuple[tuple["Subscription", ...], tuple[tuple["Subscription", ...], ...]]
EMPTY: Result = ((), ())


class Subscription:
    """One SUB of one client (or, later, one link's interest)."""

    __slots__ = ("conn", "subject", "queue", "sid", "max_msgs", "delivered", "msg_tail", "account")

    def __init__(self, conn: Any, subject: bytes, queue: bytes | None, sid: bytes, account: str = "") -> None:
        self.conn = conn
        self.subject = subject
        self.queue = queue
        self.sid = sid
        self.max_msgs = 0  # 0: no auto-unsubscribe
        self.delivered = 0
        self.msg_tail = b" " + sid + b" "  # what follows the subject in MSG/HMSG
        self.account = account


class _Node:
    __slots__ = ("level", "plain", "queues")

    def __init__(self) -> None:
        self.level: _Level | None = None
        self.plain: dict[Subscription, None] = {}  # insertion-ordered set
        self.queues: dict[bytes, dict[Subscription, None]] = {}

    def is_empty(self) -> bool:
        return not self.plain and not self.queues and (self.level is None or self.level.is_empty())


class _Level:
    __slots__ = ("nodes", "pwc", "fwc")

    def __init__(self) -> None:
        self.nodes: dict[bytes, _Node] = {}
        self.pwc: _Node | None = None
        self.fwc: _Node | None = None

    def is_empty(self) -> bool:
        return not self.nodes and self.pwc is None and self.fwc is None


class Sublist:
    def __init__(self, *, cache_entries_max: int = limits.SUBJECT_CACHE_ENTRIES_MAX) -> None:
        self._root = _Level()
        self._cache: dict[bytes, Result] = {}
        self._cache_max = cache_entries_max
        self.count = 0
        self.inserts = 0
        self.removes = 0
        self.matches = 0
        self.cache_hits = 0
        # subjects under these prefixes are matched but never cached: each is used once (acks)
        self.uncached_prefixes: tuple[bytes, ...] = ()
        self._prefix_results: dict[bytes, Result] = {}  # see _match_uncached

    @property
    def cache(self) -> dict[bytes, Result]:
        """The match cache, read by the router's hot path (`cache.get(subject)`)."""
        return self._cache

    def insert(self, sub: Subscription) -> None:
        level = self._root
        node: _Node | None = None
        for token in sub.subject.split(b"."):
            if token == b"*":
                if level.pwc is None:
                    level.pwc = _Node()
                node = level.pwc
            elif token == b">":
                if level.fwc is None:
                    level.fwc = _Node()
                node = level.fwc
            else:
                node = level.nodes.get(token)
                if node is None:
                    node = level.nodes[token] = _Node()
            if node.level is None:
                node.level = _Level()
            level = node.level
        assert node is not None
        if sub.queue is None:
            node.plain[sub] = None
        else:
            node.queues.setdefault(sub.queue, {})[sub] = None
        self.count += 1
        self.inserts += 1
        self._invalidate(sub.subject)

    def remove(self, sub: Subscription) -> bool:
        path: list[tuple[_Level, bytes, _Node]] = []
        level = self._root
        for token in sub.subject.split(b"."):
            if token == b"*":
                node = level.pwc
            elif token == b">":
                node = level.fwc
            else:
                node = level.nodes.get(token)
            if node is None or node.level is None:
                return False
            path.append((level, token, node))
            level = node.level
        node = path[-1][2]
        if sub.queue is None:
            if sub not in node.plain:
                return False
            del node.plain[sub]
        else:
            members = node.queues.get(sub.queue)
            if members is None or sub not in members:
                return False
            del members[sub]
            if not members:
                del node.queues[sub.queue]
        self._prune(path)
        self.count -= 1
        self.removes += 1
        self._invalidate(sub.subject)
        return True

    def _prune(self, path: list[tuple[_Level, bytes, _Node]]) -> None:
        for level, token, node in reversed(path):
            if not node.is_empty():
                return
            if token == b"*":
                level.pwc = None
            elif token == b">":
                level.fwc = None
            else:
                del level.nodes[token]

    def _invalidate(self, pattern: bytes) -> None:
        if self._prefix_results:
            self._prefix_results.clear()  # any change may matter to a memoised prefix
        cache = self._cache
        if not cache:
            return
        if b"*" not in pattern and b">" not in pattern:
            cache.pop(pattern, None)
            return
        for subject in [s for s in cache if subject_matches(pattern, s)]:
            del cache[subject]

    def match(self, subject: bytes) -> Result:
        self.matches += 1
        cached = self._cache.get(subject)
        if cached is not None:
            self.cache_hits += 1
            return cached
        tokens = subject.split(b".")
        if self.uncached_prefixes and subject.startswith(self.uncached_prefixes):
            return self._match_uncached(tokens)
        result = self._collect_result(tokens)
        cache = self._cache
        if len(cache) >= self._cache_max:
            _evict_oldest(cache, max(1, self._cache_max // CACHE_EVICT_FRACTION))
        cache[subject] = result
        return result

    def _collect_result(self, tokens: list[bytes]) -> Result:
        plain: list[Subscription] = []
        queues: dict[bytes, list[Subscription]] = {}
        _collect(self._root, tokens, 0, plain, queues)
        if len(plain) > 1:
            plain = _one_per_link(plain)
        return (tuple(plain), tuple(tuple(m) for m in queues.values())) if plain or queues else EMPTY

    def _match_uncached(self, tokens: list[bytes]) -> Result:
        """A subject used once (an ack): not cached by itself, but when its literal path through
        the trie ends at a missing token i with no `*` branch on the way, every subject sharing
        its first i+1 tokens matches the same subscriptions (only `>` nodes on the path, the
        same ones), so the result is memoised under that prefix until the sublist changes."""
        level = self._root
        last = len(tokens) - 1
        i = 0
        while True:
            if level.pwc is not None:
                return self._collect_result(tokens)
            node = level.nodes.get(tokens[i])
            if node is None:
                break
            if i == last or node.level is None:
                return self._collect_result(tokens)
            level = node.level
            i += 1
        key = b".".join(tokens[: i + 1])
        memo = self._prefix_results
        result = memo.get(key)
        if result is None:
            result = self._collect_result(tokens)
            if len(memo) >= self._cache_max:
                memo.clear()
            memo[key] = result
        return result

    def all_subscriptions(self) -> list[Subscription]:
        found: list[Subscription] = []
        _walk(self._root, found)
        return found

    def stats(self) -> dict[str, float]:
        fanouts = [len(r[0]) + len(r[1]) for r in self._cache.values()]
        return {
            "num_subscriptions": self.count,
            "num_cache": len(self._cache),
            "num_inserts": self.inserts,
            "num_removes": self.removes,
            "num_matches": self.matches,
            "cache_hit_rate": self.cache_hits / self.matches if self.matches else 0.0,
            "max_fanout": max(fanouts, default=0),
            "avg_fanout": sum(fanouts) / len(fanouts) if fanouts else 0.0,
        }


CACHE_EVICT_FRACTION = 8  # a full cache drops its oldest 1/8 at once


def _evict_oldest(cache: dict[bytes, Result], count: int) -> None:
    """Drop the `count` oldest entries, in place (the router holds `cache.get`). One entry at a
    time would cost O(cache) per miss: a dict keeps deleted slots at its front until it resizes,
    and `next(iter(cache))` walks over them — unique subjects (ack and inbox replies) miss every
    time."""
    doomed = []
    for subject in cache:
        doomed.append(subject)
        if len(doomed) >= count:
            break
    for subject in doomed:
        del cache[subject]


def _one_per_link(plain: list[Subscription]) -> list[Subscription]:
    """A link (sibling worker, route) carries a message once for all its plain interest."""
    seen: set[int] = set()
    kept = []
    for sub in plain:
        if getattr(sub.conn, "is_link", False):
            if id(sub.conn) in seen:
                continue
            seen.add(id(sub.conn))
        kept.append(sub)
    return kept


def _add_node(node: _Node, plain: list[Subscription], queues: dict[bytes, list[Subscription]]) -> None:
    if node.plain:
        plain.extend(node.plain)
    for name, members in node.queues.items():
        queues.setdefault(name, []).extend(members)


def _collect(level: _Level, tokens: list[bytes], i: int, plain: list[Subscription],
             queues: dict[bytes, list[Subscription]]) -> None:
    last = len(tokens) - 1
    while True:
        if level.fwc is not None:
            _add_node(level.fwc, plain, queues)
        if level.pwc is not None:
            if i == last:
                _add_node(level.pwc, plain, queues)
            elif level.pwc.level is not None:
                _collect(level.pwc.level, tokens, i + 1, plain, queues)
        node = level.nodes.get(tokens[i])
        if node is None:
            return
        if i == last:
            _add_node(node, plain, queues)
            return
        if node.level is None:
            return
        level = node.level
        i += 1


def _walk(level: _Level, found: list[Subscription]) -> None:
    nodes = list(level.nodes.values())
    if level.pwc is not None:
        nodes.append(level.pwc)
    if level.fwc is not None:
        nodes.append(level.fwc)
    for node in nodes:
        found.extend(node.plain)
        for members in node.queues.values():
            found.extend(members)
        if node.level is not None:
            _walk(node.level, found)
