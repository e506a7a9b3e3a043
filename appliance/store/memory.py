"""MemoryStreamStore: the StreamStore contract in memory (JetStream `storage: memory`).

Messages live in a dict by sequence; `StreamIndex` owns limits and retention, exactly as for the
file store. Sizes are accounted like nats-server's memory store (memStoreMsgSize).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from appliance import limits
from appliance.errors import LimitExceeded
from appliance.store import api, snapshot
from appliance.store.index import StreamIndex


class MemoryStreamStore:
    def __init__(self, store_limits: api.StoreLimits | None = None) -> None:
        self._index = StreamIndex(store_limits or api.StoreLimits())
        self._msgs: dict[int, tuple[str, bytes, bytes, int]] = {}

    @classmethod
    def restore(cls, chunks: Iterable[bytes], store_limits: api.StoreLimits | None = None) -> MemoryStreamStore:
        store = cls(store_limits)
        first_seq, last_seq, last_ts_ns, msgs = snapshot.decode(chunks)
        for msg in msgs:
            store._index.add(msg.seq, msg.subject, store.msg_size(msg.subject, msg.headers, msg.payload), msg.timestamp_ns)
            store._msgs[msg.seq] = (msg.subject, msg.headers, msg.payload, msg.timestamp_ns)
        store._index.skip_to(first_seq)
        store._index.advance_last(last_seq)
        store._index.last_ts_ns = last_ts_ns
        return store

    def append_restored(self, msgs: list[api.StoredMsg]) -> None:
        """Messages with their own ascending sequences (gaps allowed), as a snapshot holds them."""
        for msg in msgs:
            self._index.add(msg.seq, msg.subject, self.msg_size(msg.subject, msg.headers, msg.payload), msg.timestamp_ns)
            self._msgs[msg.seq] = (msg.subject, msg.headers, msg.payload, msg.timestamp_ns)

    def finish_restore(self, last_seq: int, last_ts_ns: int) -> None:
        self._index.advance_last(last_seq)
        self._index.last_ts_ns = last_ts_ns

    def msg_size(self, subject: str, headers: bytes, payload: bytes) -> int:
        return api.memory_msg_size(subject, headers, payload)

    # --- writes -----------------------------------------------------------------------------------

    def store_msg(self, subject: str, headers: bytes, payload: bytes, timestamp_ns: int) -> int:
        index = self._index
        size = api.memory_msg_size(subject, headers, payload)
        index.check_admit(subject, size, len(headers) + len(payload))
        seq = index.last_seq + 1
        index.add(seq, subject, size, timestamp_ns)
        self._msgs[seq] = (subject, headers, payload, timestamp_ns)
        for removed in index.enforce(subject):
            del self._msgs[removed]
        return seq

    def store_batch(self, msgs: Sequence[api.MsgInput]) -> list[int]:
        if len(msgs) > limits.STORE_BATCH_MSGS_MAX:
            raise LimitExceeded(f"batch of {len(msgs)} > STORE_BATCH_MSGS_MAX")
        return [self.store_msg(subject, headers, payload, ts) for subject, headers, payload, ts in msgs]

    def sync(self) -> int:
        return self._index.last_seq

    def delete(self, seq: int, *, erase: bool = False) -> bool:
        if not self._index.remove(seq):
            return False
        del self._msgs[seq]
        return True

    def purge(self, subject: str = "", *, keep: int = 0, up_to_seq: int = 0) -> int:
        plan = self._index.purge_plan(subject, keep=keep, up_to_seq=up_to_seq)
        for seq in plan:
            self._index.remove(seq)
            del self._msgs[seq]
        return len(plan)

    def compact(self, seq: int) -> int:
        if seq <= 0:
            return self.purge()  # nats-server: Compact(0) purges everything
        removed = self._index.skip_to(seq)
        for gone in removed:
            del self._msgs[gone]
        return len(removed)

    def reset(self) -> None:
        """Empty and at sequence 0, as a new store (a replica that differs from its leader starts
        over from the leader's messages: jetstream/resync.py)."""
        self._index = StreamIndex(self._index.limits)
        self._msgs = {}

    def expire(self, now_ns: int) -> int:
        removed = self._index.expire(now_ns)
        for gone in removed:
            del self._msgs[gone]
        return len(removed)

    def next_expiry_ns(self) -> int | None:
        return self._index.next_expiry_ns()

    def set_limits(self, store_limits: api.StoreLimits) -> None:
        self._index.limits = store_limits
        for gone in self._index.enforce():
            del self._msgs[gone]

    # --- reads ------------------------------------------------------------------------------------

    def load(self, seq: int) -> api.StoredMsg | None:
        found = self._msgs.get(seq)
        if found is None:
            return None
        return api.StoredMsg(seq, found[0], found[1], found[2], found[3])

    def load_next(self, filter_subject: str, start_seq: int) -> api.StoredMsg | None:
        seq = self._index.next_live(start_seq, filter_subject)
        return None if seq is None else self.load(seq)

    def load_last(self, filter_subject: str) -> api.StoredMsg | None:
        seq = self._index.last_live(filter_subject)
        return None if seq is None else self.load(seq)

    def scan(self, start_seq: int = 1, filter_subject: str = ">") -> Iterator[api.StoredMsg]:
        for seq in self._index.live_seqs(start_seq, filter_subject):
            msg = self.load(seq)
            assert msg is not None
            yield msg

    def state(self, *, with_deleted: bool = False) -> api.StreamState:
        return state_of(self._index, with_deleted=with_deleted)

    def subject_counts(self, filter_subject: str = ">") -> dict[str, int]:
        return self._index.subject_counts(filter_subject)

    def snapshot(self) -> Iterator[bytes]:
        index = self._index
        return snapshot.encode(index.first_seq, index.last_seq, index.last_ts_ns, self.scan())

    def lost(self) -> api.LostData:
        return api.NO_LOSS

    def close(self) -> None:
        self._msgs.clear()


def state_of(index: StreamIndex, *, with_deleted: bool) -> api.StreamState:
    num_deleted = (index.last_seq - index.first_seq + 1 - index.msgs) if index.msgs else 0
    return api.StreamState(
        msgs=index.msgs,
        bytes=index.bytes,
        first_seq=index.first_seq,
        first_ts_ns=index.first_ts_ns(),
        last_seq=index.last_seq,
        last_ts_ns=index.last_ts_ns,
        num_subjects=index.num_subjects(),
        num_deleted=num_deleted,
        deleted=tuple(index.deleted()) if with_deleted else (),
    )
