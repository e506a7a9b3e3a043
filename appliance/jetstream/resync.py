"""StreamResync: a replica of a replicated stream whose store is behind a decided batch catches up.

Every replica stores a leader's decided batch (ops.KIND_DECIDED) at the sequence the leader gave
it, only right after its own last sequence (Stream._apply_decided). A follower whose store ends
before that (it lacks sequences its leader holds: its store lost its tail underneath its log)
would refuse this batch and every later one, different from its leader forever. nats-server
resets such a replica's clustered state ("Resetting stream cluster state for ...",
jetstream_cluster.go resetClusteredState) and it catches up from its leader. Here the replica
does what a replica behind its leader's snapshot does (Stream.restore): it pauses its group
(no later entry applies onto a store with a hole), fetches the missing sequences from its
leader through the stream's catch-up source (Stream.fetch_missing: cluster/catch_up.py over the
routes; another voter when the leader does not answer), then applies the batch it could not
and the entries after it, and resumes. Sequences the leader no longer holds in that range come
back as removed (the catch-up sends only what is stored), as they are there. Before that it asks
its leader for the message at its own first sequence: when the leader no longer holds it (purged
since) or holds another, the store is not the start of the leader's and the replica starts over
as below (so first sequence and removed sequences end up the leader's too).

While it resyncs the replica reports itself degraded (RaftGroup.set_degraded): its leader's
Cluster Information shows it not current. Nothing acknowledged is lost: the replica only adds
what its leader holds (the leader holds every acknowledged message).

A follower AHEAD of the batch (its store holds the batch's first sequence already) first asks
its leader for its message there. The same message: the leader's store holds what this replica
holds, so the leader refused its own batch too (it decides again from its store) and this
replica refuses it as well. Otherwise this replica differs from its leader and cannot keep its
store: it empties it (Stream.reset_store: MemoryStreamStore / FileStreamStore.reset, a file
store's applied journal removed first) and fetches every message its leader holds before the
batch, as a new replica would, then applies the held entries. Only what the leader never
decided is dropped; the leader holds every acknowledged message. A leader never resyncs this
way (it has no one to ask): its own batches are decided again (Stream._mismatch).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from appliance import limits
from appliance.raft.types import Entry
from appliance.store.api import StoredMsg
from appliance.store.filestore import FileStreamStore

if TYPE_CHECKING:
    from appliance.jetstream.stream import Stream

logger = logging.getLogger(__name__)


class StreamResync:
    def __init__(self, stream: Stream) -> None:
        self.stream = stream
        self.resyncs = 0  # catch-ups started because a decided batch did not follow the store
        self.fetched = 0  # sequences asked for by them
        self._held: list[Entry] = []  # the batch that did not follow, and the entries after it
        self._reset = False  # the store was emptied: this resync refills it whole

    @property
    def active(self) -> bool:
        return bool(self._held)

    def start(self, first_seq: int, held: Sequence[Entry]) -> None:
        """The decided batch at first_seq (held[0]) does not follow this replica's last sequence:
        pause the group, ask the leader for one message to tell which case this is, then fetch
        what is missing or start over; then apply `held` (the rest of this apply call)."""
        stream = self.stream
        assert not self._held, "one resync at a time: the group is paused during it"
        state = stream.store.state()
        self._held = list(held)
        self.resyncs += 1
        stream.group.pause_apply()
        stream.group.set_degraded(True)
        if stream.repair is not None:
            stream.repair.cancel()  # one request per group: the resync takes the source over
        if first_seq > state.last_seq + 1:  # behind (the store is not empty: Stream._apply_decided)
            self._probe(state.first_seq, first_seq)
        else:
            self._probe(first_seq, first_seq)

    def _probe(self, seq: int, first_seq: int) -> None:
        """Ask the leader for its message at `seq` and compare it with this replica's.
        Behind (seq is this replica's first sequence): the same, the store is the start of the
        leader's, the sequences after it are fetched; not (the leader removed it since, or it
        differs), the replica starts over. Ahead (seq is the batch's first sequence): the same,
        the leader's store holds what this replica holds there, so it refused its own batch too
        (Stream._mismatch: it decides again from its store) and this replica refuses it as
        well; not, this replica differs from its leader: it starts over."""
        stream = self.stream
        catch_up = stream.catch_up
        assert catch_up is not None
        leader = stream.group.leader()

        def again() -> None:
            if not stream.deleted:
                self._probe(seq, first_seq)

        def got(batch: list[StoredMsg] | None) -> None:
            if stream.deleted:
                return
            if batch is None:  # not answered (or the batch not applied there yet): ask again
                stream.host.call_later(limits.JS_CATCHUP_RETRY_S, again)
                return
            theirs = next((msg for msg in batch if msg.seq == seq), None)
            same = theirs == stream.store.load(seq)
            if seq == first_seq:
                self._refuse(first_seq) if same else self._start_over(first_seq, "is ahead of")
            elif same:
                self._catch_up(first_seq)
            else:
                self._start_over(first_seq, f"holds sequence {seq} unlike its leader and is behind")

        if not leader or leader == stream.group.core.id:  # only its leader can tell: wait for one
            stream.host.call_later(limits.JS_CATCHUP_RETRY_S, again)
            return
        catch_up.fetch(leader, seq, seq, got)

    def _catch_up(self, first_seq: int) -> None:
        stream = self.stream
        last = stream.store.state().last_seq
        logger.warning(
            "Resetting stream cluster state for '%s': this replica's last sequence %d is behind the "
            "leader's batch at sequence %d; catching up sequences %d..%d from the leader",
            stream.config.name, last, first_seq, last + 1, first_seq - 1,
        )
        self._fetch(last + 1, first_seq - 1)

    def _refuse(self, first_seq: int) -> None:
        stream = self.stream
        held, self._held = self._held[1:], []
        logger.error(
            "stream %s: the leader's batch at sequence %d does not follow this replica's store, nor its "
            "leader's (the leader decided from a state no replica has): not applied, as on the leader",
            stream.config.name, first_seq,
        )
        store = stream.store
        stream.group.set_degraded(isinstance(store, FileStreamStore) and bool(store.lost_ranges()))
        stream.apply(held)
        if not self._held:
            stream.group.resume_apply()
            if stream.repair is not None:
                stream.repair.schedule()

    def _start_over(self, first_seq: int, why: str) -> None:
        stream = self.stream
        if not stream.can_reset:  # a seal job holds a segment: in a moment

            def later() -> None:
                if not stream.deleted:
                    self._start_over(first_seq, why)

            stream.host.call_later(limits.JS_CATCHUP_RETRY_S, later)
            return
        state = stream.store.state()
        logger.warning(
            "Resetting stream cluster state for '%s': this replica (last sequence %d) %s the leader's "
            "batch at sequence %d; discarding its %d message(s) and catching up sequences 1..%d from the leader",
            stream.config.name, state.last_seq, why, first_seq, state.msgs, first_seq - 1,
        )
        stream.reset_store()
        self._reset = True
        self._fetch(1, first_seq - 1)

    def _fetch(self, start: int, wanted: int) -> None:
        stream = self.stream
        self.fetched += max(wanted - start + 1, 0)
        if wanted < start:  # nothing before the batch: apply it onto the empty store
            self._caught_up()  # (a batch at sequence 1 after _start_over)
            if not self._held:
                stream.group.resume_apply()
            return
        stream.group.set_degraded(True)
        stream.fetch_missing(start, wanted, self._caught_up)

    def _caught_up(self) -> None:
        stream = self.stream
        held, self._held = self._held, []
        if self._reset and held:
            self._reset = False
            stream.note_refilled(held[0].index - 1)
        store = stream.store
        lost = isinstance(store, FileStreamStore) and bool(store.lost_ranges())
        stream.group.set_degraded(lost)
        logger.warning(
            "JetStream stream '%s': replica caught up to sequence %d from its leader; applying %d held entries",
            stream.config.name, store.state().last_seq, len(held),
        )
        if not stream.deleted:
            stream.apply(held)  # may find the next batch behind again: another resync starts
