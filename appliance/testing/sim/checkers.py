"""Invariant checkers, run by the simulator after every step. Each failure is a Violation.

- election safety: at most one leader per (group, term), over the whole run, across restarts;
- log matching: an entry (group, index, term) always has the same data and follows the same
  previous term, on every node, every time it is persisted (by induction: logs that share an
  (index, term) are identical up to it);
- state machine safety: every node applies the same entry and reaches the same state digest at
  each index; a restored snapshot and the applied index agree;
- acknowledged writes: an acknowledged proposal is the entry every node applies at its index;
- leader completeness: a newly elected leader holds the highest entry known committed so far;
- committed entries are durable on a quorum: after every step, the highest index any node
  believes committed is held (in its log, or covered by its snapshot) by a majority of nodes,
  counting stopped nodes by what their disks will give back. Every other guarantee rests on this.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from appliance.raft.types import Entry


class Violation(AssertionError):
    """An invariant broke; the message says which and where."""


@dataclass(slots=True)
class GroupHistory:
    leaders: dict[int, str] = field(default_factory=dict)  # term -> leader
    persisted: dict[tuple[int, int], tuple[bytes, int]] = field(default_factory=dict)  # (index, term) -> (data, prev term)
    applied: dict[int, tuple[int, bytes]] = field(default_factory=dict)  # index -> (term, data)
    states: dict[int, bytes] = field(default_factory=dict)  # index -> state digest
    acked: dict[int, bytes] = field(default_factory=dict)  # index -> data
    committed: tuple[int, int] = (0, 0)  # highest (index, term) any node has called committed


class Checkers:
    def __init__(self, groups: list[str]) -> None:
        self.history = {group: GroupHistory() for group in groups}
        self.checks = 0

    def on_leader(self, group: str, term: int, node: str) -> bool:
        """Record a leader; True the first time this (group, term) is seen to have one."""
        self.checks += 1
        leaders = self.history[group].leaders
        known = leaders.get(term)
        if known is None:
            leaders[term] = node
            return True
        if known != node:
            raise Violation(f"election safety: {group} has two leaders in term {term}: {known} and {node}")
        return False

    def on_persist(self, node: str, group: str, entry: Entry, prev_term: int) -> None:
        self.checks += 1
        key = (entry.index, entry.term)
        known = self.history[group].persisted.setdefault(key, (entry.data, prev_term))
        if known != (entry.data, prev_term):
            what = "other data" if known[0] != entry.data else f"prev term {prev_term}, not {known[1]}"
            raise Violation(f"log matching: {node}/{group} persisted {entry.term}/{entry.index} "
                            f"unlike another node ({what})")

    def on_state(self, node: str, group: str, index: int, digest: bytes, entry: Entry | None) -> None:
        self.checks += 1
        history = self.history[group]
        if entry is not None:
            known = history.applied.setdefault(index, (entry.term, entry.data))
            if known != (entry.term, entry.data):
                raise Violation(f"state machine safety: {node}/{group} applied {entry.term}/{index} "
                                f"but another node applied {known[0]}/{index}")
            acked = history.acked.get(index)
            if acked is not None and acked != entry.data:
                raise Violation(f"acknowledged write lost: {node}/{group} applied other data at {index}")
        if index == 0:
            return
        state = history.states.setdefault(index, digest)
        if state != digest:
            raise Violation(f"state divergence: {node}/{group} state at {index} differs from another node's")

    def on_ack(self, group: str, index: int, data: bytes) -> None:
        self.checks += 1
        history = self.history[group]
        applied = history.applied.get(index)
        if applied is None or applied[1] != data:
            raise Violation(f"acknowledged write not applied: {group} index {index}")
        history.acked[index] = data

    def on_applied_index(self, node: str, group: str, *, state_index: int, raft_applied: int) -> None:
        self.checks += 1
        if state_index != raft_applied:
            raise Violation(f"snapshot/apply mismatch: {node}/{group} state machine is at {state_index} "
                            f"but raft applied {raft_applied}")

    def on_quorum_holds(self, group: str, *, index: int, term: int, holders: list[str], voters: int) -> None:
        self.checks += 1
        if len(holders) < voters // 2 + 1:
            raise Violation(f"committed entry not on a quorum: {group} {term}/{index} is held only by "
                            f"{','.join(holders) or 'nobody'} of {voters} voters")

    def on_committed(self, group: str, *, index: int, term: int) -> None:
        history = self.history[group]
        if index > history.committed[0]:
            history.committed = (index, term)

    def on_new_leader(self, group: str, node: str, *, holds_committed: bool) -> None:
        self.checks += 1
        if not holds_committed:
            index, term = self.history[group].committed
            raise Violation(f"leader completeness: {node} leads {group} without committed entry {term}/{index}")

    def acked_count(self) -> int:
        return sum(len(history.acked) for history in self.history.values())
