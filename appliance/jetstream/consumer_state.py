"""A consumer's replicated state (pure): delivered and ack floors, pending acks, redelivery counts.

Changed only by applying operations from the consumer's RAFT log, so a restart (or a follower)
replays to the same state. Operations are absolute, not deltas:

  {"d": [[sseq, cseq, dc, ts_ns], ...]}   delivered (dc > 1 is a redelivery)
  {"a": [sseq, ...], "t": ts_ns}          explicit acks (also +TERM and max-deliver give-ups)
  {"all": sseq, "c": cseq, "t": ts_ns}   ack-all up to sseq (delivered as cseq)
  {"start": sseq}                         the first delivery starts at sseq (deliver policies)
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field


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

    def _acked(self, seqs: list[int], ts_ns: int) -> list[int]:
        """Explicit acks, moving the floors as nats-server's processAckMsg does."""
        done = []
        for sseq in seqs:
            entry = self.pending.pop(sseq, None)
            if entry is None:
                continue
            self.redelivered.pop(sseq, None)
            done.append(sseq)
            self.floor_ns = ts_ns
            cseq = entry[0]
            if not self.pending:
                self.floor_cseq, self.floor_sseq = self.delivered_cseq, self.delivered_sseq
            elif cseq == self.floor_cseq + 1:
                self.floor_cseq, self.floor_sseq = cseq, sseq
                following = _lowest_above(self.pending, sseq)
                if following:
                    self.floor_cseq, self.floor_sseq = self.pending[following][0] - 1, following - 1
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


def op_delivered(items: list[tuple[int, int, int, int]]) -> bytes:
    return json.dumps({"d": items}, separators=(",", ":")).encode()


def op_acked(seqs: list[int], ts_ns: int) -> bytes:
    return json.dumps({"a": seqs, "t": ts_ns}, separators=(",", ":")).encode()


def op_acked_all(upto: int, cseq: int, ts_ns: int) -> bytes:
    return json.dumps({"all": upto, "c": cseq, "t": ts_ns}, separators=(",", ":")).encode()


def op_start(sseq: int) -> bytes:
    return json.dumps({"start": sseq}).encode()
