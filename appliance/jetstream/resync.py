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
back as removed (the catch-up sends only what is stored), as they are there.

While it resyncs the replica reports itself degraded (RaftGroup.set_degraded): its leader's
Cluster Information shows it not current. Nothing acknowledged is lost: the replica only adds
what its leader holds. A replica AHEAD of the batch (it holds sequences the leader decided
anew) is not handled here: it needs its store cut back (a store truncate), logged as an error.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from appliance.raft.types import Entry
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

    @property
    def active(self) -> bool:
        return bool(self._held)

    def start(self, first_seq: int, held: Sequence[Entry]) -> None:
        """The decided batch at first_seq (held[0]) lies past this replica's last sequence + 1:
        fetch the sequences between, then apply `held` (the rest of this apply call)."""
        stream = self.stream
        assert not self._held, "one resync at a time: the group is paused during it"
        state = stream.store.state()
        start, wanted = state.last_seq + 1, first_seq - 1
        self._held = list(held)
        self.resyncs += 1
        self.fetched += wanted - start + 1
        logger.warning(
            "Resetting stream cluster state for '%s': this replica's last sequence %d is behind the "
            "leader's batch at sequence %d; catching up sequences %d..%d from the leader",
            stream.config.name, state.last_seq, first_seq, start, wanted,
        )
        stream.group.set_degraded(True)
        stream.fetch_missing(start, wanted, self._caught_up)

    def _caught_up(self) -> None:
        stream = self.stream
        held, self._held = self._held, []
        store = stream.store
        lost = isinstance(store, FileStreamStore) and bool(store.lost_ranges())
        stream.group.set_degraded(lost)
        logger.warning(
            "JetStream stream '%s': replica caught up to sequence %d from its leader; applying %d held entries",
            stream.config.name, store.state().last_seq, len(held),
        )
        if not stream.deleted:
            stream.apply(held)  # may find the next batch behind again: another resync starts
