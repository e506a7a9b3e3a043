"""StreamRepair: a replica of a replicated stream fetches its lost (damaged) sequences from a peer.

A file store never serves a record it found damaged (a checksum failed, on open or on a read):
the sequence is a gap it reports as lost (`FileStreamStore.lost_ranges`). On a replicated stream
the other replicas hold the same sequences; this replica asks one of them for each lost range
through the stream's catch-up source (cluster/catch_up.py: a range request), one request in
flight, and hands what came back to `FileStreamStore.repair`, which writes the records back at
their own sequences. Sequences inside the asked range that the peer does not send were removed
there (deleted, purged): they are written as removed here too. A peer answers only a range it
holds whole and undamaged (Stream.catch_up_batch), so a gap is never filled from another gap.

Which peer: the leader first when another server leads, else the other voters in turn (a leader
with a damaged record repairs from a follower: leadership does not move for it). A peer that does
not answer is left for the next after JS_CATCHUP_RETRY_S (slower after every voter failed, up
to JS_REPAIR_RETRY_MAX_S). The repair runs when the stream opens,
when a read quarantines a record (FileStreamStore.on_damage), and again after each repair while
lost ranges remain. It pauses while the stream catches up from a snapshot (same catch-up source,
one request per group) and starts again after. A range whose messages would exceed
JS_REPAIR_BYTES_MAX is not fetched (reported, left lost).

Consumers wait for a repair: from the moment damage is found (`note_damage`) until it is repaired
or JS_REPAIR_HOLD_S passed, `holding` is set and a consumer of this replica does not deliver past
a lost sequence (Consumer._load_next): the message comes in order once repaired. Past the hold
(no peer holds it, none is up) consumers skip it, as a lone server's do.

While its store has a lost range the replica's RAFT responses say it is degraded
(RaftGroup.set_degraded): its leader's Cluster Information shows it not current until repaired.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from appliance import limits
from appliance.errors import BrokenError
from appliance.jetstream.host import Timer
from appliance.store.api import StoredMsg
from appliance.store.filestore import FileStreamStore

if TYPE_CHECKING:
    from appliance.jetstream.stream import Stream

logger = logging.getLogger(__name__)


class StreamRepair:
    def __init__(self, stream: Stream, store: FileStreamStore) -> None:
        self.stream = stream
        self.store = store
        self.repaired = 0  # sequences restored from peers since this replica opened
        self.attempts = 0  # range requests sent
        self._token = 0  # bumped on cancel: answers of an older fetch are ignored
        self._busy = False
        self._timer: Timer | None = None
        self._failed = 0
        self._too_large: set[tuple[int, int]] = set()  # ranges reported as too large (logged once)
        self._announced: set[tuple[int, int]] = set()  # ranges whose fetch was logged
        self.holding = False  # consumers wait at a lost sequence (until repaired or the hold ends)
        self._hold_timer: Timer | None = None

    def note_damage(self) -> None:
        """The store found damage (on open, or a read just quarantined a record): consumers hold
        at it for up to JS_REPAIR_HOLD_S, and a repair starts."""
        self._report()
        if not self.holding and self._hold_timer is None and not self.stream.deleted:
            self.holding = True
            self._hold_timer = self.stream.host.call_later(limits.JS_REPAIR_HOLD_S, self._release)
        self.schedule()

    def _release(self) -> None:
        """The hold is over (repaired, or given up on): consumers go on, past what is still lost."""
        if self._hold_timer is not None:
            self._hold_timer.cancel()
            self._hold_timer = None
        if self.holding:
            self.holding = False
            if not self.stream.deleted:
                self.stream.wake_consumers()

    def _report(self) -> None:
        """Tell the group whether this replica's store lacks data (its leader then reports it
        not current: a replica with a lost range is not a whole copy)."""
        if not self.store.closed:
            self.stream.group.set_degraded(bool(self.store.lost_ranges()))

    def schedule(self, delay_s: float = 0.0) -> None:
        """Look for lost ranges soon (now, or after delay_s); nothing when a look is pending."""
        if self._busy or self._timer is not None or self.stream.deleted:
            return
        self._timer = self.stream.host.call_later(delay_s, self._run)

    def cancel(self) -> None:
        """Stop the fetch in flight (a catch-up from a snapshot takes the source over)."""
        self._token += 1
        self._busy = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.stream.deleted:
            self._release()

    @property
    def busy(self) -> bool:
        return self._busy

    def _run(self) -> None:
        self._timer = None
        stream = self.stream
        if stream.deleted or self._busy or stream.fetching or stream.catch_up is None or self.store.closed:
            return
        self._report()
        wanted = [r for r in self.store.lost_ranges() if r not in self._too_large]
        if not wanted:
            self._release()
            return
        # a range every voter failed to give does not keep the next ones waiting: after each
        # round of the voters the next range is asked for
        lo, hi = wanted[self._failed // self._sources_count() % len(wanted)]
        self._busy = True
        if (lo, hi) not in self._announced:  # once per range; a retry logs nothing new
            self._announced.add((lo, hi))
            logger.warning("JetStream stream '%s': replica lost sequences %d..%d to damage; fetching them from a peer",
                           stream.config.name, lo, hi)
        self._fetch(self._token, lo, hi, lo, [], [], 0)

    def _retry_delay(self) -> float:
        """Every voter asked in turn at JS_CATCHUP_RETRY_S, then slower (a range no peer can
        give, or one the store cannot rewrite, is not asked for in a tight loop)."""
        rounds = self._failed // self._sources_count()
        return min(limits.JS_CATCHUP_RETRY_S * 2 ** min(rounds, 6), limits.JS_REPAIR_RETRY_MAX_S)

    def _sources_count(self) -> int:
        return max(len(self.stream.group.voters()) - 1, 1)

    def _source(self) -> str:
        group = self.stream.group
        own = group.core.id
        leader = group.leader()
        others = sorted(p for p in group.voters() if p != own and p != leader)
        if leader and leader != own:
            others.insert(0, leader)
        return others[self._failed % len(others)] if others else ""

    def _fetch(self, token: int, lo: int, hi: int, at: int, msgs: list[StoredMsg], gone: list[int],
               size: int) -> None:
        stream = self.stream
        catch_up = stream.catch_up
        assert catch_up is not None
        source = self._source()

        def got(batch: list[StoredMsg] | None) -> None:
            if token != self._token or stream.deleted or self.store.closed:
                return
            if batch is None:  # not answered, or that peer lacks the range whole: the next one, later
                self._failed += 1
                self._busy = False
                self.schedule(self._retry_delay())
                return
            batch = [msg for msg in batch if at <= msg.seq <= hi]
            end = batch[-1].seq if batch else hi
            held = {msg.seq for msg in batch}
            gone.extend(seq for seq in range(at, end + 1) if seq not in held)
            msgs.extend(batch)
            grown = size + sum(len(m.subject) + len(m.headers) + len(m.payload) for m in batch)
            if grown > limits.JS_REPAIR_BYTES_MAX:
                self._too_large.add((lo, hi))
                self._busy = False
                logger.error("JetStream stream '%s': lost sequences %d..%d hold over %d bytes; not repaired",
                             stream.config.name, lo, hi, limits.JS_REPAIR_BYTES_MAX)
                self.schedule()
                return
            if end < hi:
                self._fetch(token, lo, hi, end + 1, msgs, gone, grown)
                return
            self._busy = False
            self._apply(lo, hi, msgs, gone, source)

        self.attempts += 1
        catch_up.fetch(source, at, hi, got)

    def _apply(self, lo: int, hi: int, msgs: list[StoredMsg], gone: list[int], source: str) -> None:
        stream = self.stream
        try:
            restored = self.store.repair(msgs, gone)
        except BrokenError as exc:  # a write failed: the store is broken until reopened (fail closed)
            logger.error("JetStream stream '%s': repairing sequences %d..%d failed: %s", stream.config.name, lo, hi, exc)
            return
        if not restored:  # a seal job ran meanwhile, or the damage changed: look again later
            self._failed += 1
            self.schedule(self._retry_delay())
            return
        self._failed = 0
        self._report()
        self.repaired += len(restored)
        stream.note_repaired()
        removed = len(set(gone) & set(restored))
        logger.warning(
            "JetStream stream '%s': repaired sequences %d..%d from peer %s (%d message(s) restored, %d removed there)",
            stream.config.name, lo, hi, source, len(restored) - removed, removed,
        )
        self.schedule()  # more lost ranges: the next one
