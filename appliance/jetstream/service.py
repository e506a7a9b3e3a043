"""JetStream on one server: wires the meta group, streams and consumers to the core Server.

Everything runs on the worker's event loop. Each JetStream-enabled account gets an
AccountJetStream with its own InternalClient: API subjects, stream subjects, `$JS.ACK.>`,
`$JS.FC.>`, per-consumer `MSG.NEXT` and per-stream DIRECT.GET subscriptions. The meta group's
applied operations create, update and remove the live streams and consumers; on start the meta
log replays first, then every asset is opened from disk.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import logging
import os
import random
import shutil
import time
from collections.abc import Callable

from appliance import limits
from appliance.clock import Clock, SystemClock
from appliance.config.options import ServerOptions
from appliance.errors import ApplianceError, BrokenError, CorruptData
from appliance.jetstream import advisories, api, sources
from appliance.jetstream.config import (
    ConsumerConfig,
    StreamConfig,
    consumer_config_from_record,
    stream_config_from_record,
)
from appliance.jetstream.consumer import Consumer
from appliance.jetstream.direct import direct_get
from appliance.jetstream.fsync import FsyncThreads
from appliance.store.group_ledger import GroupLedger, GroupState
from appliance.store.sync_stats import SyncStats
from appliance.jetstream.groups import durable_storage, group_name, memory_storage
from appliance.jetstream.host import Timer
from appliance.jetstream.cluster_driver import ClusterDriver
from appliance.jetstream.groups import Replication
from appliance.jetstream.meta import META_GROUP, MetaGroup, MetaNetwork
from appliance.jetstream.stepdown import MetaStepDown
from appliance.jetstream.api_server_remove import subscribe_server_remove
from appliance.jetstream.membership import Membership
from appliance.jetstream.regroup import joining_of
from appliance.jetstream.api_streams import stream_info
from appliance.jetstream.cluster_info import asset_cluster
from appliance.jetstream.request import TYPE_PREFIX
from appliance.jetstream.wire import go_json
from appliance.cluster.forward import ProposalForwarder
from appliance.cluster.group import RaftGroup
from appliance.cluster.raft_host import RaftHost
from appliance.cluster.raft_storage import DurableStorage
from appliance.raft.storage import MemoryStorage
from appliance.server.routes import RouteManager
from appliance.store.fileops import write_atomic
from appliance.store.powerloss import file_ops
from appliance.store.raftlog import OsLogFiles
from appliance.jetstream.relay import ACK_PREFIXES, DeliveryRelay, relay_deliverer, relay_message, route_delivery
from appliance.jetstream.resources import attach_guard, settle_global_account
from appliance.jetstream.restore import RestoreSession, remove_leftovers
from appliance.jetstream.transform import transformed
from appliance.jetstream.stream import Stream, store_limits
from appliance.jetstream.subjects import subject_matches
from appliance.raft.storage import LogStorage
from appliance.raft.types import ConfState, Snapshot, SnapshotMeta
from appliance.server.accounts import Account
from appliance.server.internal import InternalClient
from appliance.server.router import pick
from appliance.server.server import Server
from appliance.server.sublist import Subscription
from appliance.store import api as store_api
from appliance.store.filestore import FileStoreConfig, FileStreamStore
from appliance.store.sealer import BackgroundSealer
from appliance.store.layout import SyncJob
from appliance.store.memory import MemoryStreamStore
from appliance.store.store_dir import store_root_of

logger = logging.getLogger(__name__)


def store_root(options: ServerOptions) -> str:
    return store_root_of(options.jetstream.store_dir)


PEER_FILE = "peer"
NATS_DEFAULT_SYNC_INTERVAL_S = 120.0


def compresses(config: StreamConfig) -> bool:
    """`compression: s2` compresses sealed segments (with zstd, appliance's block codec);
    `none`, nats-server's default, stores them uncompressed as nats-server does."""
    return config.compression != "none"


def durable_by_default(options: ServerOptions) -> bool:
    """PubAcks wait for fsync (group commit) unless a sync_interval other than nats-server's
    default was configured: durability is the default (DESIGN.md §5), `sync_interval` relaxes it.
    The options cannot tell an explicit "2m" from the default, so "2m" stays durable."""
    jetstream = options.jetstream
    return jetstream.sync_always or jetstream.sync_interval_s == NATS_DEFAULT_SYNC_INTERVAL_S


def stable_peer_id(root: str, server_name: str) -> str:
    """This server's RAFT peer id: chosen at the first start and kept in the store, so a restart
    under a new (random) server id still owns the groups it persisted."""
    directory = os.path.join(root, "_raft")
    ops = file_ops()
    ops.make_dirs(directory)  # durably, as every directory of the store
    path = os.path.join(directory, PEER_FILE)
    try:
        with open(path, encoding="utf-8") as handle:
            peer = handle.read().strip()
        if peer:
            return peer
    except FileNotFoundError:
        pass
    try:  # tmp, fsync, rename, fsync of the directory: the name survives a power cut
        write_atomic(ops, path, server_name.encode())
    finally:
        ops.close()
    return server_name


class AccountJetStream:
    """One account's JetStream: its streams, consumers and the Host they run on."""

    def __init__(self, service: JetStreamService, account: Account) -> None:
        self.service = service
        self.account = account
        self.server = service.server
        self.client = InternalClient(service.server, account, f"JetStream {account.name}")
        # streams' republished copies leave from a client of their own: the account's JetStream
        # client gets no echo of what it sends, and other streams may capture the copies
        self.republisher = InternalClient(service.server, account, f"JetStream republish {account.name}")
        account.sublist.uncached_prefixes = ACK_PREFIXES  # every ack subject is used once
        self.streams: dict[str, Stream] = {}
        self._stream_subs: dict[str, list[Subscription]] = {}
        self._consumer_subs: dict[tuple[str, str], Subscription] = {}
        self._ack_targets: dict[tuple[bytes, bytes], Consumer] = {}  # (stream, consumer) tokens of acks
        # Host protocol
        self.server_name = service.server.server_name
        self.domain = service.options.jetstream.domain
        self.sync_always = durable_by_default(service.options)
        self.sync_interval_s = service.options.jetstream.sync_interval_s
        self.clock: Clock = service.clock
        self.rng = service.rng
        self.api_total = 0
        self.api_errors = 0
        self.restoring: dict[str, RestoreSession] = {}  # restores in progress (restore.py), by stream
        self.restored_stores: dict[str, store_api.StreamStore] = {}  # a memory store a restore hands over
        self._leading: set[str] = set()  # streams whose subjects this server subscribes (it leads them)
        self._create_replies: dict[str, str] = {}  # stream -> the create request's reply, until it leads
        self._led_waiters: list[tuple[RaftGroup, Callable[[], None]]] = []  # when_led
        self.membership = Membership(self)  # stream groups changing members (regroup.py)
        remove_leftovers(service.root, account.name)

    # --- Host ---------------------------------------------------------------------------------------

    def now_ns(self) -> int:
        return time.time_ns()

    def send(self, subject: str, payload: bytes, *, reply: str = "", header: bytes | None = None) -> None:
        self.client.publish(subject.encode(), payload, reply=reply.encode() if reply else None, header=header)

    def publish_many(self, messages: list[tuple[bytes, bytes]], *, flush_now: bool = False) -> None:
        self.client.publish_many(messages, flush_now=flush_now)

    def republish(self, subject: bytes, header: bytes, payload: bytes) -> None:
        self.republisher.publish(subject, payload, header=header)

    def deliver(self, match: str, subject: str, reply: str, header: bytes | None, payload: bytes) -> int:
        return self.deliver_raw(
            match.encode(), subject.encode(), reply.encode() if reply else None, header, payload
        )

    def deliver_raw(
        self, key: bytes, subject_b: bytes, reply_b: bytes | None, header: bytes | None, payload: bytes
    ) -> int:
        sublist = self.account.sublist
        result = sublist.cache.get(key)
        if result is None:
            result = sublist.match(key)
        plain, queues = result
        data = header + payload if header is not None else payload
        count = 0
        for sub in plain:
            if getattr(sub.conn, "is_route", False):
                route_delivery(sub, key, subject_b, reply_b, header, data)
            elif getattr(sub.conn, "is_link", False):
                relay_message(sub, key, subject_b, reply_b, header, data)
            else:
                sub.conn.deliver(sub, subject_b, reply_b, header, data)
            count += 1
        for members in queues:
            chosen = pick(members, None, True, self.server.rng)
            if chosen is None:
                continue
            if getattr(chosen.conn, "is_route", False):
                route_delivery(chosen, key, subject_b, reply_b, header, data)
            elif getattr(chosen.conn, "is_link", False):
                relay_message(chosen, key, subject_b, reply_b, header, data)
            else:
                chosen.conn.deliver(chosen, subject_b, reply_b, header, data)
            count += 1
        self.server.schedule_flush()
        return count

    def deliverer(self, key: bytes) -> Callable[[bytes, bytes | None, bytes | None, bytes], int]:
        """`deliver_raw` bound to one target for a run of deliveries in one call: resolved once
        when a single subscriber takes it (a pull request's inbox) — a local one, or a sibling
        worker's (one link record per delivery, see relay.py) — else routed each time."""
        sublist = self.account.sublist
        result = sublist.cache.get(key)
        if result is None:
            result = sublist.match(key)
        plain, queues = result
        if len(plain) != 1 or queues:
            return functools.partial(self.deliver_raw, key)
        sub = plain[0]
        if getattr(sub.conn, "is_route", False):
            return functools.partial(self.deliver_raw, key)
        if getattr(sub.conn, "is_link", False):
            return relay_deliverer(sub, key)
        conn_deliver = sub.conn.deliver
        schedule_flush = self.server.schedule_flush

        def deliver_one(subject: bytes, reply: bytes | None, header: bytes | None, payload: bytes) -> int:
            conn_deliver(sub, subject, reply, header, header + payload if header is not None else payload)
            schedule_flush()
            return 1

        return deliver_one

    def has_interest(self, subject: str, queue: str = "") -> bool:
        sublist = self.account.sublist
        key = subject.encode()
        result = sublist.cache.get(key)
        if result is None:
            result = sublist.match(key)
        plain, queues = result
        if queue:
            wanted = queue.encode()
            return any(members and members[0].queue == wanted for members in queues)
        return bool(plain) or bool(queues)

    def call_soon(self, fn: Callable[[], None]) -> None:
        self.service.loop.call_soon(fn)

    def call_later(self, delay_s: float, fn: Callable[[], None]) -> Timer:
        return self.service.loop.call_later(delay_s, fn)

    def run_sync_job(self, job: SyncJob, done: Callable[[OSError | None], None]) -> None:
        self.service.fsyncs.submit(job, done)

    # --- streams -----------------------------------------------------------------------------------

    def stream_dir(self, name: str) -> str:
        return os.path.join(self.service.root, self.account.name, "streams", name)

    def open_stream(self, config: StreamConfig, created_ns: int, group: object = None, *, join: bool = False,
                    convert: bool = False) -> Stream:
        """Open a stream this server holds a replica of; `group` is its meta record's RAFT group
        (None: a standalone server's single voter). `join`: a replica added to a running group
        (its log waits for the leader); `convert`: an R1 stream becoming replicated, whose store's
        position is the first snapshot of its new durable log (membership.py)."""
        restored = self.restored_stores.pop(config.name, None)
        if restored is not None:
            store: store_api.StreamStore = restored
        elif config.storage == "memory":
            store = MemoryStreamStore(store_limits(config))
        else:
            store = self._file_store(config)
        if config.first_seq > 1 and store.state().last_seq == 0:
            store.compact(config.first_seq)  # a new stream starts at first_seq
        group_id, peers, preferred = _group_of(group, group_name("S", self.account.name, config.name))
        durable_log = len(peers) > 1 or (isinstance(group, dict) and bool(group.get("raft")))
        replication = None
        seed = b""
        if convert:
            state = store.state()
            seed = go_json({"first_seq": state.first_seq, "last_seq": state.last_seq, "last_ts": state.last_ts_ns})
        if durable_log:
            if seed:  # a conversion: whatever an earlier replicated life left there is stale
                shutil.rmtree(self.service.group_dir(group_id), ignore_errors=True)
            replication = self.service.replication(group_id, [self.service.peer] if seed else peers,
                                                   join=join, seed=seed, created_ns=created_ns)
        try:
            stream = Stream(config=config, created_ns=created_ns, store=store, host=self, peer=self.service.peer,
                            group_id=group_id, replication=replication)
        except (BrokenError, CorruptData) as exc:
            # A replica whose store cannot be opened as its RAFT log needs it (it cannot be cut
            # back to an index it recorded): it starts over empty and rebuilds from its log and
            # its peers; the old files are kept beside it, never deleted.
            if replication is None or not isinstance(store, FileStreamStore) or restored is not None or convert:
                raise
            store = self._set_aside(config, store, exc)
            stream = Stream(config=config, created_ns=created_ns, store=store, host=self, peer=self.service.peer,
                            group_id=group_id, replication=replication)
        self.streams[config.name] = stream
        attach_guard(self, stream)
        if replication is not None:
            self.service.watch_lost(f"stream '{self.account.name} > {config.name}'", stream.group, replication,
                                    created_ns)
            self.service.register_group(stream.group)
            stream.group.on_lead = lambda: self.follow_leaders()
            if preferred == self.service.peer and not join or stream.group.voters() == (self.service.peer,):
                stream.group.campaign()  # the placement's first peer leads a new group at once
        self._subscribe_stream(stream)
        if stream.group.is_leader():  # only the leader copies from sources (its proposals store them)
            sources.start(self, stream)
        return stream

    def _file_store(self, config: StreamConfig) -> FileStreamStore:
        directory = os.path.join(self.stream_dir(config.name), "msgs")  # the store makes it, durably
        return FileStreamStore(
            FileStoreConfig(directory=directory, limits=store_limits(config), sync_always=False,
                            compress=compresses(config)),
            sealer=self.service.sealer,  # segments are sealed (and compressed) off the loop
            sync_stats=self.service.sync_stats,  # one fsync latency/batch record for /metrics
        )

    def _set_aside(self, config: StreamConfig, store: FileStreamStore, exc: BaseException) -> FileStreamStore:
        """Move a replica's unusable store directory aside (`msgs.damaged`, `msgs.damaged.2`, ...)
        and open an empty store in its place."""
        store.close()
        directory = store.config.directory
        aside = directory + ".damaged"
        n = 1
        while os.path.exists(aside):
            n += 1
            aside = f"{directory}.damaged.{n}"
        os.rename(directory, aside)
        logger.error("JetStream stream '%s > %s': replica store unusable (%s); kept as %s, rebuilding from the peers",
                     self.account.name, config.name, exc, aside)
        return self._file_store(config)

    def follow_leaders(self) -> None:
        """Only a stream's leader holds interest in its subjects; its first leader answers the
        create request (the reply kept from the meta op), once subscribed."""
        for name, stream in list(self.streams.items()):
            leads = stream.group.is_leader()
            if leads != (name in self._leading):
                self._subscribe_stream(stream)
                if leads:
                    sources.start(self, stream)
                else:
                    sources.stop(stream)
            for consumer in list(stream.consumers.values()):
                if consumer.group.is_leader() != ((name, consumer.name) in self._consumer_subs):
                    self._subscribe_consumer(stream, consumer)
            pending = self._create_replies.get(name)
            if pending is None:
                continue
            if leads:
                del self._create_replies[name]
                self._answer_create(stream, pending)
            elif stream.group.leader():  # another replica leads: it answers
                del self._create_replies[name]

        self.membership.reconcile()
        if self._led_waiters:
            waiting, self._led_waiters = self._led_waiters, []
            for group, fn in waiting:
                if group.leader():
                    fn()
                elif len(self._led_waiters) < limits.RAFT_FORWARD_IN_FLIGHT_MAX:
                    self._led_waiters.append((group, fn))

    def when_led(self, group: RaftGroup, fn: Callable[[], None]) -> None:
        """Run `fn` once `group` has a leader (its interest subscribed when it is this server):
        a new consumer's create answer waits for it, so a pull right after it finds the leader."""
        if group.leader():
            self.follow_leaders()
            fn()
            return
        self._led_waiters.append((group, fn))

    def _answer_create(self, stream: Stream, reply: str) -> None:
        from_info = stream_info(stream, cluster=asset_cluster(self.service, stream.group, standalone=False))
        body = {"type": TYPE_PREFIX + "stream_create_response", **from_info, "did_create": True}
        self.send(reply, go_json(body))

    def _subscribe_stream(self, stream: Stream) -> None:
        for sub in self._stream_subs.pop(stream.config.name, []):
            self.client.unsubscribe(sub)
        subs: list[Subscription] = []

        publish = stream.publish_raw

        def on_msg(subject: bytes, reply: bytes | None, header: bytes | None, data: bytes) -> None:
            if header is None:
                publish(subject.decode(), reply or b"", b"", data)
            else:
                publish(subject.decode(), reply or b"", header, data[len(header) :])

        handler = transformed(stream.config, on_msg)  # the stream's subject_transform, if any
        if stream.group.is_leader():  # a follower must not: publishes would be stored twice
            self._leading.add(stream.config.name)
            for subject in stream.config.subjects:
                subs.append(self.client.subscribe(subject.encode(), handler))
        else:
            self._leading.discard(stream.config.name)
        if stream.config.allow_direct:
            name = stream.config.name

            def on_direct(subject: bytes, reply: bytes | None, header: bytes | None, data: bytes) -> None:
                payload = data[len(header) :] if header is not None else data
                reply_text = reply.decode() if reply else ""
                direct_get(self, name, subject.decode(), reply_text, payload, header or b"")

            subs.append(
                self.client.subscribe(f"$JS.API.DIRECT.GET.{name}".encode(), on_direct, queue=b"_sys_")
            )
            subs.append(
                self.client.subscribe(f"$JS.API.DIRECT.GET.{name}.>".encode(), on_direct, queue=b"_sys_")
            )
        self._stream_subs[stream.config.name] = subs

    def update_stream(self, config: StreamConfig) -> None:
        stream = self.streams[config.name]
        old_subjects = stream.config.subjects
        old_direct = stream.config.allow_direct
        old_transform = stream.config.subject_transform
        stream.update_config(config)
        if isinstance(stream.store, FileStreamStore):
            stream.store.set_compression(compresses(config))
        if stream.group.is_leader():
            sources.start(self, stream)
        changed = old_transform != config.subject_transform
        if old_subjects != config.subjects or old_direct != config.allow_direct or changed:
            self._subscribe_stream(stream)

    def drop_copy(self, name: str) -> None:
        """This server no longer holds a replica of the stream (membership.py): close it and
        delete its copy and its RAFT log; the stream lives on on its other peers."""
        stream = self.streams.get(name)
        if stream is None:
            return
        group_id = stream.group.group_id
        self.close_stream(name, remove=False)
        shutil.rmtree(self.stream_dir(name), ignore_errors=True)
        shutil.rmtree(self.service.group_dir(group_id), ignore_errors=True)

    def close_stream(self, name: str, *, remove: bool, keep_memory: bool = False) -> None:
        """`keep_memory`: a memory store is handed to the stream's next open (a conversion). Its
        consumers close first, while close_consumer still finds the stream: each one stops (no
        timer of it fires again), drops its subscription and leaves the RAFT group registry (a
        consumer left registered kept answering its group's leader for a copy deleted here, and
        made a later re-join of this server fail with "already registered")."""
        stream = self.streams.get(name)
        if stream is not None:
            sources.stop(stream)
            if remove:
                for consumer_name in stream.consumers:
                    advisories.consumer_action(self, name, consumer_name, "delete")
            for consumer_name in list(stream.consumers):
                self.close_consumer(name, consumer_name, remove=False, deleted=remove)
            del self.streams[name]
        for sub in self._stream_subs.pop(name, []):
            self.client.unsubscribe(sub)
        if stream is None:
            return
        self._leading.discard(name)
        self._create_replies.pop(name, None)
        if keep_memory and isinstance(stream.store, MemoryStreamStore):
            self.restored_stores[name] = stream.store
        stream.close(keep_store=keep_memory and isinstance(stream.store, MemoryStreamStore))
        self.service.unregister_group(stream.group)
        if remove and stream.replicated:  # its RAFT log goes with it
            self.service.ledger.forgot(stream.group.group_id, stream.created_ns)
            shutil.rmtree(os.path.join(self.service.root, "_raft", stream.group.group_id), ignore_errors=True)
        if remove:
            shutil.rmtree(self.stream_dir(name), ignore_errors=True)
            advisories.stream_action(self, name, "delete")

    # --- consumers -----------------------------------------------------------------------------------

    def consumer_for_ack(self, stream: bytes, name: bytes) -> Consumer | None:
        """The live consumer an ack subject's (stream, consumer) tokens name (the ack hot path)."""
        key = (stream, name)
        consumer = self._ack_targets.get(key)
        if consumer is not None and not consumer.deleted:
            # every server hears the acks of a cluster: the consumer's ready leader takes them, its
            # other replicas keep AckSyncs a moment for a leader change (consumer_acks.py)
            return consumer
        self._ack_targets.pop(key, None)
        owner = self.streams.get(stream.decode(errors="replace"))
        consumer = owner.consumers.get(name.decode(errors="replace")) if owner is not None else None
        if consumer is not None and len(self._ack_targets) < limits.JS_ACK_TARGETS_MAX:
            self._ack_targets[key] = consumer
        return consumer

    def consumer_storage(self, stream: Stream, config: ConsumerConfig) -> LogStorage:
        """Durable consumers of file streams keep a durable RAFT log; ephemerals (KV watchers,
        ordered consumers) live in memory and end with the server, as in nats-server."""
        name = config.name
        if stream.config.storage == "memory" or not config.durable_name or config.mem_storage:
            return memory_storage(self.service.peer)
        root = os.path.join(self.stream_dir(stream.config.name), "consumers")
        storage = durable_storage(root, name, self.service.peer)
        for line in storage.damage:
            label = f"'{self.account.name} > {stream.config.name} > {name}'"
            logger.error("JetStream consumer %s recovered from a damaged log (it redelivers): %s", label, line)
            self.service.damage[(self.account.name, f"{stream.config.name} > {name}")] = line
        return storage

    def open_consumer(
        self, stream: Stream, config: ConsumerConfig, created_ns: int, *, fresh: bool, seed: bytes = b"",
        group: object = None, join: bool = False,
    ) -> Consumer:
        """`seed`: a restored consumer's state (a state snapshot), its RAFT log's first snapshot;
        `group`: its meta record's RAFT group (None: a standalone server's single voter)."""
        default_id = group_name("C", self.account.name, stream.config.name, config.name)
        group_id, peers, preferred = _group_of(group, default_id)
        replication = None
        if len(peers) > 1:
            replication = self.service.replication(group_id, peers, directory=self._consumer_raft_dir(
                stream, config), join=join, created_ns=created_ns, restored=bool(seed))
            storage = replication.storage
        else:
            storage = self.consumer_storage(stream, config)
        if seed:
            storage.apply_snapshot(Snapshot(SnapshotMeta(1, 1, ConfState(tuple(sorted(peers)) or (self.service.peer,))), seed))
        consumer = Consumer(
            stream=stream,
            config=config,
            created_ns=created_ns,
            host=self,
            peer=self.service.peer,
            group_id=group_id,
            storage=storage,
            on_inactive=self._on_inactive,
            fresh=fresh,
            replication=replication,
        )
        stream.consumers[config.name] = consumer
        if replication is not None:
            self.service.watch_lost(f"consumer '{self.account.name} > {stream.config.name} > {config.name}'",
                                    consumer.group, replication, created_ns)
            self.service.register_group(consumer.group)
            lead = consumer.group.on_lead
            consumer.group.on_lead = lambda: (self.follow_leaders(), lead() if lead is not None else None)
            if preferred == self.service.peer and not join:
                consumer.group.campaign()
        self._subscribe_consumer(stream, consumer)
        return consumer

    def _consumer_raft_dir(self, stream: Stream, config: ConsumerConfig) -> str | None:
        """Where a replicated consumer keeps its durable RAFT log (None: in memory)."""
        if stream.config.storage == "memory" or not config.durable_name or config.mem_storage:
            return None
        return os.path.join(self.stream_dir(stream.config.name), "consumers", config.name)

    def _subscribe_consumer(self, stream: Stream, consumer: Consumer) -> None:
        """Pull requests go to the consumer's leader only (a follower would answer them wrongly)."""
        key = (stream.config.name, consumer.name)
        sub = self._consumer_subs.pop(key, None)
        if sub is not None:
            self.client.unsubscribe(sub)
        if not consumer.group.is_leader():
            if sub is not None:  # it led until now
                consumer.leadership_lost()
            return
        subject = f"$JS.API.CONSUMER.MSG.NEXT.{stream.config.name}.{consumer.name}".encode()

        def on_next(_subject: bytes, reply: bytes | None, header: bytes | None, data: bytes) -> None:
            payload = data[len(header) :] if header is not None else data
            consumer.on_pull(reply.decode() if reply else "", payload, header or b"")

        self._consumer_subs[key] = self.client.subscribe(subject, on_next)

    def close_consumer(self, stream_name: str, name: str, *, remove: bool, deleted: bool = True) -> None:
        self._ack_targets.clear()
        sub = self._consumer_subs.pop((stream_name, name), None)
        if sub is not None:
            self.client.unsubscribe(sub)
        stream = self.streams.get(stream_name)
        if stream is None:
            return
        consumer = stream.consumers.pop(name, None)
        if consumer is None:
            return
        consumer.stop(deleted=deleted)
        self.service.unregister_group(consumer.group)
        if remove:
            advisories.consumer_action(self, stream_name, name, "delete")
        if remove:
            self.service.ledger.forgot(consumer.group.group_id, consumer.created_ns)
            shutil.rmtree(os.path.join(self.stream_dir(stream_name), "consumers", name), ignore_errors=True)
            if stream.config.retention == "interest":
                stream.on_consumer_removed()

    def _on_inactive(self, consumer: Consumer) -> None:
        op = {
            "op": "consumer_del",
            "acc": self.account.name,
            "stream": consumer.stream.config.name,
            "consumer": consumer.name,
        }
        self.service.meta.propose(op, lambda _ok: None)

    # --- meta changes -----------------------------------------------------------------------------------

    def apply_meta(self, op: dict[str, object]) -> None:
        kind = op["op"]
        if kind == "stream_put":
            record = op["config"]
            assert isinstance(record, dict)
            config = stream_config_from_record(record)
            if config.name in self.streams:
                self.update_stream(config)
                self.membership.applied(config.name)  # its group may have changed (a replica count)
            elif not self.service.holds(op.get("group")):
                return  # the stream's replicas are on other servers
            elif self.service.peer in joining_of(op.get("group")):
                self.membership.applied(config.name)  # added to a running stream's group
            else:
                self.open_stream(config, int(str(op["created"])), op.get("group"))
                reply = op.get("reply")
                if isinstance(reply, str) and reply and self.service.meta.clustered:
                    self._create_replies[config.name] = reply  # its first leader answers the create
                    self.follow_leaders()
        elif kind == "stream_peers":
            self.membership.applied(str(op["stream"]))
        elif kind == "stream_del":
            self.membership.leaving.pop(str(op["stream"]), None)
            self.close_stream(str(op["stream"]), remove=True)
        elif kind == "consumer_put":
            record = op["config"]
            assert isinstance(record, dict)
            config = consumer_config_from_record(record)
            stream = self.streams.get(str(op["stream"]))
            if stream is None or not self.service.holds(op.get("group")):
                return
            existing = stream.consumers.get(config.name)
            if existing is not None:
                existing.update_config(config)
            else:
                seed = str(op.get("state", "")).encode()  # a restored consumer (restore.py)
                self.open_consumer(stream, config, int(str(op["created"])), fresh=not seed, seed=seed,
                                   group=op.get("group"))
        elif kind == "consumer_del":
            self.close_consumer(str(op["stream"]), str(op["consumer"]), remove=True)

    def on_interest(self, sub: Subscription) -> None:
        subject = sub.subject.decode()
        for stream in self.streams.values():
            for consumer in stream.consumers.values():
                deliver = consumer.config.deliver_subject
                if deliver and subject_matches(subject, deliver):
                    consumer.on_interest()

    def close(self) -> None:
        for session in list(self.restoring.values()):
            session.abandon("ended by shutdown")
        for name in list(self.streams):
            self.close_stream(name, remove=False)
        self.client.close()
        self.republisher.close()


class JetStreamService:
    def __init__(
        self, server: Server, *, clock: Clock | None = None, rng: random.Random | None = None,
        raft: RaftHost | None = None, routes: RouteManager | None = None,
    ) -> None:
        self.server = server
        self.options = server.options
        self.clock: Clock = clock or SystemClock()
        self.rng = rng or random.Random()
        self.root = store_root(self.options)
        self.raft = raft
        self.routes = routes
        # clustered: every group's peer id is nats-server's token of the server name (spec §9.2)
        self.peer = raft.peer if raft is not None else stable_peer_id(self.root, server.server_name)
        self.peer_names: dict[str, str] = {self.peer: server.server_name}  # peer id -> server name
        self.loop = asyncio.get_running_loop()
        self.forwarder = (ProposalForwarder(server, raft.peer, raft.registry, self.loop)
                          if raft is not None else None)
        server.jetstream_api_routed = raft is not None  # every server of the cluster hears each request
        self.driver: ClusterDriver | None = None
        self.meta_stepdown: MetaStepDown | None = None  # $JS.API.META.LEADER.STEPDOWN (system account)
        self.fsyncs = FsyncThreads(self.loop, limits.JS_FSYNC_THREADS)
        self.sync_stats = SyncStats()
        self.sealer = BackgroundSealer(self.loop.call_soon_threadsafe)
        self.accounts: dict[str, AccountJetStream] = {}
        self.failures: dict[tuple[str, str], str] = {}  # (account, stream) -> why it is not open
        # (account, "stream > consumer") or ("", "meta"): a RAFT log recovered from damage mid-file
        self.damage: dict[tuple[str, str], str] = {}
        self.disabled: dict[str, InternalClient] = {}  # accounts without JetStream: answered 10039
        self.system_api: InternalClient | None = None  # $JS.API.SERVER.REMOVE in the system account
        raft_root = os.path.join(self.root, "_raft")
        self.ledger = GroupLedger(raft_root)  # which groups' logs this store held (lost_log)
        server.jetstream_store_id = self.ledger.store_id
        server.jetstream_peer_stores = self.ledger.peer_stores
        self.store_lost = False  # this store replaced a lost one: meta_lost
        self.meta = MetaGroup(
            root=raft_root, peer=self.peer, clock=self.clock, rng=self.rng,
            scheduler=self.loop,
            server_name=server.server_name,
            cluster=self.options.cluster.name if self.options.cluster.port else "",
            tags=tuple(self.options.server_tags),
            unique_tag=self.options.jetstream.unique_tag,
            network=(MetaNetwork(raft.registry, self.forwarder)
                     if raft is not None and self.forwarder is not None else None),
        )
        self.started_ns = time.time_ns()
        server.jetstream_meta_voters = self.meta.group.voters() if self.meta.group is not None else ()
        if self.ledger.state(META_GROUP, 0) is GroupState.RECOVERING and self.meta.group is not None:
            self.meta_lost()  # found lost at an earlier start, not caught up since
        for line in self.meta.damage:
            logger.error("JetStream meta log recovered from damage (definitions after it are lost): %s", line)
            self.damage[("", "meta")] = line

    def start(self) -> None:
        settle_global_account(self.server)  # hook (resources.py): $G's JetStream as nats-server's
        gone = self._enable_accounts()
        self.meta.on_change = self._on_meta_change
        self._forget_ephemerals(gone)
        self.server.interest_listeners.append(self._on_interest_change)
        self.server.account_listeners.append(self._accounts_changed)
        from appliance.jetstream.monitor import JetStreamMonitor

        self.server.jetstream_monitor = JetStreamMonitor(self)  # type: ignore[attr-defined]
        if self.raft is not None and self.routes is not None:
            self.driver = ClusterDriver(self, self.routes, self.raft)
            self.driver.start()
            self.meta_stepdown = MetaStepDown(self)
            self.meta_stepdown.start()
        self.system_api = subscribe_server_remove(self)

    # --- clustered groups ---------------------------------------------------------------------------

    def holds(self, group: object) -> bool:
        """Does this server hold a replica of the asset whose meta record has `group`?"""
        if not isinstance(group, dict) or not self.meta.clustered:
            return True
        return self.peer in (group.get("peers") or ())

    def peer_name(self, peer: str) -> str:
        return self.peer_names.get(peer, peer)

    def group_dir(self, group_id: str) -> str:
        return os.path.join(self.root, "_raft", group_id)

    def replication(self, group_id: str, peers: list[str], *, directory: str | None = "", join: bool = False,
                    seed: bytes = b"", created_ns: int = 0, restored: bool = False) -> Replication:
        """The durable log (under <store>/_raft/<group>, or `directory`; None: in memory) and the
        routes of a group with several voters. `join`: a new log has no voters (the leader's
        appends bring them); `seed`: a new log starts with this snapshot at index 1 (`restored`: the
        caller applies one). `lost` is set when the log should exist here and does not (lost_log)."""
        assert self.raft is not None, "replicas > 1 need a cluster"
        conf = None if join else ConfState(tuple(sorted(set(peers))))
        storage: LogStorage
        lost = False
        if directory is None:
            storage = MemoryStorage(conf)
        else:
            path = directory or self.group_dir(group_id)
            empty = not os.path.isdir(path) or not os.listdir(path)
            lost = not (join or seed or restored) and self.lost_log(group_id, created_ns, empty=empty)
            files = OsLogFiles(path)
            storage = DurableStorage(files, "log", bootstrap=conf)
            self.ledger.held(group_id, created_ns)
        if seed and conf is not None and storage.last_index() == 0:
            storage.apply_snapshot(Snapshot(SnapshotMeta(1, 1, conf), seed))
        return Replication(storage=storage, transport=self.raft.registry.outbox(group_id),
                           catch_up=self.raft.catch_up.source(group_id), lost=lost)

    def meta_lost(self) -> None:
        """This server's whole store was lost (a peer remembers another store under its name:
        cluster_driver.py): its meta group abstains until the meta leader has caught it up, and
        every asset group it opens empty meanwhile was held here before (lost_log)."""
        group = self.meta.group
        assert group is not None
        self.store_lost = True
        self.ledger.recovering(META_GROUP, 0)
        logger.warning("JetStream cluster: this server's store is new, but its peers knew it with another store: "
                       "its RAFT state was lost; it takes no part in elections until the leaders have brought "
                       "it up to date")

        def caught_up() -> None:
            self.store_lost = False
            self.ledger.recovered(META_GROUP, 0)
            logger.info("JetStream cluster: meta log caught up after the loss of this server's store")

        group.abstain(caught_up)

    def lost_log(self, group_id: str, created_ns: int, *, empty: bool) -> bool:
        """Did this replica lose the RAFT log of this group incarnation? Yes if an earlier start
        found it lost and it has not caught up since; if it is empty although the store's ledger
        says it was held here (its directory deleted or lost); or if it is empty while the whole
        store is known lost and the meta log not caught up yet (meta_lost: the groups it learns
        back from the meta leader meanwhile are ones it held)."""
        state = self.ledger.state(group_id, created_ns)
        if state is GroupState.RECOVERING:
            return True
        return empty and (state is GroupState.HELD or self.store_lost)

    def watch_lost(self, label: str, group: RaftGroup, replication: Replication, created_ns: int) -> None:
        """A group whose log was lost abstains from elections until a leader has caught it up
        (RaftCore.abstain); the ledger keeps that across restarts until it has."""
        if not replication.lost:
            return
        group_id = group.group_id
        self.ledger.recovering(group_id, created_ns)
        logger.warning("JetStream %s: this replica lost its RAFT state (group %s); it takes no part in "
                       "elections until a leader has brought it up to date", label, group_id)

        def caught_up() -> None:
            self.ledger.recovered(group_id, created_ns)
            logger.info("JetStream %s: replica caught up after losing its state; it votes again", label)

        group.abstain(caught_up)

    def register_group(self, group: RaftGroup) -> None:
        if self.raft is not None:
            self.raft.registry.add(group)

    def unregister_group(self, group: RaftGroup) -> None:
        if self.raft is not None and self.raft.registry.get(group.group_id) is group:
            self.raft.registry.remove(group.group_id)

    def _enable_accounts(self) -> list[tuple[str, str, str]]:
        """JetStream for each account that has it (its streams and consumers opened, its API answered),
        10039 answers for the others; returns the ephemeral consumers of the last run in the new ones."""
        enabled = [account for account in self.server.accounts.all()
                   if account.jetstream and account.name not in self.accounts]
        for account in enabled:
            self.accounts[account.name] = AccountJetStream(self, account)
        gone = self._materialise([account.name for account in enabled])
        for account in enabled:
            api.subscribe_api(self.accounts[account.name])
        for account in self.server.accounts.all():
            if not account.jetstream and not account.is_system and account.name not in self.disabled:
                client = InternalClient(self.server, account, f"JetStream off {account.name}")
                self.disabled[account.name] = api.answer_not_enabled(client)
        return gone

    def _forget_ephemerals(self, gone: list[tuple[str, str, str]]) -> None:
        for account, stream, consumer in gone:  # ephemerals do not outlive the server
            op = {"op": "consumer_del", "acc": account, "stream": stream, "consumer": consumer}
            self.meta.propose(op, lambda _ok: None)

    def _accounts_changed(self, _added: list[Account], _removed: list[Account]) -> None:
        """After a reload (server/accounts.py): JetStream of an account removed or no longer enabled is
        closed (its streams stay on disk; its API answers 10039 while the account exists), and an account
        with JetStream now gets it at once, with whatever streams the meta state holds for it."""
        self.options = self.server.options  # the accounts' limits of the reload (reload_options, next)
        registry = self.server.accounts
        for name, ajs in list(self.accounts.items()):
            if registry.get(name) is not ajs.account or not ajs.account.jetstream:
                logger.info("JetStream disabled for account %s by a reload (its streams stay on disk)", name)
                del self.accounts[name]
                ajs.close()
                for key in [key for key in self.failures if key[0] == name]:
                    del self.failures[key]  # reported again if it fails to open when enabled again
        for name, client in list(self.disabled.items()):
            if registry.get(name) is not client.account or client.account.jetstream:
                del self.disabled[name]
                client.close()
        self._forget_ephemerals(self._enable_accounts())

    def reload_options(self, options: ServerOptions) -> None:
        """A config reload (appliance/server/reload.py checked it): accounts' JetStream limits apply from now on."""
        self.options = options

    def _materialise(self, account_names: list[str]) -> list[tuple[str, str, str]]:
        """Open every stream and durable consumer of these accounts; returns the ephemerals of the last run."""
        gone: list[tuple[str, str, str]] = []
        for account_name in account_names:
            streams = self.meta.state.accounts.get(account_name, {})
            ajs = self.accounts[account_name]
            for record in streams.values():
                config_record = record["config"]
                assert isinstance(config_record, dict)
                config = stream_config_from_record(config_record)
                if not self.holds(record.get("group")):
                    continue
                try:
                    stream = ajs.open_stream(config, int(str(record["created"])), record.get("group"))
                except (OSError, ApplianceError) as exc:
                    self._not_opened(account_name, config.name, "", exc)  # the others open
                    continue
                consumers = record["consumers"]
                assert isinstance(consumers, dict)
                for consumer_record in consumers.values():
                    consumer_config = consumer_config_from_record(consumer_record["config"])
                    if not consumer_config.durable_name:
                        gone.append((account_name, stream.config.name, consumer_config.name))
                        continue
                    if not self.holds(consumer_record.get("group")):
                        continue
                    try:
                        ajs.open_consumer(stream, consumer_config, int(str(consumer_record["created"])), fresh=False,
                                          group=consumer_record.get("group"))
                    except (OSError, ApplianceError) as exc:
                        self._not_opened(account_name, config.name, consumer_config.name, exc)
        self._orphans(account_names)
        return gone

    def _orphans(self, account_names: list[str]) -> None:
        """Stream directories on disk that the meta state does not hold (its log lost them):
        never deleted, reported until they are defined again or removed by an operator."""
        for account_name in account_names:
            ajs = self.accounts[account_name]
            streams_dir = os.path.join(self.root, account_name, "streams")
            if not os.path.isdir(streams_dir):
                continue
            for name in sorted(os.listdir(streams_dir)):
                if name not in ajs.streams and (account_name, name) not in self.failures:
                    why = "stream data found on disk without a definition (lost with a damaged meta log?)"
                    self._not_opened(account_name, name, "", ApplianceError(why))

    def _not_opened(self, account: str, stream: str, consumer: str, exc: BaseException) -> None:
        """One stream or consumer could not be opened: contained to it, reported by /healthz."""
        label = f"'{account} > {stream}" + (f" > {consumer}'" if consumer else "'")
        logger.error("JetStream could not open %s: %s", label, exc)
        self.failures[(account, stream if not consumer else f"{stream} > {consumer}")] = str(exc)

    def _on_meta_change(self, op: dict[str, object]) -> None:
        if "acc" not in op:  # server_remove: the cluster driver acts on it (cluster_driver.py)
            return
        ajs = self.accounts.get(str(op["acc"]))
        if ajs is None:
            return
        try:
            ajs.apply_meta(op)
        except Exception as exc:  # noqa: BLE001 - contained to the asset: the meta group must go on applying
            # The assignment stays in the meta state; the asset is reported missing (the API
            # answers with a create error) and is opened again on the next start.
            config = op.get("config")
            name = op.get("stream") or (config.get("name") if isinstance(config, dict) else "")
            self.failures[(str(op["acc"]), str(name))] = str(exc)
            logger.error("JetStream could not apply %s: %s", op["op"], exc)

    def _on_interest_change(self, account: Account, sub: Subscription, added: bool) -> None:
        if not added:
            return
        ajs = self.accounts.get(account.name)
        if ajs is not None and not isinstance(sub.conn, InternalClient):
            ajs.on_interest(sub)

    def stop(self) -> None:
        if self.driver is not None:
            self.driver.close()
        if self.meta_stepdown is not None:
            self.meta_stepdown.close()
        self.server.jetstream_monitor = None  # type: ignore[attr-defined]
        if self._on_interest_change in self.server.interest_listeners:
            self.server.interest_listeners.remove(self._on_interest_change)
        if self._accounts_changed in self.server.account_listeners:
            self.server.account_listeners.remove(self._accounts_changed)
        self.fsyncs.stop()  # fsyncs in flight finish before their stores close
        self.sealer.close()
        for ajs in self.accounts.values():
            ajs.close()
        for client in self.disabled.values():
            client.close()
        if self.system_api is not None:
            self.system_api.close()
        if self.forwarder is not None:
            self.forwarder.close()
        self.ledger.close()


def _group_of(group: object, default_id: str) -> tuple[str, list[str], str]:
    """(group id, peers, preferred) of a meta record's group; a standalone server's own otherwise."""
    if isinstance(group, dict) and group.get("name"):
        peers = [str(peer) for peer in group.get("peers") or ()]
        return str(group["name"]), peers, str(group.get("preferred") or "")
    return default_id, [], ""


def start_jetstream(server: Server, *, raft: RaftHost | None = None,
                    routes: RouteManager | None = None) -> JetStreamService:
    """Start JetStream on a started server (call on its loop); stop() it before the server shuts down.

    JetStream keeps large, long-lived object graphs (store indexes, consumer state) that the
    cyclic GC would walk at its default thresholds: full collections stalled the loop for tens
    of milliseconds under load. Its garbage is freed by reference counting, so collections run
    far less often here."""
    gc.set_threshold(*limits.JS_GC_THRESHOLDS)
    service = JetStreamService(server, raft=raft, routes=routes)
    service.start()
    logger.info("Starting JetStream, store directory %s", service.root)
    return service


def start_relay(server: Server) -> DeliveryRelay:
    """On a worker that does not run JetStream itself: relay deliveries from the one that does."""
    return DeliveryRelay(server)
