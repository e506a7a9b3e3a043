"""A consumer's replicated state (pure): delivered and ack floors, pending acks, redelivery counts.

Changed only by applying operations from the consumer's RAFT log, so a restart (or a follower)
replays to the same state. Operations are absolute, not deltas. The hot ones are binary (one
kind byte, then little-endian int64s), the rare one JSON:

  b"d" + (sseq, cseq, dc, ts_ns) * n      delivered (dc > 1 is a redelivery)
  b"a" + ts_ns + sseq * n                 explicit acks (also +TERM and max-deliver give-ups)
  b"A" + (sseq, cseq, ts_ns)              ack-all up to sseq (delivered as cseq)
  b"x" + ts_ns + (sseq, dc) * n           given up on: delivered dc (= max_deliver) times, never acked
  {"start": sseq, "next": n}              the first delivery starts at sseq (deliver policies); the
                                          first start recorded is kept (start_next)
  {"reset": sseq}                         CONSUMER.RESET: nothing pending, the next delivery is sseq,
                                          consumer sequences start again at 1 (nats-server Reset)

Logs written before the binary forms carry the JSON forms {"d": [[sseq, cseq, dc, ts], ...]},
{"a": [sseq, ...], "t": ts} and {"all": sseq, "c": cseq, "t": ts}; they still apply.

Acks of one operation move the ack floor as nats-server's processAckMsg does one ack at a time
(the floor follows an ack of the message right above it, then jumps to just below the lowest
pending message above), but the jump is taken once per operation, not once per ack: a scan of
the pending set per ack made a batch of acks quadratic.

Max deliveries, as nats-server 2.15.1 (its consumer store is what CONSUMER.INFO reports): a message
given up on leaves the pending set but keeps its redelivery count (num_redelivered counts it) and
does not move the ack floor; it is not acknowledged (a workqueue or interest stream keeps it) and
is never redelivered, also after a restart. A later explicit ack of it only drops its redelivery
count (and lets a workqueue/interest stream remove it). The floor passes over it when an ack
empties the pending set or moves the floor to the next pending message. For ack policy all,
nats-server also keeps a leader-only floor (`live_*`) that a give-up moves as an ack would; an
ack-all at or below it is ignored, and an ack-all moves the reported floor only when it acks a
pending message (to the acked sequences, with no jump to the delivered position).

A delivery record of a message delivered before (at or below the delivered position) that is no
longer pending changes nothing, as in nats-server's consumer store: the leader can redeliver a
message whose ack it has proposed but not yet applied, and the log then holds the ack first.

One more ack-all detail: nats-server's consumer store ignores a give-up of a message first
delivered at or below its ack floor's consumer sequence (an ack-all floor can pass the original
delivery of a message redelivered later), so the store still lists it as pending. Those are kept
in `held`; `restarted()` (called once after a restart's replay) puts them back into the pending
set, where they are given up on again (a second advisory) instead of being redelivered.
"""

from __future__ import annotations

import json
import sys
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field

KIND_DELIVERED = ord("d")
KIND_ACKED = ord("a")
KIND_ACKED_ALL = ord("A")
KIND_GAVE_UP = ord("x")
_LITTLE = sys.byteorder == "little"


def _int64s(data: bytes) -> array[int]:
    values = array("q")
    values.frombytes(memoryview(data)[1:])
    if not _LITTLE:
        values.byteswap()
    return values


def _pack(kind: int, values: array[int]) -> bytes:
    if not _LITTLE:
        values.byteswap()
    return bytes((kind,)) + values.tobytes()


@dataclass(slots=True)
class ConsumerState:
    ack_policy: str
    delivered_cseq: int = 0
    delivered_sseq: int = 0
    delivered_ns: int = 0
    floor_cseq: int = 0
    floor_sseq: int = 0
    floor_ns: int = 0
    pending: dict[int, tuple[int, int]] = field(default_factory=dict)  # sseq -> (cseq, ts_ns)
    redelivered: dict[int, int] = field(default_factory=dict)  # sseq -> delivery count (> 1)
    live_cseq: int = 0  # the leader's own floor (ack policy all; module doc); restarts at the floor
    live_sseq: int = 0
    held: dict[int, tuple[int, int]] = field(default_factory=dict)  # given up, pending again on restart
    start_next: int = 0  # recorded start: where delivery begins (0: none recorded yet)

    def apply(self, data: bytes) -> list[int]:
        """Apply one operation; returns the stream sequences it acknowledged."""
        kind = data[0]
        if kind == KIND_DELIVERED:
            self._delivered_flat(_int64s(data))
            return []
        if kind == KIND_ACKED:
            values = _int64s(data)
            return self._acked(values[1:], values[0])
        if kind == KIND_ACKED_ALL:
            upto, cseq, ts_ns = _int64s(data)
            return self._acked_all(upto, cseq, ts_ns)
        if kind == KIND_GAVE_UP:
            values = _int64s(data)
            self._gave_up(values[1::2], values[2::2])
            return []
        op = json.loads(data)
        if "d" in op:
            self._delivered(op["d"])
            return []
        if "a" in op:
            return self._acked([int(s) for s in op["a"]], int(op.get("t", 0)))
        if "all" in op:
            return self._acked_all(int(op["all"]), int(op.get("c", 0)), int(op.get("t", 0)))
        if "start" in op:
            start = int(op["start"]) - 1
            if self.delivered_sseq < start:
                self.delivered_sseq = self.floor_sseq = start
            if not self.start_next:  # the first recorded start is the one every replica keeps
                self.start_next = max(int(op.get("next", start + 1)), 1)
            return []
        if "reset" in op:
            self._reset(int(op["reset"]))
            return []
        raise AssertionError(f"unknown consumer op {op!r}")

    @property
    def started(self) -> bool:
        """Is where delivery starts recorded (a start, a reset, or a delivery made)?"""
        return self.start_next > 0 or self.delivered_cseq > 0 or self.delivered_sseq > 0

    def _reset(self, sseq: int) -> None:
        self.start_next = max(sseq, 1)  # delivery goes on from the reset
        self.delivered_sseq = self.floor_sseq = self.live_sseq = sseq - 1
        self.delivered_cseq = self.floor_cseq = self.live_cseq = 0
        self.delivered_ns = self.floor_ns = 0
        self.pending.clear()
        self.redelivered.clear()
        self.held.clear()

    def _delivered_flat(self, flat: array[int]) -> None:
        """Deliveries as (sseq, cseq, dc, ts_ns) runs of one flat array."""
        if not len(flat):
            return
        if self.ack_policy == "none":
            self._delivered([flat[i : i + 4].tolist() for i in range(0, len(flat), 4)])
            return
        pending = self.pending
        redelivered = self.redelivered
        floor = self.floor_sseq
        high_cseq = self.delivered_cseq
        high_sseq = self.delivered_sseq
        sseqs = flat[0::4]
        cseqs = flat[1::4]
        counts = flat[2::4]
        stamps = flat[3::4]
        for sseq, cseq, dc, ts_ns in zip(sseqs, cseqs, counts, stamps, strict=True):
            if sseq <= floor:
                continue
            if sseq <= high_sseq and sseq not in pending:
                continue  # acked (or given up on) since it was delivered: it stays so (module doc)
            if dc > 1:
                redelivered[sseq] = dc
                before = pending.get(sseq)
                if before is not None:  # a redelivery keeps the original delivery's cseq (nats-server)
                    cseq = before[0]
            pending[sseq] = (cseq, ts_ns)
        self.delivered_cseq = max(high_cseq, max(cseqs))
        self.delivered_sseq = max(high_sseq, max(sseqs))
        self.delivered_ns = stamps[-1]

    def _delivered(self, items: list[list[int]]) -> None:
        for sseq, cseq, dc, ts_ns in items:
            seen = sseq <= self.delivered_sseq
            self.delivered_cseq = max(self.delivered_cseq, cseq)
            self.delivered_sseq = max(self.delivered_sseq, sseq)
            self.delivered_ns = ts_ns
            if self.ack_policy == "none":
                self.floor_cseq, self.floor_sseq, self.floor_ns = (
                    self.delivered_cseq,
                    self.delivered_sseq,
                    ts_ns,
                )
                continue
            if sseq <= self.floor_sseq:
                continue
            before = self.pending.get(sseq)
            if seen and before is None:
                continue  # acked (or given up on) since it was delivered: it stays so (module doc)
            self.pending[sseq] = (before[0] if before is not None and dc > 1 else cseq, ts_ns)
            if dc > 1:
                self.redelivered[sseq] = dc

    def _acked(self, seqs: Sequence[int], ts_ns: int) -> list[int]:
        """Explicit acks, moving the floors as nats-server's processAckMsg does (module doc)."""
        done = []
        pending = self.pending
        redelivered = self.redelivered
        floor_cseq = self.floor_cseq
        floor_sseq = self.floor_sseq
        moved = False
        late = []  # acks of messages given up on (max deliveries): no floor change
        for sseq in seqs:
            entry = pending.pop(sseq, None)
            if entry is None:
                if sseq in redelivered:
                    del redelivered[sseq]
                    late.append(sseq)
                continue
            if redelivered:
                redelivered.pop(sseq, None)
            done.append(sseq)
            cseq = entry[0]
            if cseq == floor_cseq + 1:
                floor_cseq, floor_sseq, moved = cseq, sseq, True
        if not done:
            return late
        self.floor_ns = ts_ns
        if not pending:
            self.floor_cseq, self.floor_sseq = self.delivered_cseq, self.delivered_sseq
        elif moved:
            following = _lowest_above(pending, floor_sseq)
            if following:
                floor_cseq, floor_sseq = pending[following][0] - 1, following - 1
            self.floor_cseq, self.floor_sseq = floor_cseq, floor_sseq
        self.live_cseq, self.live_sseq = self.floor_cseq, self.floor_sseq
        return done + late if late else done

    def _acked_all(self, upto: int, cseq: int, ts_ns: int) -> list[int]:
        """Ack-all up to upto as nats-server's processAckMsg (leader floor) and its consumer store
        (reported floor) do: see the module doc."""
        if upto > self.delivered_sseq:
            return []  # never delivered: nats-server ignores an ack above its next sequence
        if cseq <= max(self.live_cseq, self.floor_cseq) or upto <= max(self.live_sseq, self.floor_sseq):
            return []
        pending = self.pending
        redelivered = self.redelivered
        gap = upto - max(self.live_sseq, self.floor_sseq)
        held = self.held
        acks_pending = upto in pending or upto in held
        done = sorted(s for s in pending if s <= upto)
        if gap > len(pending):
            for sseq in done:
                redelivered.pop(sseq, None)
        else:
            seq = upto
            while seq > upto - gap and pending:
                pending.pop(seq, None)
                redelivered.pop(seq, None)
                seq -= 1
        for sseq in done:
            pending.pop(sseq, None)
        self.live_cseq, self.live_sseq = cseq, upto
        if acks_pending:
            self.floor_cseq, self.floor_sseq, self.floor_ns = cseq, upto, ts_ns
            for sseq in [s for s in held if s <= upto]:
                del held[sseq]
        if upto not in done:
            done.append(upto)  # a workqueue/interest stream drops the acked message itself too
        return done

    def _gave_up(self, seqs: Sequence[int], counts: Sequence[int]) -> None:
        """Messages delivered max_deliver times and never acked (module doc)."""
        pending = self.pending
        for sseq, dc in zip(seqs, counts, strict=True):
            entry = pending.pop(sseq, None)
            if entry is None:
                continue
            self.redelivered[sseq] = max(self.redelivered.get(sseq, 0), dc)
            if entry[0] <= self.floor_cseq:
                self.held[sseq] = entry
            live_cseq = max(self.live_cseq, self.floor_cseq)
            if not pending:
                self.live_cseq, self.live_sseq = self.delivered_cseq, self.delivered_sseq
            elif entry[0] == live_cseq + 1:
                following = _lowest_above(pending, sseq)
                self.live_cseq, self.live_sseq = entry[0], sseq
                if following:
                    self.live_cseq, self.live_sseq = pending[following][0] - 1, following - 1

    def has_acked(self, sseq: int) -> bool:
        """Acknowledged (a message given up on is not: it keeps its redelivery count)."""
        if sseq <= self.floor_sseq:
            return True
        return sseq <= self.delivered_sseq and sseq not in self.pending and sseq not in self.redelivered

    def restarted(self) -> None:
        """After a restart's replay: the leader floor restarts at the floor, and messages the
        store still held as pending are pending again (module doc)."""
        self.live_cseq, self.live_sseq = self.floor_cseq, self.floor_sseq
        if self.held:
            self.pending.update(self.held)
            self.held.clear()

    def given_up(self) -> list[int]:
        """Messages above the floor given up on after max deliveries and not acked since."""
        return sorted(s for s in self.redelivered if s > self.floor_sseq and s not in self.pending)

    def snapshot(self) -> bytes:
        return json.dumps(
            {
                "dc": self.delivered_cseq,
                "ds": self.delivered_sseq,
                "dt": self.delivered_ns,
                "fc": self.floor_cseq,
                "fs": self.floor_sseq,
                "ft": self.floor_ns,
                "p": [[s, c, t] for s, (c, t) in sorted(self.pending.items())],
                "r": [[s, n] for s, n in sorted(self.redelivered.items())],
                "h": [[s, c, t] for s, (c, t) in sorted(self.held.items())],
                **({"sn": self.start_next} if self.start_next else {}),
            },
            separators=(",", ":"),
        ).encode()

    def restore(self, data: bytes) -> None:
        if not data:
            return
        snap = json.loads(data)
        self.delivered_cseq, self.delivered_sseq, self.delivered_ns = snap["dc"], snap["ds"], snap["dt"]
        self.floor_cseq, self.floor_sseq, self.floor_ns = snap["fc"], snap["fs"], snap["ft"]
        self.pending = {s: (c, t) for s, c, t in snap["p"]}
        self.redelivered = {s: n for s, n in snap["r"]}
        self.held = {s: (c, t) for s, c, t in snap.get("h", [])}
        self.start_next = int(snap.get("sn", 0))
        self.live_cseq, self.live_sseq = self.floor_cseq, self.floor_sseq  # as nats-server's restart


def _lowest_above(pending: dict[int, tuple[int, int]], sseq: int) -> int:
    """The lowest pending stream sequence above sseq (0 if none). Pending is kept in delivery
    order, which is stream order except for redeliveries, so the scan usually stops at once."""
    best = 0
    for candidate in pending:
        if candidate > sseq and (best == 0 or candidate < best):
            best = candidate
            if candidate == sseq + 1:
                break
    return best


def op_delivered(items: Sequence[tuple[int, int, int, int]]) -> bytes:
    flat = array("q")
    for item in items:
        flat.extend(item)
    return _pack(KIND_DELIVERED, flat)


def op_delivered_flat(flat: Sequence[int]) -> bytes:
    """Deliveries already laid out as (sseq, cseq, dc, ts_ns) runs (the delivery hot path)."""
    return _pack(KIND_DELIVERED, array("q", flat))


def op_acked(seqs: Sequence[int], ts_ns: int) -> bytes:
    values = array("q", (ts_ns,))
    values.extend(seqs)
    return _pack(KIND_ACKED, values)


def op_acked_all(upto: int, cseq: int, ts_ns: int) -> bytes:
    return _pack(KIND_ACKED_ALL, array("q", (upto, cseq, ts_ns)))


def op_gave_up(items: Sequence[tuple[int, int]], ts_ns: int) -> bytes:
    """Given up on after max deliveries: (sseq, delivery count) pairs."""
    values = array("q", (ts_ns,))
    for sseq, dc in items:
        values.extend((sseq, dc))
    return _pack(KIND_GAVE_UP, values)


def op_start(sseq: int, next_sseq: int = 0) -> bytes:
    """The deliver policy's start: the first sequence it delivers and, when it delivers a set of
    earlier ones first (last_per_subject), where it goes on after them."""
    return json.dumps({"start": sseq, "next": next_sseq or sseq}).encode()


def op_reset(sseq: int) -> bytes:
    return json.dumps({"reset": sseq}).encode()
