"""The few StreamStore reads JetStream needs that the StreamStore contract does not name.

Both stores keep a StreamIndex; counting live sequences from it avoids loading payloads. A store
without one (a future implementation) falls back to the contract's scan.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from appliance.store import api
from appliance.store.index import StreamIndex


def _index(store: api.StreamStore) -> StreamIndex | None:
    index = getattr(store, "_index", None)
    return index if isinstance(index, StreamIndex) else None


def live_seqs(store: api.StreamStore, start_seq: int, filter_subject: str = ">") -> Iterator[int]:
    index = _index(store)
    if index is not None:
        return index.live_seqs(max(start_seq, 1), filter_subject)
    return (msg.seq for msg in store.scan(max(start_seq, 1), filter_subject))


def count_live(store: api.StreamStore, start_seq: int, filters: Sequence[str]) -> int:
    """How many live messages at or after start_seq match any of the filters (all when empty)."""
    if not filters:
        filters = [">"]
    index = _index(store)
    if index is not None and len(filters) == 1 and filters[0] == ">":
        if start_seq <= index.first_seq:
            return index.msgs
        return index.live_count_from(start_seq)
    seen: set[int] = set()
    total = 0
    for subject in filters:
        for seq in live_seqs(store, start_seq, subject):
            if len(filters) == 1:
                total += 1
            elif seq not in seen:
                seen.add(seq)
                total += 1
    return total


def first_seq_at_or_after_time(store: api.StreamStore, time_ns: int) -> int:
    """The first live sequence stored at or after time_ns (0 if none)."""
    index = _index(store)
    if index is None:
        for msg in store.scan(1):
            if msg.timestamp_ns >= time_ns:
                return msg.seq
        return 0
    for seq in index.live_seqs(max(index.first_seq, 1)):
        if index.ts_of(seq) >= time_ns:
            return seq
    return 0


def seq_from_time(store: api.StreamStore, time_ns: int) -> int:
    """nats-server's GetSeqFromTime: the first sequence stored at or after time_ns, or one past
    the last sequence when none is."""
    found = first_seq_at_or_after_time(store, time_ns)
    return found if found else last_seq(store) + 1


def last_seq(store: api.StreamStore) -> int:
    index = _index(store)
    return index.last_seq if index is not None else store.state().last_seq


def last_seq_of_subject(store: api.StreamStore, subject: str) -> int:
    """The sequence of the last live message on a literal subject (0: none)."""
    index = _index(store)
    if index is not None:
        return index.last_live(subject) or 0
    msg = store.load_last(subject)
    return msg.seq if msg is not None else 0


def subject_of(store: api.StreamStore, seq: int) -> str | None:
    index = _index(store)
    if index is not None:
        return index.subject_of(seq) if index.is_live(seq) else None
    msg = store.load(seq)
    return msg.subject if msg is not None else None


def stored_msgs(store: api.StreamStore) -> int:
    """The stream's live message count (state().msgs), without building a state."""
    index = _index(store)
    return index.msgs if index is not None else store.state().msgs


def stored_bytes(store: api.StreamStore) -> int:
    """The stream's bytes as nats-server counts them (state().bytes), without building a state."""
    index = _index(store)
    return index.bytes if index is not None else store.state().bytes
