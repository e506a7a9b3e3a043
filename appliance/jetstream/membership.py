"""One account's stream groups changing members on this server (the decisions: regroup.py).

`applied(stream, group)` runs when the meta record's group of a stream changed here (in meta log
order); `reconcile()` runs on every cluster check and leadership change:

  - joining: the stream (and its consumers) open with RAFT logs that wait for the leader;
  - converting: an R1 stream that becomes replicated reopens on a durable log seeded with a
    snapshot of its store's position (regroup.py explains why the group id stays);
  - leading: one membership change at a time towards the recorded peers, streams and consumers;
  - leaving: the replica runs until its group no longer counts it (its removal applied here, or
    no leader has contacted it for LEAVE_GRACE_S), then it closes and its copy is deleted.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from appliance import limits
from appliance.errors import ApplianceError
from appliance.jetstream.config import consumer_config_from_record, stream_config_from_record
from appliance.jetstream.regroup import joining_of, next_change, peers_of

if TYPE_CHECKING:
    from appliance.cluster.group import RaftGroup
    from appliance.jetstream.service import AccountJetStream
    from appliance.jetstream.stream import Stream

logger = logging.getLogger(__name__)


class Membership:
    def __init__(self, ajs: AccountJetStream) -> None:
        self.ajs = ajs
        self.leaving: dict[str, float] = {}  # stream -> when a leader last contacted this replica

    def _record(self, name: str) -> dict[str, object] | None:
        return self.ajs.service.meta.state.accounts.get(self.ajs.account.name, {}).get(name)

    def applied(self, name: str) -> None:
        """The meta record of stream `name` (its group) changed: join, convert, or start leaving."""
        ajs = self.ajs
        service = ajs.service
        record = self._record(name)
        if record is None or not service.meta.clustered:
            return
        group = record.get("group")
        me = service.peer
        stream = ajs.streams.get(name)
        if me not in peers_of(group):
            if stream is not None and name not in self.leaving:
                logger.info("JetStream: leaving the group of stream '%s > %s' (moved to %s)", ajs.account.name,
                            name, ", ".join(service.peer_name(p) for p in peers_of(group)))
                self.leaving[name] = service.clock.monotonic()
            return
        self.leaving.pop(name, None)
        if stream is None:
            self._open(name, record, join=me in joining_of(group))
        elif not stream.replicated and isinstance(group, dict) and group.get("raft"):
            self._convert(stream, record)
        self.reconcile()

    def _open(self, name: str, record: dict[str, object], *, join: bool, convert: bool = False) -> None:
        ajs = self.ajs
        config_record = record["config"]
        assert isinstance(config_record, dict)
        if join:
            logger.info("JetStream: joining the group of stream '%s > %s' (catching up from its leader)",
                        ajs.account.name, name)
        stream = ajs.open_stream(stream_config_from_record(config_record), int(str(record["created"])),
                                 record.get("group"), join=join, convert=convert)
        consumers = record["consumers"]
        assert isinstance(consumers, dict)
        for consumer_record in consumers.values():
            if not ajs.service.holds(consumer_record.get("group")):
                continue
            config = consumer_config_from_record(consumer_record["config"])
            ajs.open_consumer(stream, config, int(str(consumer_record["created"])), fresh=False,
                              group=consumer_record.get("group"), join=join)

    def _convert(self, stream: Stream, record: dict[str, object]) -> None:
        """R1 -> replicated, in place: the store's position becomes the durable log's snapshot. The
        position is read by the reopen, after the close applied the publishes still in flight (read
        before, a publish stored by the close was in no replica's snapshot: CI saw one missing)."""
        ajs = self.ajs
        name = stream.config.name
        ajs.close_stream(name, remove=False, keep_memory=True)
        self._open(name, record, join=False, convert=True)
        logger.info("JetStream: stream '%s > %s' becomes replicated (%d messages on this server)",
                    ajs.account.name, name, ajs.streams[name].store.state().msgs)

    def reconcile(self) -> None:
        """Leaders move their groups one change towards the recorded peers; leaving replicas go."""
        ajs = self.ajs
        service = ajs.service
        if not service.meta.clustered:
            return
        now = service.clock.monotonic()
        for name, stream in list(ajs.streams.items()):
            record = self._record(name)
            if record is None:
                continue
            if name in self.leaving:
                self._leave(name, stream, now)
                continue
            wanted = peers_of(record.get("group"))
            if stream.replicated and wanted:
                _step(stream.group, wanted, service.peer, f"stream '{ajs.account.name} > {name}'")
            consumers = record["consumers"]
            assert isinstance(consumers, dict)
            for consumer in list(stream.consumers.values()):
                consumer_record = consumers.get(consumer.name)
                if consumer.replicated and isinstance(consumer_record, dict):
                    peers = peers_of(consumer_record.get("group"))
                    if peers:
                        _step(consumer.group, peers, service.peer,
                              f"consumer '{ajs.account.name} > {name} > {consumer.name}'")

    def _leave(self, name: str, stream: Stream, now: float) -> None:
        group = stream.group
        service = self.ajs.service
        if group.is_leader():  # the leader hands over: its own removal comes last (regroup.py)
            record = self._record(name)
            _step(group, peers_of(record.get("group") if record else None), service.peer, f"stream '{name}'")
            self.leaving[name] = now
            return
        removed = service.peer not in group.voters() + group.learners()
        if not removed and group.leader() and group.leader_seen_ago_s() < limits.JS_LEAVE_GRACE_S / 2:
            self.leaving[name] = now  # still counted by its leader: it may be needed for a quorum
            return
        if not removed and now - self.leaving[name] < limits.JS_LEAVE_GRACE_S:
            return
        del self.leaving[name]
        logger.info("JetStream: removed from the group of stream '%s > %s': deleting this server's copy",
                    self.ajs.account.name, name)
        self.ajs.drop_copy(name)


def _step(group: RaftGroup, wanted: list[str], own: str, label: str) -> None:
    """One membership change of a group this server leads (none while one is in flight)."""
    if not group.is_leader() or not group.ready_to_lead():
        return
    change = next_change(group.voters(), wanted, own, group.learners())
    if change is None:
        return
    op, peer = change
    try:
        if op == "add_learner":
            group.add_learner(peer)
        else:
            group.remove_voter(peer)
    except ApplianceError as exc:  # a change in flight, or the log is full: the next check retries
        logger.debug("%s: %s %s later: %s", label, op, peer, exc)
        return
    logger.info("JetStream: %s: %s peer %s", label,
                "adding (as a learner until caught up)" if op == "add_learner" else "removing", peer)
