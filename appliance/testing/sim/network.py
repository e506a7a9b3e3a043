"""SimNetwork: seeded delivery of RAFT messages with delay, drop, duplication, reordering, partitions.

Messages are scheduled for a future tick; reordering comes from random per-message delay.
A partition is a set of blocked (sender, receiver) node pairs, checked both at send and delivery.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass

from appliance.raft.types import Message


@dataclass(frozen=True, slots=True)
class NetworkFaults:
    drop: float = 0.0  # probability a message is lost
    duplicate: float = 0.0  # probability it is delivered twice
    delay_ticks_max: int = 0  # extra random delay (0..max): reorders messages
    delay_ticks_min: int = 1


class SimNetwork:
    def __init__(self, rng: random.Random, faults: NetworkFaults, *, queue_max: int) -> None:
        self.rng = rng
        self.faults = faults
        self.queue_max = queue_max
        self.queue: list[tuple[int, int, str, Message, int]] = []  # (due, seq, group, message, sent)
        self.blocked: set[tuple[str, str]] = set()
        self.clogged: dict[tuple[str, str], tuple[int, int]] = {}  # link -> (until tick, delay ticks)
        self.sequence = 0
        self.sent = 0
        self.dropped = 0

    def send(self, now: int, group: str, message: Message) -> None:
        self.sent += 1
        if (message.sender, message.to) in self.blocked or len(self.queue) >= self.queue_max:
            self.dropped += 1
            return
        if self.faults.drop and self.rng.random() < self.faults.drop:
            self.dropped += 1
            return
        copies = 2 if self.faults.duplicate and self.rng.random() < self.faults.duplicate else 1
        for _ in range(copies):
            delay = self.faults.delay_ticks_min
            if self.faults.delay_ticks_max:
                delay += self.rng.randrange(self.faults.delay_ticks_max + 1)
            clog = self.clogged.get((message.sender, message.to))
            if clog is not None and now < clog[0]:
                delay += clog[1]
            self.sequence += 1
            heapq.heappush(self.queue, (now + delay, self.sequence, group, message, now))

    def due(self, now: int) -> list[tuple[str, Message]]:
        ready: list[tuple[str, Message]] = []
        while self.queue and self.queue[0][0] <= now:
            _, _, group, message, _ = heapq.heappop(self.queue)
            if (message.sender, message.to) in self.blocked:
                self.dropped += 1
                continue
            ready.append((group, message))
        return ready

    def lose_unflushed(self, sender: str, *, sent_since: int) -> None:
        """A crashed process takes its not-yet-flushed sends with it: drop what it sent lately."""
        kept = [item for item in self.queue if not (item[3].sender == sender and item[4] >= sent_since)]
        self.dropped += len(self.queue) - len(kept)
        self.queue = kept
        heapq.heapify(self.queue)

    def partition(self, side: set[str], nodes: list[str]) -> None:
        """Cut every link between `side` and the rest."""
        for a in side:
            for b in nodes:
                if b not in side:
                    self.blocked.add((a, b))
                    self.blocked.add((b, a))

    def clog(self, link: tuple[str, str], *, until: int, delay_ticks: int) -> None:
        """Until tick `until`, messages on `link` arrive `delay_ticks` late (a congested path)."""
        self.clogged[link] = (until, delay_ticks)

    def heal(self) -> None:
        self.blocked.clear()
        self.clogged.clear()
