"""GroupCommitter: many writers share one fsync (group commit), driven by the owner's loop.

Sans-I/O: the committer never blocks and never starts threads. The owner (a worker's asyncio
loop, or the benchmark's plain loop) drives it:

    ticket = committer.submit(msgs)        # appended to the OS now; sequences assigned
    job = committer.next_job(now_s)        # a SyncJob when an fsync should start, else None
    job.run()                              # the fsync; run it on an executor thread
    for done in committer.complete(job):   # back on the owner's thread
        ack(done)                          # every sequence in done.seqs is durable

With `sync_always` (the default) a ticket completes only after an fsync that started after its
write; writes submitted while an fsync runs wait for the next one, so one fsync covers every
write that arrived meanwhile. With a sync interval (nats-server `sync_interval`), tickets
complete at once and `next_job` asks for an fsync every interval.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from appliance import limits
from appliance.errors import LimitExceeded
from appliance.store import api
from appliance.store.filestore import FileStreamStore
from appliance.store.layout import SyncJob


@dataclass(slots=True)
class Ticket:
    seqs: list[int]
    durable: bool = False
    last_seq: int = field(init=False)

    def __post_init__(self) -> None:
        self.last_seq = self.seqs[-1] if self.seqs else 0


class GroupCommitter:
    def __init__(
        self, store: FileStreamStore, *, sync_always: bool = True, sync_interval_s: float = 120.0, now_s: float = 0.0
    ) -> None:
        self._store = store
        self._sync_always = sync_always
        self._interval_s = sync_interval_s
        self._last_sync_s = now_s
        self._waiting: deque[Ticket] = deque()
        self._in_flight: SyncJob | None = None
        self.fsyncs = 0

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def submit(self, msgs: Sequence[api.MsgInput]) -> Ticket:
        """Append now; the ticket completes when its messages are durable (or at once without sync_always)."""
        if len(self._waiting) >= limits.STORE_COMMIT_WAITERS_MAX:
            raise LimitExceeded("STORE_COMMIT_WAITERS_MAX writes already wait for an fsync")
        ticket = Ticket(self._store.append_batch(msgs))
        if self._sync_always and ticket.seqs:
            self._waiting.append(ticket)
        else:
            ticket.durable = True
        return ticket

    def next_job(self, now_s: float) -> SyncJob | None:
        """The fsync to start now, if any (at most one runs at a time)."""
        if self._in_flight is not None:
            return None
        if self._sync_always:
            if not self._waiting:
                return None
        elif now_s - self._last_sync_s < self._interval_s:
            return None
        self._last_sync_s = now_s
        job = self._store.begin_sync()
        if job is None:
            if not self._waiting:
                return None
            # Already durable (sealing a segment fsyncs it): an empty job still completes tickets.
            job = SyncJob(self._store.durable_seq, [])
        self._in_flight = job
        return job

    def fail(self, job: SyncJob, error: OSError) -> list[Ticket]:
        """The fsync failed: the store is broken; returns every waiting ticket (never durable here)."""
        assert job is self._in_flight, "fail() the job next_job() returned"
        self._in_flight = None
        self._store.fail_sync(job, error)
        failed = list(self._waiting)
        self._waiting.clear()
        return failed

    def complete(self, job: SyncJob) -> list[Ticket]:
        """Record a finished fsync; returns the tickets it made durable, in submission order."""
        assert job is self._in_flight, "complete() the job next_job() returned"
        self._in_flight = None
        self.fsyncs += 1
        durable = self._store.finish_sync(job)
        done: list[Ticket] = []
        while self._waiting and self._waiting[0].last_seq <= durable:
            ticket = self._waiting.popleft()
            ticket.durable = True
            done.append(ticket)
        return done
