"""A consumer's replicated state (pure): delivered and ack floors, pending acks, redelivery counts.

Changed only by applying operations from the consumer's RAFT log, so a restart (or a follower)
replays to the same state. Operations are absolute, not deltas. The hot ones are binary (one
kind byte, then little-endian int64s), the rare one JSON:

  b"d" + (sseq, cseq, dc, ts_ns) * n      delivered (dc > 1 is a redelivery)
  b"a" + ts_ns + sseq * n                 explicit acks (also +TERM and max-deliver give-ups)
  b"A" + (sseq, cseq, ts_ns)              ack-all up to sseq (delivered as cseq)
  {"start": sseq}                         the first delivery starts at sseq (deliver policies)

Logs written before the binary forms carry the JSON forms {"d": [[sseq, cseq, dc, ts], ...]},
{"a": [sseq, ...], "t": ts} and {"all": sseq, "c": cseq, "t": ts}; they still apply.

Acks of one operation move the ack floor as nats-server's processAckMsg does one ack at a time
(the floor follows an ack of the message right above it, then jumps to just below the lowest
pending message above), but the jump is taken once per operation, not once per ack: a scan of
the pending set per ack made a batch of acks quadratic.
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
            return []
        raise AssertionError(f"unknown consumer op {op!r}")

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
            pending[sseq] = (cseq, ts_ns)
            if dc > 1:
                redelivered[sseq] = dc
        self.delivered_cseq = max(high_cseq, max(cseqs))
        self.delivered_sseq = max(high_sseq, max(sseqs))
        self.delivered_ns = stamps[-1]

    def _delivered(self, items: list[list[int]]) -> None:
        for sseq, cseq, dc, ts_ns in items:
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
            self.pending[sseq] = (cseq, ts_ns)
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
        for sseq in seqs:
            entry = pending.pop(sseq, None)
            if entry is None:
                continue
            if redelivered:
                redelivered.pop(sseq, None)
            done.append(sseq)
            cseq = entry[0]
            if cseq == floor_cseq + 1:
                floor_cseq, floor_sseq, moved = cseq, sseq, True
        if not done:
            return done
        self.floor_ns = ts_ns
        if not pending:
            self.floor_cseq, self.floor_sseq = self.delivered_cseq, self.delivered_sseq
        elif moved:
            following = _lowest_above(pending, floor_sseq)
            if following:
                floor_cseq, floor_sseq = pending[following][0] - 1, following - 1
            self.floor_cseq, self.floor_sseq = floor_cseq, floor_sseq
        return done

    def _acked_all(self, upto: int, cseq: int, ts_ns: int) -> list[int]:
        if cseq <= self.floor_cseq:
            return []
        done = sorted(s for s in self.pending if s <= upto)
        for sseq in done:
            del self.pending[sseq]
            self.redelivered.pop(sseq, None)
        self.floor_cseq, self.floor_sseq, self.floor_ns = cseq, upto, ts_ns
        if not self.pending:
            self.floor_cseq, self.floor_sseq = self.delivered_cseq, self.delivered_sseq
        return done

    def has_acked(self, sseq: int) -> bool:
        return sseq <= self.floor_sseq or (sseq <= self.delivered_sseq and sseq not in self.pending)

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


def op_start(sseq: int) -> bytes:
    return json.dumps({"start": sseq}).encode()
