"""The StreamStore contract: what JetStream streams (and KV / object store on top) need from storage.

Both `MemoryStreamStore` and `FileStreamStore` implement it and run one contract suite
(tests/store/test_contract.py). Sequences start at 1 and never go back; timestamps are
nanoseconds since the epoch given by the caller (the store never reads a clock). Limits follow
nats-server's StreamConfig (field names included) and are enforced on every store.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal, NamedTuple, Protocol

from appliance.errors import LimitExceeded

Discard = Literal["old", "new"]
# (subject, headers, payload, timestamp_ns): one message handed to store_batch
MsgInput = tuple[str, bytes, bytes, int]


@dataclass(frozen=True, slots=True)
class StoreLimits:
    """The StreamConfig fields the store enforces; -1 / 0 mean unlimited as in nats-server."""

    max_msgs: int = -1
    max_bytes: int = -1
    max_age_ns: int = 0
    max_msgs_per_subject: int = -1
    max_msg_size: int = -1
    discard: Discard = "old"
    discard_new_per_subject: bool = False

    def __post_init__(self) -> None:
        assert self.discard in ("old", "new")
        assert self.max_age_ns >= 0


class StoredMsg(NamedTuple):
    """One stored message. A named tuple: the sequential-read path builds millions of them."""

    seq: int
    subject: str
    headers: bytes
    payload: bytes
    timestamp_ns: int


@dataclass(frozen=True, slots=True)
class StreamState:
    """nats-server's StreamState: counts, bounds, and the deleted (interior gap) count."""

    msgs: int
    bytes: int
    first_seq: int
    first_ts_ns: int
    last_seq: int
    last_ts_ns: int
    num_subjects: int
    num_deleted: int
    deleted: tuple[int, ...] = field(default=())


@dataclass(frozen=True, slots=True)
class LostData:
    """What a store holds damaged and will not serve until it is repaired (nats-server's
    LostStreamData: `msgs`, `bytes`), with the count when more sequences are lost than listed and
    one line per damaged region (file:offset, sequences, what is wrong) for operators."""

    msgs: tuple[int, ...] = ()  # lost sequences, the first STORE_LOST_LISTED_MAX of them
    count: int = 0  # every lost sequence
    bytes: int = 0  # damaged bytes on disk, where known
    regions: tuple[str, ...] = ()

    @property
    def damaged(self) -> bool:
        """Unrepaired damage (some regions lose no message: a removal record, a block header)."""
        return bool(self.regions)


NO_LOSS = LostData()


class StoreLimitError(LimitExceeded):
    """A store was refused by a stream limit (discard new, or a message over max_msg_size).

    `reason` is nats-server's error text: "maximum messages exceeded", "maximum bytes exceeded",
    "maximum messages per subject exceeded", "message size exceeds maximum allowed".
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


MAX_MSGS_EXCEEDED = "maximum messages exceeded"
MAX_BYTES_EXCEEDED = "maximum bytes exceeded"
MAX_MSGS_PER_SUBJECT_EXCEEDED = "maximum messages per subject exceeded"
MAX_MSG_SIZE_EXCEEDED = "message size exceeds maximum allowed"


def file_msg_size(subject: str, headers: bytes, payload: bytes) -> int:
    """Bytes a message counts for in a file stream (nats-server fileStoreMsgSize)."""
    subject_bytes = len(subject) if subject.isascii() else len(subject.encode())
    if headers:
        return 22 + subject_bytes + 4 + len(headers) + len(payload) + 8
    return 22 + subject_bytes + len(payload) + 8


def memory_msg_size(subject: str, headers: bytes, payload: bytes) -> int:
    """Bytes a message counts for in a memory stream (nats-server memStoreMsgSize)."""
    subject_bytes = len(subject) if subject.isascii() else len(subject.encode())
    return subject_bytes + len(headers) + len(payload) + 16


class StreamStore(Protocol):
    """One stream's messages. Not thread-safe: one owner (a worker's loop) drives it."""

    def store_msg(self, subject: str, headers: bytes, payload: bytes, timestamp_ns: int) -> int:
        """Store one message; returns its sequence. Durable on return when the store syncs always."""
        ...

    def store_batch(self, msgs: Sequence[MsgInput]) -> list[int]:
        """Store many messages with one sync; all-or-nothing only per message (limits apply to each)."""
        ...

    def sync(self) -> int:
        """Make everything written so far durable; returns the highest durable sequence."""
        ...

    def load(self, seq: int) -> StoredMsg | None: ...

    def load_next(self, filter_subject: str, start_seq: int) -> StoredMsg | None:
        """The first message at or after start_seq whose subject matches the filter."""
        ...

    def load_last(self, filter_subject: str) -> StoredMsg | None: ...

    def scan(self, start_seq: int = 1, filter_subject: str = ">") -> Iterator[StoredMsg]:
        """Every live message from start_seq in order (the sequential-read path)."""
        ...

    def delete(self, seq: int, *, erase: bool = False) -> bool: ...

    def purge(self, subject: str = "", *, keep: int = 0, up_to_seq: int = 0) -> int:
        """nats-server PurgeEx: by subject filter, keeping the newest `keep`, or below `up_to_seq`."""
        ...

    def compact(self, seq: int) -> int:
        """Remove every message below seq; the next first sequence is seq (nats-server Compact)."""
        ...

    def reset(self) -> None:
        """Remove every message and start over at sequence 0, as a new store (a replica that
        differs from its leader refills it from the leader)."""
        ...

    def expire(self, now_ns: int) -> int:
        """Remove messages older than max_age at now_ns; returns how many."""
        ...

    def next_expiry_ns(self) -> int | None: ...

    def set_limits(self, limits: StoreLimits) -> None: ...

    def state(self, *, with_deleted: bool = False) -> StreamState: ...

    def subject_counts(self, filter_subject: str = ">") -> dict[str, int]: ...

    def msg_size(self, subject: str, headers: bytes, payload: bytes) -> int: ...

    def lost(self) -> LostData:
        """Damage found on disk and not repaired; loading a lost sequence raises CorruptData."""
        ...

    def snapshot(self) -> Iterator[bytes]: ...

    def close(self) -> None: ...

