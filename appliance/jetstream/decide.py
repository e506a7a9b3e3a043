"""What a replicated stream's leader has accepted and proposed but not applied yet (pure).

A replicated stream's leader decides each publish when it proposes it (stream.py `_decide`, as
nats-server's checkMsgHeadersPreClusteredProposal): accepted at the next sequence, a duplicate of
a stored message, or refused with nats-server's error. The replicated entry carries only the
accepted messages and the sequence of the first (ops.KIND_DECIDED); every replica stores them
there without checking them again. So a decision must count what is still in flight: the
`Projection` is the stream as it will be once every entry this leader proposed is applied — its
last sequence and last msg id, and, on top of the store, the in-flight messages, bytes, subjects,
msg ids and expected-subject checks.

Each proposed entry records what it added (`InFlight`); once it is applied here its share moves
from the projection into the store (`settle`). A leader change, a proposal that failed, or an
entry that did not apply (its first sequence did not follow the store's last) starts the
projection again from the store (`reset`, a new epoch: entries of an older epoch settle nothing).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from appliance.store import api


@dataclass(slots=True)
class InFlight:
    """What one proposed entry adds to the projection."""

    epoch: int
    first_seq: int
    count: int = 0  # accepted messages (sequences)
    msgs: int = 0  # messages added (one that replaces the oldest of its subject adds none)
    bytes: int = 0
    subjects: dict[str, int] = field(default_factory=dict)
    msg_ids: list[str] = field(default_factory=list)
    expected_subjects: list[str] = field(default_factory=list)
    rollups_all: int = 0


class Projection:
    def __init__(self) -> None:
        self.epoch = 0
        self.last_seq = 0
        self.last_msg_id = ""
        self.msgs = 0
        self.bytes = 0
        self.subjects: dict[str, int] = {}
        self.msg_ids: dict[str, int] = {}
        self.expected_subjects: dict[str, int] = {}
        self.rollups_all = 0
        self.entries = 0  # proposed entries not settled

    def reset(self, last_seq: int, last_msg_id: str) -> None:
        """Nothing in flight: the projection is the store (entries proposed before settle nothing)."""
        self.epoch += 1
        self.last_seq, self.last_msg_id = last_seq, last_msg_id
        self.msgs = self.bytes = self.rollups_all = self.entries = 0
        self.subjects = {}
        self.msg_ids = {}
        self.expected_subjects = {}

    @property
    def idle(self) -> bool:
        return self.entries == 0

    def open(self) -> InFlight:
        return InFlight(self.epoch, self.last_seq + 1)

    def subject_busy(self, subject: str) -> bool:
        """A message on `subject` or an expected-subject check on it is in flight, or a rollup
        of the whole stream: the store's last message of the subject is not the last one."""
        return subject in self.subjects or subject in self.expected_subjects or self.rollups_all > 0

    def accept(self, entry: InFlight, subject: str, size: int, *, replaces: bool, msg_id: str,
               expected_subject: str | None, rollup_all: bool) -> int:
        """Count one accepted message (in the projection at once: the next decision sees it);
        returns its sequence."""
        self.last_seq += 1
        self.last_msg_id = msg_id
        entry.count += 1
        added = 0 if replaces else 1
        self.msgs += added
        entry.msgs += added
        self.bytes += size
        entry.bytes += size
        self.subjects[subject] = self.subjects.get(subject, 0) + 1
        entry.subjects[subject] = entry.subjects.get(subject, 0) + 1
        if msg_id:
            self.msg_ids[msg_id] = self.msg_ids.get(msg_id, 0) + 1
            entry.msg_ids.append(msg_id)
        if expected_subject is not None:
            self.expected_subjects[expected_subject] = self.expected_subjects.get(expected_subject, 0) + 1
            entry.expected_subjects.append(expected_subject)
        if rollup_all:
            self.rollups_all += 1
            entry.rollups_all += 1
        return self.last_seq

    def accept_plain(self, entry: InFlight, subjects: list[str], size: int) -> None:
        """Count header-less messages accepted without a limit to check (the hot path): `size`
        is their bytes together."""
        n = len(subjects)
        self.last_seq += n
        self.last_msg_id = ""
        entry.count += n
        self.msgs += n
        entry.msgs += n
        self.bytes += size
        entry.bytes += size
        mine, theirs = self.subjects, entry.subjects
        for subject, count in Counter(subjects).items():
            mine[subject] = mine.get(subject, 0) + count
            theirs[subject] = theirs.get(subject, 0) + count

    def proposed(self, entry: InFlight) -> None:
        if entry.epoch == self.epoch:
            self.entries += 1

    def settle(self, entry: InFlight) -> None:
        """The entry is applied here: what it added is in the store now."""
        if entry.epoch != self.epoch:
            return
        self.entries -= 1
        self.msgs -= entry.msgs
        self.bytes -= entry.bytes
        self.rollups_all -= entry.rollups_all
        _take(self.subjects, entry.subjects.items())
        _take(self.msg_ids, ((i, 1) for i in entry.msg_ids))
        _take(self.expected_subjects, ((s, 1) for s in entry.expected_subjects))

    def failed(self, entry: InFlight, last_seq: int, last_msg_id: str) -> bool:
        """The entry will not be applied (its proposal failed) or was refused (its first sequence
        did not follow the store's last): what was decided after it assumed it, so start again
        from the store. False when an earlier failure reset the projection already."""
        if entry.epoch != self.epoch:
            return False
        self.reset(last_seq, last_msg_id)
        return True


def _take(counts: dict[str, int], items: object) -> None:
    for key, n in items:  # type: ignore[attr-defined]
        left = counts.get(key, 0) - n
        if left > 0:
            counts[key] = left
        else:
            counts.pop(key, None)


def discard_new_refusal(limits: api.StoreLimits, *, store_msgs: int, store_bytes: int,
                        subject_count: int, projection: Projection, subject: str,
                        size: int) -> tuple[str | None, bool]:
    """A discard-new stream's refusal of one more message counting what is in flight, as the
    store refuses it (index.py check_admit), or None; and whether the message replaces the oldest
    of its subject (max_msgs_per_subject reached: it adds no message). In flight, a replaced
    message's bytes are not credited (pessimistic: what the leader accepts, every replica with
    the same state stores)."""
    inflight_subject = projection.subjects.get(subject, 0)
    count = subject_count + inflight_subject
    replaces = limits.max_msgs_per_subject > 0 and count >= limits.max_msgs_per_subject
    if limits.discard != "new":
        return None, replaces
    if replaces and limits.discard_new_per_subject:
        return api.MAX_MSGS_PER_SUBJECT_EXCEEDED, replaces
    if limits.max_msgs > 0 and store_msgs + projection.msgs >= limits.max_msgs and not replaces:
        return api.MAX_MSGS_EXCEEDED, replaces
    if limits.max_bytes > 0 and store_bytes + projection.bytes + size > limits.max_bytes:
        return api.MAX_BYTES_EXCEEDED, replaces
    return None, replaces
