"""What streams and consumers need from their surroundings (the service implements it).

Keeping this a Protocol lets the stream and consumer logic run under a fake host in unit tests:
time is read from `now_ns`, timers come from `call_later`, and messages leave through `send`.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Protocol

from appliance.clock import Clock
from appliance.store.layout import SyncJob


class Timer(Protocol):
    def cancel(self) -> None: ...


class Host(Protocol):
    server_name: str
    domain: str
    sync_always: bool
    sync_interval_s: float
    clock: Clock
    rng: random.Random

    def now_ns(self) -> int: ...

    def send(self, subject: str, payload: bytes, *, reply: str = "", header: bytes | None = None) -> None:
        """Publish into the stream's account (replies, deliveries, status messages)."""
        ...

    def publish_many(self, messages: list[tuple[bytes, bytes]], *, flush_now: bool = False) -> None:
        """Publish (subject, payload) pairs, in order, without headers (PubAcks of one commit);
        `flush_now`: onto the sockets before returning."""
        ...

    def republish(self, subject: bytes, header: bytes, payload: bytes) -> None:
        """Publish a stream's copy of a stored message (republish.py) into the account as a
        client of its own: every subscriber gets it, other streams included."""
        ...

    def deliver(self, match: str, subject: str, reply: str, header: bytes | None, payload: bytes) -> int:
        """Route on `match` (an inbox or deliver subject) but hand the message over as `subject`."""
        ...

    def deliver_raw(
        self, key: bytes, subject_b: bytes, reply_b: bytes | None, header: bytes | None, payload: bytes
    ) -> int:
        """`deliver` with every subject already bytes (a consumer's delivery hot path)."""
        ...

    def deliverer(self, key: bytes) -> Callable[[bytes, bytes | None, bytes | None, bytes], int]:
        """`deliver_raw` bound to `key`, for deliveries made within one call."""
        ...

    def has_interest(self, subject: str, queue: str = "") -> bool: ...

    def call_soon(self, fn: Callable[[], None]) -> None: ...

    def call_later(self, delay_s: float, fn: Callable[[], None]) -> Timer: ...

    def run_sync_job(self, job: SyncJob, done: Callable[[OSError | None], None]) -> None:
        """Run job.run() off the loop (an fsync), then call done(None) back on the loop, or
        done(error) when the fsync failed."""
        ...
