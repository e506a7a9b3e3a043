"""A stream: a single-voter RAFT group whose state machine applies messages into a StreamStore.

Theory of operation. Publishes that arrive during one loop turn are collected (`on_publish`) and
proposed as one MSGS entry; the group commits it at once (one voter) and `apply` runs every
nats-server publish check in order (expected stream, TTL, expected last subject sequence,
expected last sequence, Nats-Msg-Id dedupe, expected last msg id, rollup, limits), stores what
passes and records one outcome per message. The PubAcks of a batch leave from its commit
callback, never from inside the proposal. The group driver (cluster/group.py) owns the order:
with `sync_always` (the default) this stream is its AppliedSync, so a batch is acknowledged only
after one fsync of the store that covers every batch applied meanwhile (inline for a lone
publisher, off the loop otherwise); with a sync interval, PubAcks leave at commit and a timer
syncs.
The dedupe window and the last msg id are rebuilt from the store on restart.

Replicated (R>1, `Replication`): the group has voters on other servers and a durable RAFT log;
a batch commits once a quorum persisted it. There the leader decides each publish when it
proposes it (`_propose_decided`, decide.py, as nats-server's checkMsgHeadersPreClusteredProposal):
every check above plus the account/server limits, against the store and what it proposed and has
not applied yet; refusals and duplicates of stored messages are answered at once, without a
proposal; the accepted ones go as one DECIDED entry (their first sequence + the messages) that
every replica stores without checking again, only that it starts right after its last sequence
(a replica where it does not stores nothing and logs it; the leader then decides again from its
store). Limits, retention, rollup purges and TTLs apply on every replica alike. A file store records which RAFT index it holds
(applied.py): on open it is cut back to its last record and the group re-applies only the
entries after it. A replica behind the leader's snapshot fetches the leader's stored messages
(`restore`, through its CatchUpSource) and serves its own to others (`catch_up_batch`,
cluster/catch_up.py).
"""

from __future__ import annotations

import heapq
import json
import logging
import random
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from appliance import limits
from appliance.errors import BrokenError, CorruptData, LimitExceeded, NotLeader, ProposalDropped
from appliance.jetstream import advisories, errors, ops
from appliance.jetstream.applied import AppliedPosition
from appliance.jetstream.applied import forget as forget_applied
from appliance.jetstream.config import StreamConfig
from appliance.jetstream.decide import InFlight, Projection, discard_new_refusal
from appliance.jetstream.groups import (
    CatchUpSource,
    Replication,
    memory_storage,
    replicated_group,
    start_group,
)
from appliance.jetstream.host import Host, Timer
from appliance.jetstream.repair import StreamRepair
from appliance.jetstream.republish import republisher_for
from appliance.jetstream.sources import apply_mirror
from appliance.jetstream.storeview import last_seq, last_seq_of_subject, stored_bytes, stored_msgs, subject_of
from appliance.jetstream.subjects import subject_matches
from appliance.jetstream.wire import go_json, header_value, parse_go_duration, strip_status
from appliance.raft.types import Entry, EntryType
from appliance.store import api
from appliance.store.api import StoredMsg
from appliance.store.filestore import FileStreamStore

if TYPE_CHECKING:
    from appliance.jetstream.consumer import Consumer

logger = logging.getLogger(__name__)

HDR_MSG_ID = b"Nats-Msg-Id"
HDR_EXPECTED_STREAM = b"Nats-Expected-Stream"
HDR_EXPECTED_LAST_SEQ = b"Nats-Expected-Last-Sequence"
HDR_EXPECTED_LAST_SUBJECT_SEQ = b"Nats-Expected-Last-Subject-Sequence"
HDR_EXPECTED_LAST_SUBJECT_SEQ_SUBJECT = b"Nats-Expected-Last-Subject-Sequence-Subject"
HDR_EXPECTED_LAST_MSG_ID = b"Nats-Expected-Last-Msg-Id"
HDR_ROLLUP = b"Nats-Rollup"
HDR_TTL = b"Nats-TTL"
HEADER_BYTES_MAX = 64 * 1024


@dataclass(frozen=True, slots=True)
class Outcome:
    seq: int = 0
    duplicate: bool = False
    error: errors.JsApiError | None = None


Reply = str  # "" when the publisher asked for no ack


class PublishLimits(Protocol):
    """The account and server limits a stream's publishes are held to (resources.py PublishGuard)."""

    def __call__(self, stream: Stream, msgs: list[ops.InMsg]) -> list[Outcome] | None:
        """Apply a batch under the limits: None when it fits whole (the caller applies it)."""
        ...

    def refusals(self, stream: Stream, msgs: Sequence[ops.InMsg], pending: int) -> list[errors.JsApiError | None] | None:
        """A replicated leader's check before it proposes, `pending` bytes in flight: None when all fit."""
        ...


def store_limits(config: StreamConfig) -> api.StoreLimits:
    return api.StoreLimits(
        max_msgs=config.max_msgs,
        max_bytes=config.max_bytes,
        max_age_ns=config.max_age,
        max_msgs_per_subject=config.max_msgs_per_subject,
        max_msg_size=config.max_msg_size,
        discard="new" if config.discard == "new" else "old",
        discard_new_per_subject=config.discard_new_per_subject,
    )


class Stream:
    def __init__(
        self,
        *,
        config: StreamConfig,
        created_ns: int,
        store: api.StreamStore,
        host: Host,
        peer: str,
        group_id: str,
        replication: Replication | None = None,
    ) -> None:
        self.config = config
        self.created_ns = created_ns
        self.store = store
        self.host = host
        self.consumers: dict[str, Consumer] = {}
        self.deleted = False
        self._file = store if isinstance(store, FileStreamStore) else None
        # replicated on a file store: which RAFT index the store holds, kept beside it (applied.py);
        # opened first: it may cut back what a crash left half-applied, before anything reads it
        self._applied: AppliedPosition | None = None
        self._applied_floor = 0  # entries up to it are in the store already: never applied again
        if replication is not None and self._file is not None:
            self._applied = AppliedPosition(self._file)
            self._applied_floor = self._applied.open(config.name)
        elif self._file is not None:
            forget_applied(self._file)
        self._dedupe: OrderedDict[str, tuple[int, int]] = OrderedDict()
        self._last_msg_id = ""
        self._inbox: list[tuple[ops.InMsg, bytes]] = []  # publishes of this loop turn, reply b"" for none
        self._results: dict[int, object] = {}
        self._unanswered = 0  # publishes proposed and not answered yet (the inline-fsync rule)
        self._flush_now = False
        # id(entry data) -> (data, messages, what a decided entry adds to the projection)
        self._proposed: dict[int, tuple[bytes, list[ops.InMsg], InFlight | None]] = {}
        self._syncing = False
        self._ack_prefix: bytes | None = None  # b'{"stream":"NAME","seq":' (PubAck hot path)
        self._republisher = republisher_for(config.name, config.republish)
        self._republishing = False  # a copy is being routed: the stream ignores its own copies
        self._expiry_timer: Timer | None = None
        self._interval_timer: Timer | None = None
        self.report_damage()
        self._rebuild_dedupe()
        self._ttls: list[tuple[int, int]] = []  # heap of (expires_ns, seq): per-message TTL (Nats-TTL)
        self._ttl_timer: Timer | None = None
        self._rebuild_ttls()
        # account/server limits (resources.py): None unless a limit applies to this stream
        self.guard: PublishLimits | None = None
        self.replicated = replication is not None
        # replicated: the leader decides each publish when it proposes it (decide.py)
        self._projection = Projection() if replication is not None else None
        self._projection_term = -1
        self._decide_retry: Timer | None = None
        self.mismatches = 0  # decided entries this replica could not apply (its last sequence differed)
        self._fetching = False  # a replica fetching what the leader's snapshot stands for
        self._catch_up = replication.catch_up if replication is not None else None
        self._starting = True  # restore() during the group's construction defers its fetch
        self._fetch_at_start: tuple[CatchUpSource, int, int, int, int] | None = None
        self._repair: StreamRepair | None = None
        if replication is not None:
            self.group = replicated_group(
                name=group_id, peer=peer, replication=replication, machine=self, clock=host.clock,
                rng=random.Random(host.rng.random()), scheduler=host,
                # the durable log is rewritten on compaction: rarely, as the meta and consumer logs
                snapshot_entries=limits.RAFT_SNAPSHOT_ENTRIES,
            )
        else:
            self.group = start_group(
                name=group_id,
                peer=peer,
                storage=memory_storage(peer),
                machine=self,
                clock=host.clock,
                rng=random.Random(host.rng.random()),
                # applied batches live on in the store: the in-memory log drops them soon (it held
                # every payload until RAFT_SNAPSHOT_ENTRIES batches, hundreds of MB)
                snapshot_entries=limits.JS_STREAM_LOG_ENTRIES,
                scheduler=host,
                # the log is in memory: the store is the durable copy, synced before an ack
                applied_sync=self if self._file is not None and host.sync_always else None,
            )
        self._starting = False
        # a replica whose store lost records to damage fetches them from a peer (repair.py)
        if replication is not None and self._file is not None and self._catch_up is not None:
            self._repair = StreamRepair(self, self._file)
            self._file.on_damage = self._repair.note_damage
            if self._file.lost_ranges():
                self._repair.note_damage()
        if self._fetch_at_start is not None:  # restarted behind its log's snapshot: fetch first
            self.group.pause_apply()
            self._fetching = True
            self._fetch_from(*self._fetch_at_start)
            self._fetch_at_start = None
        self._arm_expiry()
        if self._file is not None and not host.sync_always:
            self._arm_interval_sync()

    # --- the RAFT state machine ------------------------------------------------------------------

    def apply(self, entries: Sequence[Entry]) -> None:
        for entry in entries:
            if entry.type != EntryType.NORMAL or not entry.data or entry.index <= self._applied_floor:
                continue
            kind = entry.data[0]
            if kind == ops.KIND_MSGS:
                local = self._proposed.get(id(entry.data))
                if local is not None and local[0] is entry.data:
                    msgs = local[1]
                else:
                    msgs = ops.decode_msgs(entry.data)
                outcomes = self._apply_msgs(msgs)
                if self.group.awaits(entry.index):  # proposed here: its on_done answers from them
                    self._results[entry.index] = outcomes
            elif kind == ops.KIND_DECIDED:
                local = self._proposed.get(id(entry.data))
                if local is not None and local[0] is entry.data:
                    first_seq, msgs, inflight = local[2].first_seq, local[1], local[2]
                else:
                    (first_seq, msgs), inflight = ops.decode_decided(entry.data), None
                outcomes = self._apply_decided(first_seq, msgs, inflight)
                if self.group.awaits(entry.index):
                    self._results[entry.index] = outcomes
            else:
                kind, body = ops.decode_op(entry.data)
                result = self._apply_op(kind, body)
                if self.group.awaits(entry.index):
                    self._results[entry.index] = result
                if kind == ops.KIND_DELETE and body.get("erase") and self._applied is not None:
                    self._applied.settle(entry.index)  # the erase rewrote a segment: older records are void
        if self._applied is not None and entries:
            self._applied.note(max(entries[-1].index, self._applied.index))

    def _note_store_changed(self) -> None:
        """The store changed outside the log (expiry, acks, catch-up): record where it is now."""
        if self._applied is not None and not self.deleted:
            self._applied.note(self._applied.index)

    def applied_index(self) -> int:
        """R1: 0 (its log is in memory and starts empty). Replicated on a file store: the index
        its store was cut back to on open (applied.py). Replicated in memory: 0 (the store
        starts empty and is refilled from the log, or from the leader after a snapshot)."""
        return self._applied_floor

    def snapshot(self) -> bytes:
        """R1: nothing (the state is the store itself, durable on its own). Replicated: the
        store's position, taken when the log is about to be compacted past what the store
        holds, so the store is synced first (its messages must outlive the log entries)."""
        if not self.replicated:
            return b""
        if self._file is not None:
            self._file.sync()
            if self._applied is not None:
                self._applied.sync()  # after the store's fsync: it never names bytes not durable
        state = self.store.state()
        position = {"first_seq": state.first_seq, "last_seq": state.last_seq, "last_ts": state.last_ts_ns}
        return go_json(position)

    def restore(self, data: bytes) -> None:
        """A replica installs the leader's snapshot. Behind it, the replica pauses its group
        (nothing after the snapshot may apply onto a store with a hole), fetches the leader's
        stored messages in bounded batches, one batch in flight, then resumes."""
        if not data:
            assert not self.replicated or self.store.state().last_seq == 0, "empty snapshot on a used replica"
            return
        snap = json.loads(data)
        first, wanted, last_ts = int(snap["first_seq"]), int(snap["last_seq"]), int(snap["last_ts"])
        have = self.store.state().last_seq
        if have >= wanted:
            self._drop_below(first)
            return
        catch_up = self._catch_up
        if catch_up is None:
            raise BrokenError(
                f"stream {self.config.name}: replica holds up to {have}, the snapshot covers {wanted}, "
                "and no catch-up source is configured"
            )
        if self._starting:  # called by the group's constructor: the fetch starts once it exists
            self._fetch_at_start = (catch_up, max(have + 1, first), wanted, first, last_ts)
            return
        self.group.pause_apply()
        self._fetching = True
        if self._repair is not None:
            self._repair.cancel()  # one request per group: the catch-up takes the source over
        self._fetch_from(catch_up, max(have + 1, first), wanted, first, last_ts)

    @property
    def fetching(self) -> bool:
        """Catching up from the leader's snapshot (the group's apply is paused)."""
        return self._fetching

    @property
    def catch_up(self) -> CatchUpSource | None:
        return self._catch_up

    @property
    def repair(self) -> StreamRepair | None:
        return self._repair

    def note_repaired(self) -> None:
        """The store rewrote a segment to put lost records back: positions recorded before it no
        longer name the same bytes (as after an erase); the msg ids of the restored messages
        count for dedupe again; consumers count and read again."""
        if self._applied is not None and not self.deleted:
            self._applied.settle(self._applied.index)
        self._dedupe.clear()
        self._rebuild_dedupe()
        self._removed()

    def wake_consumers(self) -> None:
        self._removed()

    def holds_lost(self, start: int, seq: int) -> bool:
        """A consumer reading from `start` that found `seq` next must wait: a lost sequence lies
        between them and a repair is expected (repair.py holding)."""
        repair = self._repair
        if repair is None or not repair.holding or self._file is None:
            return False
        return any(lo < seq and start <= hi for lo, hi in self._file.lost_ranges())

    def catch_up_batch(
        self, from_seq: int, to_seq: int, max_msgs: int, max_bytes: int
    ) -> list[StoredMsg] | None:
        """Serve a lagging replica (cluster/catch_up.py CatchUpProvider): stored messages in
        [from_seq, to_seq], at most max_msgs and about max_bytes (at least one); None unless this
        replica holds the whole range (it is itself fetching, or behind)."""
        if self.deleted or self._fetching or self.store.state().last_seq < to_seq or self._lost_in(from_seq, to_seq):
            return None
        out: list[StoredMsg] = []
        size = 0
        for msg in self.store.scan(from_seq):
            if msg.seq > to_seq or len(out) >= max_msgs:
                break
            size += len(msg.subject) + len(msg.headers) + len(msg.payload)
            if out and size > max_bytes:
                break
            out.append(msg)
        # a record found damaged by this very scan was skipped: the answer would call it removed
        return None if self._lost_in(from_seq, out[-1].seq if out else to_seq) else out

    def _lost_in(self, first: int, last: int) -> bool:
        """This replica holds a damaged (lost, not served) sequence in [first, last]."""
        store = self._file
        return store is not None and any(lo <= last and first <= hi for lo, hi in store.lost_ranges())

    def _fetch_from(
        self, catch_up: CatchUpSource, start: int, wanted: int, first: int, last_ts: int, failed: int = 0
    ) -> None:
        """Fetch [start, wanted] batch by batch from the leader. When no leader is known, or on
        every other retry after a failed ask, from another voter in turn: any replica holding
        the whole range serves it (catch_up_batch), and this replica, paused, answers no vote,
        so with its leader dead it would otherwise wait for an election it blocks."""

        def retry() -> None:
            if not self.deleted:
                self._fetch_from(catch_up, start, wanted, first, last_ts, failed + 1)

        def got(batch: list[StoredMsg] | None) -> None:
            if self.deleted:
                return
            if batch is None:  # not answered (or that replica lacks the range): ask again later
                self.host.call_later(limits.JS_CATCHUP_RETRY_S, retry)
                return
            batch = [msg for msg in batch if start <= msg.seq <= wanted][: limits.JS_CATCHUP_BATCH_MSGS]
            if batch:
                self.store.append_restored(batch)  # type: ignore[attr-defined]
                self._note_store_changed()
            if batch and batch[-1].seq < wanted:
                self._fetch_from(catch_up, batch[-1].seq + 1, wanted, first, last_ts)
                return
            self.store.finish_restore(wanted, last_ts)  # type: ignore[attr-defined]
            self._drop_below(first)
            self._rebuild_dedupe()
            self._fetching = False
            self._note_store_changed()
            self.group.resume_apply()
            if self._repair is not None:
                self._repair.schedule()

        source = self.group.leader()
        others = sorted(p for p in self.group.voters() if p != self.group.core.id and p != source)
        if others and (not source or failed % 2):
            source = others[(failed // 2) % len(others)]
        catch_up.fetch(source, start, wanted, got)

    def _drop_below(self, first: int) -> None:
        """Messages the leader no longer holds below its first sequence go here too."""
        if first > self.store.state().first_seq:
            self.store.purge("", up_to_seq=first)
            self._removed()

    # --- publishing --------------------------------------------------------------------------------

    def on_publish(self, subject: str, reply: Reply, header: bytes, payload: bytes) -> None:
        self.publish_raw(subject, reply.encode() if reply else b"", header, payload)

    def publish_raw(self, subject: str, reply: bytes, header: bytes, payload: bytes) -> None:
        """A publish to the stream's subjects; `reply` (b"" for none) gets the PubAck."""
        if self.deleted or self._republishing:
            return
        if header and header[8:9] != b"\r":
            header = strip_status(header)  # a status line is not stored (nats-server)
        inbox = self._inbox
        if len(inbox) >= limits.JS_PUBLISH_BATCH_MAX:
            self._flush_inbox()
            inbox = self._inbox
            if len(inbox) >= limits.JS_PUBLISH_BATCH_MAX:  # a new leader not ready to decide yet
                logger.warning("stream %s: a publish dropped, its new leader is not ready yet", self.config.name)
                return
        if not inbox:
            self.host.call_soon(self._propose_inbox)
        inbox.append((ops.InMsg(subject, header, payload, self.host.now_ns()), reply))

    def _propose_inbox(self) -> None:
        """This turn's publishes, proposed as one entry (on the loop, the turn after they came).
        A replicated stream's group runs its Ready at once: the appends leave and the fsync
        starts now, not a loop turn later (a synchronous publisher waits for every turn)."""
        self._flush_inbox()
        if self.replicated and not self.deleted:
            self.group.run_now()

    def _flush_inbox(self) -> None:
        if not self._inbox:
            return
        if self.deleted:  # deleted after these arrived (one may be the delete request itself)
            self._inbox = []
            return
        if self._projection is not None:
            self._propose_decided()
            return
        batch, self._inbox = self._inbox, []
        msgs = [msg for msg, _ in batch]
        replies = [reply for _, reply in batch]
        self._propose_batch(ops.encode_msgs(msgs), msgs, replies, None)

    # --- a replicated stream's leader decides (decide.py) -------------------------------------------

    def _propose_decided(self) -> None:
        """This turn's publishes, decided here against the store plus what is in flight: the
        accepted ones are proposed as one DECIDED entry (their PubAcks leave once a quorum
        persisted it and it is applied here); duplicates of stored messages and refusals are
        answered now, without a proposal."""
        group = self.group
        projection = self._projection
        assert projection is not None
        if not group.is_leader():
            batch, self._inbox = self._inbox, []
            logger.warning("stream %s dropped %d publishes: not the leader", self.config.name, len(batch))
            return
        if not group.ready_to_lead():  # elected, its predecessor's entries not all applied here yet
            if self._decide_retry is None:
                self._decide_retry = self.host.call_later(limits.JS_DECIDE_RETRY_S, self._retry_decide)
            return
        term = group.core.term
        if term != self._projection_term or projection.idle:
            projection.reset(last_seq(self.store), self._last_msg_id)
            self._projection_term = term
        batch, self._inbox = self._inbox, []
        entry = projection.open()
        refusals = self.guard.refusals(self, [m for m, _ in batch], projection.bytes) if self.guard else None
        accepted: list[ops.InMsg] = []
        replies: list[bytes] = []
        answers: list[tuple[bytes, bytes]] = []
        config = self.config
        # header-less messages with no limit to check here are accepted as a run (the hot path)
        plain = refusals is None and not config.sealed and config.discard != "new" and config.max_msg_size < 0
        run: list[str] = []
        run_bytes = 0
        size_of = self.store.msg_size
        for i, (msg, reply) in enumerate(batch):
            if plain and not msg.header:
                accepted.append(msg)
                replies.append(reply)
                run.append(msg.subject)
                run_bytes += size_of(msg.subject, b"", msg.payload)
                continue
            if run:  # counted before a decision that may look at them
                projection.accept_plain(entry, run, run_bytes)
                run, run_bytes = [], 0
            refusal = refusals[i] if refusals is not None else None
            if refusal is not None:
                outcome: Outcome | None = Outcome(error=refusal)
            else:
                try:
                    outcome = self._decide(msg, entry)
                except errors.JsApiError as exc:
                    outcome = Outcome(error=exc)
            if outcome is None:
                accepted.append(msg)
                replies.append(reply)
            elif reply and not self.config.no_ack:
                answers.append((reply, self._puback(outcome)))
        if run:
            projection.accept_plain(entry, run, run_bytes)
        if answers:
            self.host.publish_many(answers, flush_now=True)
        if accepted:
            self._propose_entry(entry, accepted, replies)

    def _propose_entry(self, entry: InFlight, accepted: list[ops.InMsg], replies: list[bytes]) -> None:
        self._propose_batch(ops.encode_decided(entry.first_seq, accepted), accepted, replies, entry)

    def _propose_batch(self, data: bytes, msgs: list[ops.InMsg], replies: list[bytes], entry: InFlight | None) -> None:
        """Propose data (msgs, encoded plain or, with entry, as this leader's decision) and answer
        replies once it is applied here. A proposal that fails is not answered; the projection
        forgets a failed decision (and decides again from the store)."""
        projection = self._projection if entry is not None else None
        assert entry is None or projection is not None
        key = id(data)

        def failed() -> None:
            if projection is not None and entry is not None:
                projection.failed(entry, last_seq(self.store), self._last_msg_id)

        def on_done(ok: bool, index: int) -> None:
            self._proposed.pop(key, None)
            result = self._results.pop(index, None)
            if not ok or not isinstance(result, list):
                self._unanswered -= len(replies)
                failed()
                return
            self._answer(replies, result)

        # When the entry applies here, `apply` takes the messages from here rather than
        # decoding the bytes it proposed; a follower decodes them.
        self._proposed[key] = (data, msgs, entry)
        try:
            self.group.propose(data, on_done)
        except (NotLeader, ProposalDropped, LimitExceeded) as exc:
            self._proposed.pop(key, None)
            failed()
            logger.warning("stream %s dropped %d publishes: %s", self.config.name, len(msgs), exc)
            return
        if projection is not None and entry is not None:
            projection.proposed(entry)
        self._unanswered += len(replies)

    def _retry_decide(self) -> None:
        self._decide_retry = None
        if not self.deleted and self._inbox:
            self._propose_inbox()

    def _decide(self, msg: ops.InMsg, entry: InFlight) -> Outcome | None:
        """One publish on the leader, in nats-server's order for a clustered stream: None when
        accepted (counted in flight), a duplicate's Outcome, or raises its JsApiError."""
        config = self.config
        projection = self._projection
        assert projection is not None
        header = msg.header
        if config.sealed:
            raise errors.STREAM_SEALED.error()
        if 0 <= config.max_msg_size < len(header) + len(msg.payload):
            raise errors.STREAM_MESSAGE_EXCEEDS_MAXIMUM.error()
        msg_id = rollup = ""
        expected_subject: str | None = None
        if header:
            if len(header) > HEADER_BYTES_MAX:
                raise errors.STREAM_HEADER_EXCEEDS_MAXIMUM.error()
            self._check_stream_and_ttl(header)
            msg_id = _text(header_value(header, HDR_MSG_ID))
            if msg_id:
                if msg_id in projection.msg_ids:  # accepted, not applied yet: nats-server's 10158
                    raise errors.STREAM_DUPLICATE_MESSAGE_CONFLICT.error()
                self._expire_dedupe(msg.ts_ns)
                seen = self._dedupe.get(msg_id)
                if seen is not None:
                    return Outcome(seen[0], duplicate=True)
            expected_seq = header_value(header, HDR_EXPECTED_LAST_SEQ)
            if expected_seq is not None and _int(expected_seq) != projection.last_seq:
                raise errors.STREAM_WRONG_LAST_SEQUENCE.format(seq=projection.last_seq)
            subject_seq = header_value(header, HDR_EXPECTED_LAST_SUBJECT_SEQ)
            if subject_seq is not None:
                expected_subject = _text(header_value(header, HDR_EXPECTED_LAST_SUBJECT_SEQ_SUBJECT)) or msg.subject
                if projection.subject_busy(expected_subject):  # its last message is still in flight
                    raise errors.STREAM_WRONG_LAST_SEQUENCE_CONSTANT.error()
                last = self.store.load_last(expected_subject)
                actual = last.seq if last is not None else 0
                if _int(subject_seq) != actual:
                    raise errors.STREAM_WRONG_LAST_SEQUENCE.format(seq=actual)
            rollup = _text(header_value(header, HDR_ROLLUP))
            if rollup:
                _check_rollup(config, rollup)
            expected_id = header_value(header, HDR_EXPECTED_LAST_MSG_ID)
            if expected_id is not None and expected_id.decode() != projection.last_msg_id:
                raise errors.STREAM_WRONG_LAST_MSG_ID.format(id=projection.last_msg_id)
        size = self.store.msg_size(msg.subject, header, msg.payload)
        replaces = False
        if config.discard == "new":
            store = self.store
            per_subject = config.max_msgs_per_subject > 0
            refusal, replaces = discard_new_refusal(
                store_limits(config), store_msgs=stored_msgs(store), store_bytes=stored_bytes(store),
                subject_count=store.subject_counts(msg.subject).get(msg.subject, 0) if per_subject else 0,
                projection=projection, subject=msg.subject, size=size,
            )
            if refusal is not None:
                raise _store_error(refusal)
        projection.accept(entry, msg.subject, size, replaces=replaces, msg_id=msg_id,
                          expected_subject=expected_subject, rollup_all=rollup == "all")
        return None

    # --- a replica applies the leader's decisions ---------------------------------------------------

    def _apply_decided(self, first_seq: int, msgs: list[ops.InMsg], mine: InFlight | None) -> list[Outcome | int]:
        """Store what the leader accepted at first_seq on: no publish check runs again (the
        account's and server's limits of this server included); limits and retention apply as
        they do everywhere. A replica whose last sequence is not first_seq - 1 stores nothing
        (the same on every replica holding the same state): on the leader its later decisions
        assumed this entry, so it starts again from its store; on a follower it differs from
        its leader, logged as an error. An empty store starts at first_seq (nats-server)."""
        store = self.store
        last = last_seq(store)
        if first_seq != last + 1:
            if first_seq > last + 1 and store.state().msgs == 0:
                store.compact(first_seq)
            else:
                self._mismatch(first_seq, last, len(msgs), mine)
                return [Outcome(error=errors.STREAM_SEQUENCE_NOT_MATCH.error())] * len(msgs)
        outcomes = self._store_in_runs(msgs, self._store_decided)
        if mine is not None and self._projection is not None:
            self._projection.settle(mine)
        return outcomes

    def _store_decided(self, msg: ops.InMsg) -> Outcome:
        header = msg.header
        msg_id = _text(header_value(header, HDR_MSG_ID)) if header else ""
        rollup = _text(header_value(header, HDR_ROLLUP)) if header else ""
        if msg_id:
            self._expire_dedupe(msg.ts_ns)
        try:
            return self._store_checked(msg, msg_id, rollup)
        except errors.JsApiError as exc:  # a store limit (the same on every replica)
            return Outcome(error=exc)

    def _mismatch(self, first_seq: int, last: int, count: int, mine: InFlight | None) -> None:
        self.mismatches += 1
        if mine is not None:  # proposed here: what was decided after it assumed it
            projection = self._projection
            if projection is not None and projection.failed(mine, last, self._last_msg_id):
                logger.warning(
                    "stream %s: its decided batch at sequence %d did not follow the store's last %d: "
                    "%d publish(es) refused, deciding again from the store", self.config.name, first_seq, last, count,
                )
            return
        logger.error(
            "stream %s: the leader's batch of %d message(s) at sequence %d does not follow this replica's "
            "last sequence %d: not applied (this replica differs from its leader, or the leader decided from a state no replica has)",
            self.config.name, count, first_seq, last,
        )

    def _answer(self, replies: list[bytes], outcomes: Sequence[Outcome | int]) -> None:
        """PubAcks for one committed (and, on one voter, synced) batch: a plain int outcome is a
        stored sequence (the hot path)."""
        self._unanswered -= len(replies)
        if self.config.no_ack:
            return
        prefix = self._ack_prefix or self._puback_prefix()
        out: list[tuple[bytes, bytes]] = []
        for reply, outcome in zip(replies, outcomes, strict=True):
            if not reply:
                continue
            if outcome.__class__ is int:
                out.append((reply, b"%s%d}" % (prefix, outcome)))
            else:
                assert isinstance(outcome, Outcome)
                out.append((reply, self._puback(outcome)))
        if out:
            # A replicated stream answers a batch once a quorum persisted it: its publishers have
            # waited for that, so the PubAcks go onto the sockets now, not after the rest of the
            # Ready and a loop turn (a synchronous publisher waits for each of them).
            self.host.publish_many(out, flush_now=self._flush_now or self.replicated)

    def _puback_prefix(self) -> bytes:
        name = self.config.name
        domain = self.host.domain
        fields = {"stream": name, "domain": domain} if domain else {"stream": name}
        self._ack_prefix = go_json(fields)[:-1] + b',"seq":'
        return self._ack_prefix

    def _puback(self, outcome: Outcome) -> bytes:
        if outcome.error is not None:
            return go_json({"error": outcome.error.as_json(), "stream": self.config.name, "seq": 0})
        head = (self._ack_prefix or self._puback_prefix()) + str(outcome.seq).encode()
        if outcome.duplicate:
            return head + b',"duplicate": true}'  # Go's marshaller really writes that space
        return head + b"}"

    # --- durability (group commit, driven by the group: cluster/group.py AppliedSync) ---------------

    def sync_applied(self, *, urgent: bool, done: Callable[[bool], None]) -> None:
        """Make every stored message durable, then done(ok): the group acknowledges the batches
        applied before this call only then (one fsync for all of them)."""
        store = self._file
        assert store is not None
        if urgent or self._unanswered <= limits.JS_INLINE_FSYNC_ACKS_MAX:
            # A lone publisher waits for this one fsync anyway: run it here rather than pay a
            # thread hand-off each way (sync publish latency); many waiting acks go off-loop.
            try:
                store.sync()
            except BrokenError as exc:  # the fsync failed: what it covered is never acknowledged
                logger.error("stream %s: %s", self.config.name, exc)
                done(False)
                return
            self._flush_now = True  # its publisher is waiting: onto the socket at once
            try:
                done(True)
            finally:
                self._flush_now = False
            return
        job = store.begin_sync()
        if job is None:
            done(not store.broken)
            return

        def finished(error: OSError | None) -> None:
            if error is not None:
                store.fail_sync(job, error)  # what it covered is never acknowledged
                done(False)
                return
            if store.broken:
                # Another fsync of this file failed meanwhile (a DELETE's sync on the loop): the
                # kernel reports a write-back error to one fsync of the shared file description
                # only, so this one's success does not prove its pages reached the disk.
                done(False)
                return
            store.finish_sync(job)
            done(True)

        self.host.run_sync_job(job, finished)

    def _arm_interval_sync(self) -> None:
        def tick() -> None:
            if self.deleted or self._file is None:
                return
            if not self._syncing:
                job = self._file.begin_sync()
                if job is not None:
                    self._syncing = True
                    store = self._file

                    def done(error: OSError | None) -> None:
                        self._syncing = False
                        if self.deleted:
                            return
                        if error is not None:
                            store.fail_sync(job, error)
                        else:
                            store.finish_sync(job)
                            if self._applied is not None:
                                self._applied.sync()

                    self.host.run_sync_job(job, done)
            self._interval_timer = self.host.call_later(self.host.sync_interval_s, tick)

        self._interval_timer = self.host.call_later(self.host.sync_interval_s, tick)

    # --- apply: messages ---------------------------------------------------------------------------

    def _apply_msgs(self, msgs: list[ops.InMsg]) -> Sequence[Outcome | int]:
        if self.guard is not None:
            guarded = self.guard(self, msgs)  # None: the whole batch fits the limits
            if guarded is not None:
                return guarded
        return self._store_in_runs(msgs, self._apply_one)

    def _store_in_runs(self, msgs: list[ops.InMsg], store_one: Callable[[ops.InMsg], Outcome]) -> list[Outcome | int]:
        """Store msgs in order: runs of header-less messages with _store_run, every other message
        (all of them when _one_by_one) with store_one. A run's messages have no id: after one,
        the stream's last message id is empty (nats-server sets it from every stored message)."""
        outcomes: list[Outcome | int] = []
        run: list[ops.InMsg] = []
        one_by_one = self._one_by_one()
        for msg in msgs:
            if msg.header or one_by_one:
                if run:
                    outcomes.extend(self._store_run(run))
                    self._last_msg_id = ""
                    run = []
                outcomes.append(store_one(msg))
            else:
                run.append(msg)
        if run:
            outcomes.extend(self._store_run(run))
            self._last_msg_id = ""
        return outcomes

    def _one_by_one(self) -> bool:
        """Must header-less messages be stored one by one rather than as runs?"""
        config = self.config
        return config.sealed or config.retention != "limits" or (
            # a copy names the previous message of its subject: known ahead for a run unless a
            # stream-wide limit may remove it while the run is stored
            self._republisher is not None and config.discard == "old" and (config.max_msgs > 0 or config.max_bytes > 0)
        )

    def _store_run(self, run: list[ops.InMsg]) -> list[Outcome | int]:
        """Store header-less messages in as few store calls as possible; a stored message's
        outcome is its sequence (an int), an Outcome only for a failure."""
        outcomes: list[Outcome | int] = []
        start = 0
        while start < len(run):
            chunk = run[start : start + limits.STORE_BATCH_MSGS_MAX]
            before = last_seq(self.store)
            previous = self._previous_seqs(chunk, before) if self._republisher is not None else None
            try:
                seqs = self._append(chunk)  # InMsg is laid out as MsgInput; these have no header
            except api.StoreLimitError as exc:
                stored = last_seq(self.store) - before
                seqs = list(range(before + 1, before + 1 + stored))
                outcomes.extend(seqs)
                outcomes.append(Outcome(error=_store_error(exc.reason)))
                self._stored(chunk[:stored], seqs)
                if previous is not None:
                    self._republish_run(chunk[:stored], seqs, previous)
                start += stored + 1
                continue
            outcomes.extend(seqs)
            self._stored(chunk, seqs)
            if previous is not None:
                self._republish_run(chunk, seqs, previous)
            start += len(chunk)
        return outcomes

    def _previous_seqs(self, chunk: Sequence[ops.InMsg], before: int) -> list[int]:
        """For each message of a run about to be stored from sequence before+1 on, the last
        sequence of its subject just before it is stored (Nats-Last-Sequence of its copy)."""
        last: dict[str, int] = {}
        out: list[int] = []
        for offset, msg in enumerate(chunk):
            subject = msg.subject
            found = last.get(subject)
            out.append(last_seq_of_subject(self.store, subject) if found is None else found)
            last[subject] = before + 1 + offset
        return out

    def _republish_run(self, msgs: Sequence[ops.InMsg], seqs: Sequence[int], previous: list[int]) -> None:
        for msg, seq, last in zip(msgs, seqs, previous, strict=False):
            self._republish(msg, seq, last)

    def _append(self, msgs: Sequence[api.MsgInput]) -> list[int]:
        if self._file is not None:
            return self._file.append_batch(msgs)
        return self.store.store_batch(msgs)

    def _stored(self, msgs: Sequence[ops.InMsg], seqs: Sequence[int]) -> None:
        for consumer in list(self.consumers.values()):
            consumer.on_stored(seqs, [m.subject for m in msgs])
        if self.config.max_age and self._expiry_timer is None:
            self._arm_expiry()

    def _apply_one(self, msg: ops.InMsg) -> Outcome:
        try:
            return self._check_and_store(msg)
        except errors.JsApiError as exc:
            return Outcome(error=exc)

    apply_checked = _apply_one  # for the publish guard of resources.py
    append_mirrored = _append  # for a mirror's MIRROR operation (sources.py)
    stored_mirrored = _stored

    def _check_and_store(self, msg: ops.InMsg) -> Outcome:
        config = self.config
        header = msg.header
        if config.sealed:
            raise errors.STREAM_SEALED.error()
        if header:
            self._check_expectations(msg)
            msg_id = _text(header_value(header, HDR_MSG_ID))
            if msg_id:
                self._expire_dedupe(msg.ts_ns)
                seen = self._dedupe.get(msg_id)
                if seen is not None:
                    return Outcome(seen[0], duplicate=True)
            expected_id = header_value(header, HDR_EXPECTED_LAST_MSG_ID)
            if expected_id is not None and expected_id.decode() != self._last_msg_id:
                raise errors.STREAM_WRONG_LAST_MSG_ID.format(id=self._last_msg_id)
            rollup = _text(header_value(header, HDR_ROLLUP))
            if rollup:
                _check_rollup(config, rollup)
            if len(header) > HEADER_BYTES_MAX:
                raise errors.STREAM_HEADER_EXCEEDS_MAXIMUM.error()
        else:
            msg_id = rollup = ""
        if 0 <= config.max_msg_size < len(header) + len(msg.payload):
            raise errors.STREAM_MESSAGE_EXCEEDS_MAXIMUM.error()
        return self._store_checked(msg, msg_id, rollup)

    def _store_checked(self, msg: ops.InMsg, msg_id: str, rollup: str) -> Outcome:
        """Store a message that passed its checks (here, or on a replicated stream's leader)
        with its effects: dedupe, last msg id, rollup, TTL, retention, republish."""
        header = msg.header
        previous = last_seq_of_subject(self.store, msg.subject) if self._republisher is not None else 0
        try:
            (seq,) = self._append([(msg.subject, header, msg.payload, msg.ts_ns)])
        except api.StoreLimitError as exc:
            raise _store_error(exc.reason) from None
        if msg_id:
            self._dedupe[msg_id] = (seq, msg.ts_ns)
            while len(self._dedupe) > limits.JS_DEDUPE_IDS_MAX:
                self._dedupe.popitem(last=False)
        self._last_msg_id = msg_id
        if rollup == "sub":
            self.store.purge(msg.subject, keep=1)
        elif rollup == "all":
            self.store.purge("", keep=1)
        if rollup:
            self._removed()
        self._stored([msg], [seq])
        ttl = header_value(header, HDR_TTL) if header else None
        if ttl is not None:
            self._add_ttl(seq, msg.ts_ns, parse_ttl(ttl))
        if not self._apply_retention_on_store(seq, msg.subject) and self._republisher is not None:
            self._republish(msg, seq, previous)
        return Outcome(seq)

    def mirror_one(self, msg: ops.InMsg) -> int:
        """Store one message of a mirror's origin (with its time) and republish it."""
        previous = last_seq_of_subject(self.store, msg.subject) if self._republisher is not None else 0
        (seq,) = self._append([msg])
        if self._republisher is not None:
            self._republish(msg, seq, previous)
        return seq

    def _republish(self, msg: ops.InMsg, seq: int, previous: int) -> None:
        """The stored message's copy to the republish destination (republish.py)."""
        republisher = self._republisher
        assert republisher is not None
        subject = republisher.target(msg.subject)
        if subject is None:
            return
        header = republisher.header(msg.header, msg.subject, seq, msg.ts_ns, previous, len(msg.payload))
        self._republishing = True
        try:
            self.host.republish(subject, header, b"" if republisher.headers_only else msg.payload)
        finally:
            self._republishing = False

    def _check_stream_and_ttl(self, header: bytes) -> None:
        expected_stream = header_value(header, HDR_EXPECTED_STREAM)
        if expected_stream is not None and expected_stream.decode() != self.config.name:
            raise errors.STREAM_NOT_MATCH.error()
        ttl = header_value(header, HDR_TTL)
        if ttl is not None:
            if not self.config.allow_msg_ttl:
                raise errors.MESSAGE_TTL_DISABLED.error()
            parse_ttl(ttl)

    def _check_expectations(self, msg: ops.InMsg) -> None:
        header = msg.header
        self._check_stream_and_ttl(header)
        subject_seq = header_value(header, HDR_EXPECTED_LAST_SUBJECT_SEQ)
        if subject_seq is not None:
            subject = _text(header_value(header, HDR_EXPECTED_LAST_SUBJECT_SEQ_SUBJECT)) or msg.subject
            last = self.store.load_last(subject)
            actual = last.seq if last is not None else 0
            if _int(subject_seq) != actual:
                raise errors.STREAM_WRONG_LAST_SEQUENCE.format(seq=actual)
        expected_seq = header_value(header, HDR_EXPECTED_LAST_SEQ)
        if expected_seq is not None:
            actual = last_seq(self.store)
            if _int(expected_seq) != actual:
                raise errors.STREAM_WRONG_LAST_SEQUENCE.format(seq=actual)

    def _apply_retention_on_store(self, seq: int, subject: str) -> bool:
        """Interest retention: a message no consumer wants is dropped at once (True)."""
        if self.config.retention == "interest" and not any(c.wants(subject) for c in self.consumers.values()):
            self.store.delete(seq)
            self._removed()
            return True
        return False

    # --- damage on disk ----------------------------------------------------------------------------

    def report_damage(self) -> None:
        """Log (once per open) and advise what the store found damaged and will not serve."""
        lost = self.store.lost()
        if not lost.damaged:
            return
        logger.error(  # each region was logged by the store with file:offset and sequences
            "JetStream stream '%s' opened with damaged data: %d message(s) lost until repaired, %d region(s)",
            self.config.name, lost.count, len(lost.regions),
        )
        advisories.stream_corrupt(self.host, self.config.name, lost)

    # --- dedupe ------------------------------------------------------------------------------------

    def _expire_dedupe(self, now_ns: int) -> None:
        cutoff = now_ns - self.config.duplicate_window
        dedupe = self._dedupe
        while dedupe:
            first = next(iter(dedupe.values()))
            if first[1] >= cutoff:
                break
            dedupe.popitem(last=False)

    def _rebuild_dedupe(self) -> None:
        """Msg ids stored within the duplicate window, and the last msg id, read back from the store."""
        state = self.store.state()
        if state.msgs == 0:
            return
        cutoff = self.host.now_ns() - self.config.duplicate_window
        found: list[tuple[str, int, int]] = []
        seq = state.last_seq
        while seq >= state.first_seq and len(found) < limits.JS_DEDUPE_IDS_MAX:
            try:
                msg = self.store.load(seq)
            except CorruptData:
                msg = None  # a lost message (reported by the store and by report_damage) holds no id
            seq -= 1
            if msg is None:
                continue
            if msg.seq == state.last_seq:
                self._last_msg_id = _text(header_value(msg.headers, HDR_MSG_ID)) if msg.headers else ""
            if msg.timestamp_ns < cutoff:
                break
            msg_id = _text(header_value(msg.headers, HDR_MSG_ID)) if msg.headers else ""
            if msg_id:
                found.append((msg_id, msg.seq, msg.timestamp_ns))
        for msg_id, found_seq, ts_ns in reversed(found):
            self._dedupe[msg_id] = (found_seq, ts_ns)

    # --- apply: other operations -------------------------------------------------------------------

    def _apply_op(self, kind: int, body: dict[str, object]) -> object:
        if kind == ops.KIND_DELETE:
            seq = int(str(body["seq"]))
            removed = self.store.delete(seq, erase=bool(body.get("erase")))
            if removed:
                self._removed()
            return removed
        if kind == ops.KIND_PURGE:
            purged = self.store.purge(
                str(body.get("filter", "")),
                keep=int(str(body.get("keep", 0))),
                up_to_seq=int(str(body.get("seq", 0))),
            )
            self._removed()
            return purged
        if kind == ops.KIND_MIRROR:
            return apply_mirror(self, body)
        raise AssertionError(f"unknown stream op {kind}")

    def propose_op(self, kind: int, body: dict[str, object], done: Callable[[object], None]) -> None:
        """Run DELETE/PURGE/MIRROR through the log; done(result) once committed, applied and
        durable (later, from the group's Ready loop). Raises NotLeader or LimitExceeded."""

        def on_done(ok: bool, index: int) -> None:
            result = self._results.pop(index, None)
            if ok:
                done(result)

        self.group.propose(ops.encode_op(kind, body), on_done)

    def _removed(self) -> None:
        for consumer in list(self.consumers.values()):
            consumer.on_removed()

    # --- limits over time ---------------------------------------------------------------------------

    # --- per-message TTL (ADR-43) --------------------------------------------------------------

    def _add_ttl(self, seq: int, ts_ns: int, ttl_ns: int | None) -> None:
        if ttl_ns is None or len(self._ttls) >= limits.JS_TTL_MSGS_MAX:
            return
        heapq.heappush(self._ttls, (ts_ns + ttl_ns, seq))
        if self._ttl_timer is None and not self.deleted:
            delay_s = max((self._ttls[0][0] - self.host.now_ns()) / 1e9, limits.JS_EXPIRY_GRANULARITY_S)
            self._ttl_timer = self.host.call_later(delay_s, self._expire_ttls)

    def _expire_ttls(self) -> None:
        self._ttl_timer = None
        if self.deleted:
            return
        now = self.host.now_ns()
        removed = False
        while self._ttls and self._ttls[0][0] <= now:
            _, seq = heapq.heappop(self._ttls)
            removed = self.store.delete(seq) or removed
        if removed:
            self._removed()
            self._note_store_changed()
        if self._ttls:
            delay_s = max((self._ttls[0][0] - now) / 1e9, limits.JS_EXPIRY_GRANULARITY_S)
            self._ttl_timer = self.host.call_later(delay_s, self._expire_ttls)

    def _rebuild_ttls(self) -> None:
        """Messages stored with a Nats-TTL, read back from the store on restart."""
        if not self.config.allow_msg_ttl:
            return
        for msg in self.store.scan(1):
            ttl = header_value(msg.headers, HDR_TTL) if msg.headers else None
            if ttl is not None:
                try:
                    self._add_ttl(msg.seq, msg.timestamp_ns, parse_ttl(ttl))
                except errors.JsApiError:
                    continue

    def _arm_expiry(self) -> None:
        if self.deleted or not self.config.max_age:
            return
        next_ns = self.store.next_expiry_ns()
        if next_ns is None:
            self._expiry_timer = None
            return
        delay_s = max((next_ns - self.host.now_ns()) / 1e9, limits.JS_EXPIRY_GRANULARITY_S)
        self._expiry_timer = self.host.call_later(delay_s, self._expire)

    def _expire(self) -> None:
        self._expiry_timer = None
        if self.deleted:
            return
        if self.store.expire(self.host.now_ns()):
            self._removed()
            self._note_store_changed()
        self._arm_expiry()

    def update_config(self, config: StreamConfig) -> None:
        self.config = config
        self._republisher = republisher_for(config.name, config.republish)
        self.store.set_limits(store_limits(config))
        self._note_store_changed()
        self._removed()
        if self._expiry_timer is not None:
            self._expiry_timer.cancel()
            self._expiry_timer = None
        self._arm_expiry()

    def remove_acked(self, seq: int) -> None:
        """Retention: drop a message every interested consumer has acknowledged."""
        retention = self.config.retention
        if retention == "limits":
            return
        subject = subject_of(self.store, seq)
        if subject is None:
            return
        interested = [c for c in self.consumers.values() if c.wants(subject)]
        if retention == "workqueue" or all(c.has_acked(seq) for c in interested):
            if self.store.delete(seq):
                self._note_store_changed()
                for consumer in list(self.consumers.values()):
                    consumer.on_removed()

    def on_consumer_removed(self) -> None:
        """Interest retention: messages no remaining consumer is interested in are dropped."""
        from appliance.jetstream.storeview import live_seqs

        doomed = []
        for seq in list(live_seqs(self.store, 1)):
            subject = subject_of(self.store, seq)
            if subject is None:
                continue
            interested = [c for c in self.consumers.values() if c.wants(subject)]
            if all(c.has_acked(seq) for c in interested):
                doomed.append(seq)
        for seq in doomed:
            self.store.delete(seq)
        if doomed:
            self._note_store_changed()
            self._removed()

    def close(self, *, keep_store: bool = False) -> None:
        """`keep_store`: the store is handed over to the stream's next open (a memory stream converted)."""
        if not self.deleted:
            self._flush_inbox()
            self.group.close()  # publishes proposed but not yet applied are applied (or failed)
        self.deleted = True
        for timer in (self._expiry_timer, self._interval_timer, self._ttl_timer, self._decide_retry):
            if timer is not None:
                timer.cancel()
        if self._repair is not None:
            self._repair.cancel()
        if self._file is not None:
            try:
                self._file.sync()
                if self._applied is not None:
                    self._applied.sync()
            except (BrokenError, OSError) as exc:
                logger.error("stream %s closed without a final sync: %s", self.config.name, exc)
        if not keep_store:
            self.store.close()

    def matches(self, subject: str) -> bool:
        return any(subject_matches(own, subject) for own in self.config.subjects)


def parse_ttl(value: bytes) -> int | None:
    """A Nats-TTL value in nanoseconds: a Go duration ("10s") or whole seconds; None for "never"."""
    text = value.decode(errors="replace").strip()
    if text == "never":
        return None
    try:
        ttl_ns = int(text) * 1_000_000_000 if text.isdigit() else parse_go_duration(text)
    except ValueError:
        raise errors.MESSAGE_TTL_INVALID.error() from None
    if ttl_ns < 1_000_000_000:
        raise errors.MESSAGE_TTL_INVALID.error()
    return ttl_ns


def _check_rollup(config: StreamConfig, rollup: str) -> None:
    if not config.allow_rollup_hdrs:
        raise errors.STREAM_ROLLUP_FAILED.format(err="rollup not permitted")
    if rollup not in ("sub", "all"):
        raise errors.STREAM_ROLLUP_FAILED.format(err=f'rollup value invalid: "{rollup}"')


def _store_error(reason: str) -> errors.JsApiError:
    if reason == api.MAX_MSG_SIZE_EXCEEDED:
        return errors.STREAM_MESSAGE_EXCEEDS_MAXIMUM.error()
    return errors.STREAM_STORE_FAILED.format(err=reason)


def _text(value: bytes | None) -> str:
    return value.decode(errors="replace") if value else ""


def _int(value: bytes) -> int:
    try:
        return int(value)
    except ValueError:
        return -1


__all__ = ["Outcome", "Stream", "store_limits", "parse_go_duration"]
