"""Interest sync between sibling workers: when a worker may answer a PONG, and when it may serve.

The promise NATS users rely on (nats-server's, and every client's `flush()`): once a client's SUB has
been followed by a PING/PONG round trip, a message any client publishes afterwards, on any worker,
reaches it. Two rules keep that promise across the workers of one host:

1. A PONG waits until every sibling that is alive has applied this worker's interest changes made
   before that PING (the sibling's INTEREST_ACK carries the sequence number it applied). A sibling
   whose process is gone is not waited for: its successor gets the whole interest set again (rule 2).
2. A worker holds the first read of every client until it knows the complete interest of every live
   sibling. It learns a sibling's interest from the sibling's answer to its HELLO (INTEREST_RESET,
   the whole set, then INTEREST_SYNCED), or from the sibling's own HELLO (a fresh incarnation has no
   interest yet; its adds follow in order).

`SiblingSync` is the bookkeeping of both rules, with no I/O and no clock. The fabric (server/links.py)
feeds it the frames and the process exits it observes, keeps a timer, and calls the callbacks it
releases. A timer never releases a waiter by itself: when it fires, the fabric asks which siblings
still block (`blocking`), checks whether their processes are alive, and only a sibling that is
really gone (`on_exit`) stops being waited for. A busy sibling, one whose ring is being rejoined, or
one that has not started reading yet, is waited for as long as it lives.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass

Callback = Callable[[], None]

PID = struct.Struct("<Q")  # HELLO and INTEREST_SYNCED carry the sender's process id


def encode_pid(pid: int) -> bytes:
    return PID.pack(pid)


def decode_pid(payload: bytes) -> int | None:
    """The pid a HELLO or INTEREST_SYNCED names; None for an empty payload (a sender that did not say)."""
    if len(payload) < PID.size:
        return None
    pid = int(PID.unpack_from(payload, 0)[0])
    return pid or None


@dataclass(slots=True)
class Sibling:
    """What this worker knows of one sibling worker."""

    acked_seq: int  # our interest changes it has applied
    pid: int | None = None  # its process, from its HELLO or its answer to ours
    known: bool = False  # we hold its complete interest (its HELLO, or its answer to our HELLO)
    gone: bool = False  # its process exited, or its link broke; waited for again after a successor's HELLO


class SiblingSync:
    """Interest sync state of one worker toward its siblings (see the module docstring)."""

    def __init__(self, siblings: Iterable[int], base_seq: int) -> None:
        self.seq = base_seq  # the number of our latest interest change
        self.siblings = {index: Sibling(acked_seq=base_seq) for index in siblings}
        self._waiters: list[tuple[int, Callback]] = []  # (interest seq to be applied, callback), in order

    # --- this worker's interest ------------------------------------------------------------------

    def next_seq(self) -> int:
        """Number a new interest change of ours."""
        self.seq += 1
        return self.seq

    # --- the condition ---------------------------------------------------------------------------

    def blocking(self, target: int | None = None) -> list[int]:
        """Siblings that keep a waiter for interest change `target` (default: our latest) waiting:
        alive as far as we know, and either not known to us yet or behind with their ACKs."""
        target = self.seq if target is None else target
        return [index for index, sibling in self.siblings.items()
                if not sibling.gone and not (sibling.known and sibling.acked_seq >= target)]

    def synced(self) -> bool:
        """Every live sibling is known and applied all our interest changes: a PONG may go now."""
        seq = self.seq
        for sibling in self.siblings.values():
            if not sibling.gone and not (sibling.known and sibling.acked_seq >= seq):
                return False
        return True

    def joined(self) -> bool:
        """We know the complete interest of every live sibling (rule 2)."""
        return all(sibling.known or sibling.gone for sibling in self.siblings.values())

    # --- waiters ---------------------------------------------------------------------------------

    def add_waiter(self, callback: Callback) -> None:
        """`callback` is released once every live sibling is known and applied our latest change."""
        self._waiters.append((self.seq, callback))

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def blocking_waiters(self) -> list[int]:
        """Siblings that block at least one waiter (for the fabric's timer)."""
        if not self._waiters:
            return []
        return self.blocking(min(target for target, _ in self._waiters))

    def take_released(self) -> list[Callback]:
        """The callbacks whose condition now holds, in the order they were added; removed."""
        if not self._waiters:
            return []
        released = [callback for target, callback in self._waiters if not self.blocking(target)]
        if released:
            self._waiters = [(target, callback) for target, callback in self._waiters if self.blocking(target)]
        return released

    # --- what the fabric observes ----------------------------------------------------------------

    def on_ack(self, index: int, seq: int) -> None:
        """INTEREST_ACK: the sibling applied our interest changes up to `seq`."""
        sibling = self.siblings[index]
        sibling.acked_seq = max(sibling.acked_seq, seq)

    def on_hello(self, index: int, pid: int | None) -> None:
        """The sibling (re)started. Its interest is empty now (its adds follow in order), and it is
        about to receive our whole interest set (the caller sends it after this call) followed by
        INTEREST_SYNCED; it holds its clients until that arrives, so our changes so far count as
        applied."""
        sibling = self.siblings[index]
        sibling.pid = pid
        sibling.known = True
        sibling.gone = False
        sibling.acked_seq = self.seq

    def on_answer(self, index: int, pid: int | None) -> None:
        """INTEREST_SYNCED: the sibling's whole interest, sent after INTEREST_RESET, is complete.
        An answer from an incarnation whose exit was already seen is stale (frames it wrote before
        dying): it does not bring the sibling back, only a successor's HELLO does."""
        sibling = self.siblings[index]
        if sibling.gone and pid is not None and pid == sibling.pid:
            return
        if pid is not None:
            sibling.pid = pid
        sibling.known = True
        sibling.gone = False

    def on_exit(self, index: int, pid: int) -> bool:
        """The process `pid` exited. True when it was the sibling's current incarnation (it is gone
        now: not waited for until a successor's HELLO)."""
        sibling = self.siblings[index]
        if sibling.pid != pid or sibling.gone:
            return False
        sibling.gone = True
        return True

    def on_broken(self, index: int) -> None:
        """The link to the sibling broke for good (a socketpair whose peer closed, without rejoin)."""
        self.siblings[index].gone = True
