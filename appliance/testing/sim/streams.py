"""Replicated streams in the simulator: the real Stream state machine on several simulated
servers, its RAFT group driven by each server's hand-cranked loop, its log durable on a SimDisk
(a crash loses what was not fsynced), and RAFT messages carried by a seeded SimNetwork through
one GroupRegistry per server (the same registry and RaftTransport seam the routes will use).

    replicas = StreamReplicas(seed=7)
    leader = replicas.elect()
    leader.publish("s.a", b"payload")   # PubAck goes to leader.host.sent, after quorum persistence
    replicas.run_until(lambda: ...)
    replicas.crash("n1")                # loses n1's unsynced disk writes and its in-flight sends
    replicas.start("n1")                # restarts it from what its disks kept

With `file_stores=True` each server's stream lives in a FileStreamStore on its own FaultFS (the
store's files survive a crash as `crash(peer, mode)` says: "flush" keeps every write, as a killed
process's page cache does; "lose" keeps only what was fsynced, as a power cut), and
`crash_store_at(peer, n)` makes the n-th next write of that store's file system crash the server
right there, in the middle of whatever it was doing (an apply, a journal record).
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from appliance import limits
from appliance.clock import ManualClock
from appliance.cluster.raft_storage import DurableStorage
from appliance.cluster.registry import GroupRegistry
from appliance.jetstream.config import StreamConfig, parse_consumer_config, parse_stream_config
from appliance.jetstream.consumer import Consumer
from appliance.jetstream.groups import Replication
from appliance.jetstream.stream import Stream, store_limits
from appliance.raft.codec import decode_message, encode_message
from appliance.raft.types import ConfState
from appliance.store.api import StoredMsg
from appliance.store.layout import SyncJob
from appliance.store.filestore import FileStoreConfig, FileStreamStore
from appliance.store.memory import MemoryStreamStore
from appliance.testing.faultfs import CrashMode, FaultFS, SimulatedCrash
from appliance.testing.sim.disk import SimDisk
from appliance.testing.sim.network import NetworkFaults, SimNetwork

GROUP_ID = "S-sim"
CONSUMER_GROUP_ID = "C-sim"
TICK_S = 0.05
NETWORK_QUEUE_MAX = 100_000


@dataclass(eq=False)
class _Timer:
    due_s: float
    fn: Callable[[], None] | None

    def cancel(self) -> None:
        self.fn = None


@dataclass
class SimHost:
    """A jetstream Host on a simulated server: a loop turned by the simulator, no sockets."""

    server_name: str
    clock: ManualClock
    rng: random.Random
    domain: str = ""
    sync_always: bool = True
    sync_interval_s: float = 120.0
    soon: list[Callable[[], None]] = field(default_factory=list)
    timers: list[_Timer] = field(default_factory=list)
    sent: list[tuple[bytes, bytes]] = field(default_factory=list)
    delivered: list[tuple[bytes, bytes, bytes]] = field(default_factory=list)  # (to, ack reply, payload)

    def now_ns(self) -> int:
        return int(self.clock.wall() * 1e9)

    def send(self, subject: str, payload: bytes, *, reply: str = "", header: bytes | None = None) -> None:
        self.sent.append((subject.encode(), payload))

    def publish_many(self, messages: list[tuple[bytes, bytes]], *, flush_now: bool = False) -> None:
        self.sent.extend(messages)

    def republish(self, subject: bytes, header: bytes, payload: bytes) -> None:
        self.sent.append((subject, payload))

    def deliver(self, match: str, subject: str, reply: str, header: bytes | None, payload: bytes) -> int:
        self.delivered.append((match.encode(), reply.encode(), payload))
        return 1

    def deliver_raw(
        self, key: bytes, subject_b: bytes, reply_b: bytes | None, header: bytes | None, payload: bytes
    ) -> int:
        self.delivered.append((key, reply_b or b"", payload))
        return 1

    def deliverer(self, key: bytes) -> Callable[[bytes, bytes | None, bytes | None, bytes], int]:
        return lambda subject, reply, header, payload: self.deliver_raw(key, subject, reply, header, payload)

    def has_interest(self, subject: str, queue: str = "") -> bool:
        return subject.startswith("_INBOX.")  # pull requesters listen; nobody listens to advisories

    def call_soon(self, fn: Callable[[], None]) -> None:
        self.soon.append(fn)

    def call_later(self, delay_s: float, fn: Callable[[], None]) -> _Timer:
        timer = _Timer(self.clock.monotonic() + delay_s, fn)
        self.timers.append(timer)
        return timer

    def run_sync_job(self, job: SyncJob, done: Callable[[OSError | None], None]) -> None:
        job.run()
        self.soon.append(lambda: done(None))

    def turn(self) -> bool:
        """Run what is due: timers whose time came, then one batch of call_soon callbacks."""
        now = self.clock.monotonic()
        due = [timer for timer in self.timers if timer.due_s <= now]
        self.timers = [timer for timer in self.timers if timer.due_s > now and timer.fn is not None]
        soon, self.soon = self.soon, []
        for timer in due:
            if timer.fn is not None:
                timer.fn()
        for fn in soon:
            fn()
        return bool(soon or due)


class _NetTransport:
    """RaftTransport of one server onto the SimNetwork (the network carries decoded messages)."""

    def __init__(self, replicas: StreamReplicas, peer: str) -> None:
        self.replicas, self.peer = replicas, peer

    def send(self, peer: str, group_id: str, message: bytes) -> None:
        decoded = decode_message(message)
        assert decoded.sender == self.peer and decoded.to == peer
        self.replicas.network.send(self.replicas.ticks, group_id, decoded)

    def flush(self) -> None:
        """The simulated network delivers by its own schedule: nothing waits here."""


class _CatchUp:
    """CatchUpSource of one server: asks the named replica's Stream in-process (catch_up_batch,
    as cluster/catch_up.py serves it: None unless that replica holds the whole range), answers
    a tick later (a round trip: one batch per tick, so a crash can land between two batches)."""

    def __init__(self, replicas: StreamReplicas, peer: str, host: SimHost) -> None:
        self.replicas, self.peer, self.host = replicas, peer, host

    def fetch(
        self, leader: str, from_seq: int, to_seq: int, done: Callable[[list[StoredMsg] | None], None]
    ) -> None:
        source = self.replicas.replicas.get(leader)
        if source is None or leader == self.peer:  # no leader known, or it is down: asked again later
            self.host.call_soon(lambda: done(None))
            return
        batch = source.stream.catch_up_batch(from_seq, to_seq, limits.JS_CATCHUP_BATCH_MSGS,
                                             limits.JS_CATCHUP_BATCH_BYTES)
        if batch is not None:
            self.replicas.catch_up_batches.append(len(batch))
        self.host.call_later(TICK_S, lambda: done(batch))


@dataclass
class Replica:
    name: str
    disk: SimDisk
    host: SimHost
    registry: GroupRegistry
    stream: Stream
    consumer: Consumer | None = None

    def publish(self, subject: str, payload: bytes, *, reply: str = "", header: bytes = b"") -> None:
        self.stream.publish_raw(subject, reply.encode(), header, payload)


class StreamReplicas:
    def __init__(self, *, seed: int, peers: Sequence[str] = ("n1", "n2", "n3"),
                 config: StreamConfig | None = None, faults: NetworkFaults | None = None,
                 snapshot_entries: int | None = None, consumer: dict[str, object] | None = None,
                 file_stores: bool = False, segment_bytes: int | None = None) -> None:
        self.rng = random.Random(seed)
        self.peers = tuple(peers)
        # parsed as R1 (the config layer refuses R>1 without a cluster), then given its replicas
        base = config or parse_stream_config({"name": "S", "subjects": ["s.>"]})
        self.config = dataclasses.replace(base, num_replicas=len(self.peers))
        self.clock = ManualClock()
        self.network = SimNetwork(random.Random(self.rng.getrandbits(64)), faults or NetworkFaults(),
                                  queue_max=NETWORK_QUEUE_MAX)
        self.ticks = 0
        self.snapshot_entries = snapshot_entries
        self.consumer_config = (
            None if consumer is None else parse_consumer_config(consumer, stream=self.config, ephemeral=False)
        )
        self.disks = {peer: SimDisk() for peer in self.peers}
        self.filesystems = {peer: FaultFS() for peer in self.peers} if file_stores else {}
        self.segment_bytes = segment_bytes  # small: the stores roll (and seal) segments often
        self.crashes: list[str] = []  # servers that crashed at an injected write (crash_store_at)
        self.catch_up_batches: list[int] = []  # sizes of the batches lagging replicas fetched
        self._crash_mode: CrashMode = "flush"
        self.replicas: dict[str, Replica] = {}
        self.replicas_started: set[str] = set()
        for peer in self.peers:
            self.start(peer)

    def start(self, peer: str) -> Replica:
        host = SimHost(peer, self.clock, random.Random(self.rng.getrandbits(64)))
        registry = GroupRegistry(_NetTransport(self, peer))
        storage = DurableStorage(self.disks[peer], f"{GROUP_ID}.raftlog", bootstrap=ConfState(self.peers))
        store: MemoryStreamStore | FileStreamStore
        if self.filesystems:
            directory = f"/{peer}/streams/{self.config.name}"
            config = FileStoreConfig(directory, limits=store_limits(self.config))
            if self.segment_bytes is not None:
                config = dataclasses.replace(config, segment_bytes=self.segment_bytes,
                                             block_raw_bytes=min(config.block_raw_bytes, self.segment_bytes))
            store = FileStreamStore(config, ops=self.filesystems[peer])
        else:
            store = MemoryStreamStore(store_limits(self.config))
        replication = Replication(storage=storage, transport=registry.outbox(GROUP_ID), tick_s=TICK_S,
                                  snapshot_entries=self.snapshot_entries, catch_up=_CatchUp(self, peer, host))
        stream = Stream(config=self.config, created_ns=1, store=store, host=host, peer=peer,
                        group_id=GROUP_ID, replication=replication)
        registry.add(stream.group)
        replica = Replica(peer, self.disks[peer], host, registry, stream)
        if self.consumer_config is not None:
            name = f"{CONSUMER_GROUP_ID}.raftlog"
            log = DurableStorage(self.disks[peer], name, bootstrap=ConfState(self.peers))
            outbox = registry.outbox(CONSUMER_GROUP_ID)
            on_consumer = Replication(storage=log, transport=outbox, tick_s=TICK_S)
            replica.consumer = Consumer(
                stream=stream, config=self.consumer_config, created_ns=1, host=host, peer=peer,
                group_id=CONSUMER_GROUP_ID, storage=log, on_inactive=lambda _c: None,
                fresh=peer not in self.replicas_started,  # a restart reopens it, as the service does
                replication=on_consumer,
            )
            stream.consumers[self.consumer_config.name] = replica.consumer
            registry.add(replica.consumer.group)
        self.replicas[peer] = replica
        self.replicas_started.add(peer)
        return replica

    def crash(self, peer: str, mode: CrashMode = "lose") -> None:
        """The server dies: its RAFT log's unsynced writes and its in-flight sends are lost; its
        file store keeps what `mode` says (file_stores only)."""
        replica = self.replicas.pop(peer)
        replica.stream.deleted = True
        if replica.consumer is not None:
            replica.consumer.deleted = True
        self.disks[peer].crash(self.rng, torn=False)
        self.network.lose_unflushed(peer, sent_since=self.ticks)
        if self.filesystems:
            self.filesystems[peer] = self.filesystems[peer].after_crash(mode)

    def crash_store_at(self, peer: str, writes_from_now: int, mode: CrashMode = "flush") -> None:
        """Crash `peer` at the given write of its store's file system from now on."""
        fs = self.filesystems[peer]
        fs.crash_at = fs.calls + writes_from_now
        self._crash_mode = mode

    def step(self) -> None:
        """One simulated tick: deliver due messages, tick every group, turn every loop."""
        self.ticks += 1
        self.clock.advance(TICK_S)
        for group_id, message in self.network.due(self.ticks):
            replica = self.replicas.get(message.to)
            if replica is not None and message.sender in self.replicas:
                replica.registry.deliver(group_id, message.sender, encode_message(message))
        for replica in list(self.replicas.values()):
            replica.registry.tick()
        for _ in range(50):
            busy = False
            for replica in list(self.replicas.values()):
                try:
                    busy |= replica.host.turn()
                except SimulatedCrash:  # an injected crash in the middle of this server's turn
                    self.crashes.append(replica.name)
                    self.crash(replica.name, self._crash_mode)
                    busy = True
            if not busy:
                break

    def run_until(self, condition: Callable[[], bool], *, ticks_max: int = 2_000) -> None:
        for _ in range(ticks_max):
            if condition():
                return
            self.step()
        raise AssertionError(f"condition not reached in {ticks_max} ticks")

    def leader(self) -> Replica | None:
        leaders = [r for r in self.replicas.values() if r.stream.group.is_leader()]
        return leaders[0] if len(leaders) == 1 else None

    def consumer_leader(self) -> Replica | None:
        leaders = [
            r for r in self.replicas.values() if r.consumer is not None and r.consumer.group.is_leader()
        ]
        return leaders[0] if len(leaders) == 1 else None

    def elect(self) -> Replica:
        self.run_until(lambda: self.leader() is not None)
        leader = self.leader()
        assert leader is not None
        return leader
