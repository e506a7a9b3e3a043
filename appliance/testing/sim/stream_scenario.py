"""A seeded randomized run of a replicated stream and its replicated pull consumer in the
simulator (streams.py: the real Stream and Consumer state machines, three simulated servers).

One seed draws everything: the network's faults (drop, duplicate, delay), whether the servers
keep file stores (memory stores otherwise, refilled from the log), how often the RAFT logs
snapshot, the consumer's ack_wait and max_deliver, and
then, tick by tick, what the nemesis does (crash a server, its stream or consumer leader most
often; restart it; cut the network into two sides; heal it) and what the clients do: a publisher
sends messages with Nats-Msg-Id to whichever replica leads the stream and sends again what was
not acknowledged after a while; a consumer client pulls from whichever replica leads the
consumer and acks most deliveries (half with AckSync), some late, some never.

Checked after every tick (a breach stops the run, naming the tick):
  - one leader per term, per group (stream and consumer), across restarts;
  - a publish is acknowledged at one sequence only, and a delivery of message n comes from the
    sequence its PubAck named;
  - an AckSync is answered only once its ack is on a quorum of the consumer's logs, counting
    what each disk keeps if its server lost power right now;
  - a message whose AckSync was answered is never delivered again (by any later leader);
  - a redelivery by the same leader comes no sooner than ack_wait after the last delivery, and
    no delivery counts past max_deliver.
Checked at the end, after the network heals, every server is up and the publisher has had every
message acknowledged, and the consumer client then acks every delivery until the consumer has
delivered every message and holds none pending (what the failovers left unacked came again):
every acknowledged publish is stored once, at its sequence, on every replica; every stored
message was acked by the client or given up on after max_deliver (at least once: none silently
skipped); the replicas' stores are identical and so are their consumer states. Not reaching those ends in bounded time
fails the run too (liveness).
"""

from __future__ import annotations

import json
import random
import traceback
from dataclasses import dataclass, field

from appliance.cluster.raft_storage import DurableStorage
from appliance.jetstream import consumer_state
from appliance.jetstream.config import parse_stream_config
from appliance.raft.types import EntryType
from appliance.testing.sim.checkers import Checkers, Violation
from appliance.testing.sim.network import NetworkFaults
from appliance.testing.sim.streams import CONSUMER_GROUP_ID, GROUP_ID, TICK_S, Replica, StreamReplicas

NS = 1_000_000_000
RETRY_TICKS = 30  # a publisher sends again what was not acknowledged after this long
PULL_BATCH = 5
PULL_EXPIRES_TICKS = 20
SETTLE_TICKS_MAX = 6_000  # after the faults: time to get every publish acknowledged and replicas equal


@dataclass(frozen=True, slots=True)
class StreamSimOptions:
    seed: int
    ticks: int = 600

    def command(self) -> str:
        return f"appliance sim --streams --seed {self.seed} --ticks {self.ticks}"


@dataclass(slots=True)
class StreamSimResult:
    seed: int
    ok: bool = True
    failure: str = ""
    failed_tick: int = -1
    ticks: int = 0
    settle_ticks: int = 0
    published: int = 0
    acked: int = 0
    deliveries: int = 0
    redeliveries: int = 0
    acks_sent: int = 0
    acks_confirmed: int = 0
    crashes: int = 0
    partitions: int = 0
    stream_leaders: int = 0
    consumer_leaders: int = 0
    setup: str = ""
    command: str = ""

    def summary(self) -> str:
        verdict = "ok" if self.ok else f"FAILED at tick {self.failed_tick}: {self.failure}"
        return (f"seed {self.seed}: {verdict}\n"
                f"  ticks {self.ticks} (+{self.settle_ticks} settling), published {self.published}, "
                f"acked {self.acked}, deliveries {self.deliveries} ({self.redeliveries} redeliveries), "
                f"acks {self.acks_sent} ({self.acks_confirmed} AckSync answered), crashes {self.crashes}, "
                f"partitions {self.partitions}, leaders {self.stream_leaders} stream / "
                f"{self.consumer_leaders} consumer\n  setup: {self.setup}\n  replay: {self.command}")


@dataclass(slots=True)
class _Delivery:
    tick: int
    name: str  # the replica that delivered it
    term: int  # its consumer term then


@dataclass(slots=True)
class _Observed:
    """How far the checker has read one server incarnation's outputs."""

    host: object
    sent: int = 0
    delivered: int = 0


@dataclass(slots=True)
class _Client:
    unacked: dict[int, int] = field(default_factory=dict)  # message number -> tick last sent
    acked: dict[int, int] = field(default_factory=dict)  # message number -> seq its PubAck named
    next_number: int = 0
    pulls: int = 0
    acks_due: list[tuple[int, bytes, bool]] = field(default_factory=list)  # (tick, ack subject, sync)
    sync_waiting: dict[str, int] = field(default_factory=dict)  # AckSync reply -> sseq
    confirmed: set[int] = field(default_factory=set)  # sseqs whose AckSync was answered
    acked_seqs: set[int] = field(default_factory=set)  # sseqs the client sent an ack for to a leader


class StreamScenario:
    def __init__(self, options: StreamSimOptions) -> None:
        self.options = options
        master = random.Random(options.seed)
        self.rng = random.Random(master.getrandbits(64))  # nemesis and clients
        self.check_rng = random.Random(master.getrandbits(64))  # power cuts of disk images
        setup = random.Random(master.getrandbits(64))
        faults = NetworkFaults(drop=setup.choice([0.0, 0.01, 0.03]), duplicate=setup.choice([0.0, 0.02]),
                               delay_ticks_max=setup.choice([0, 1, 3]))
        self.ack_wait_ticks = setup.choice([6, 10, 20])
        self.max_deliver = setup.choice([-1, 2, 4])
        file_stores = setup.random() < 0.5
        # A memory store is empty after a crash: it is refilled from the log (never compacted in
        # a run this short) or from a replica that kept it; with every copy crashed in turn and
        # a compacted log, acknowledged messages would be gone, as memory storage promises.
        snapshot_entries = setup.choice([None, 8, 32]) if file_stores else None
        self.crash_rate = setup.choice([0.005, 0.01, 0.02])
        self.partition_rate = setup.choice([0.0, 0.005, 0.01])
        consumer = {"durable_name": "D", "name": "D", "ack_policy": "explicit",
                    "ack_wait": self.ack_wait_ticks * int(TICK_S * NS),
                    "max_deliver": self.max_deliver}
        config = parse_stream_config({"name": "S", "subjects": ["s.>"]})
        self.replicas = StreamReplicas(seed=master.getrandbits(32), config=config, faults=faults,
                                       snapshot_entries=snapshot_entries, consumer=consumer,
                                       file_stores=file_stores)
        self.checkers = Checkers([GROUP_ID, CONSUMER_GROUP_ID])
        self.client = _Client()
        self.observed: dict[str, _Observed] = {}
        self.deliveries: dict[int, _Delivery] = {}  # sseq -> its last delivery
        self.most_deliveries: dict[int, int] = {}  # sseq -> the highest delivery count seen
        self.down: list[str] = []
        self.acking_all = False  # the end: every delivery acked (AckSync) at once
        self.tick = 0
        self.result = StreamSimResult(
            options.seed, command=options.command(),
            setup=(f"drop {faults.drop}, duplicate {faults.duplicate}, delay<={faults.delay_ticks_max}, "
                   f"ack_wait {self.ack_wait_ticks} ticks, max_deliver {self.max_deliver}, "
                   f"{'file' if file_stores else 'memory'} stores, snapshot every {snapshot_entries or 'default'}, "
                   f"crash rate {self.crash_rate}, partition rate {self.partition_rate}"),
        )

    # --- the run -----------------------------------------------------------------------------------

    def run(self) -> StreamSimResult:
        result = self.result
        try:
            for _ in range(self.options.ticks):
                self._nemesis()
                self._clients(publishing=True)
                self.step()
            self._settle()
            self._final_checks()
        except Violation as violation:
            result.ok, result.failure, result.failed_tick = False, str(violation), self.tick
        except Exception as error:  # the state machines themselves broke: a finding too
            where = traceback.extract_tb(error.__traceback__)[-1]
            result.ok, result.failed_tick = False, self.tick
            result.failure = f"{type(error).__name__}: {error} (at {where.filename}:{where.lineno})"
        result.ticks = min(self.tick, self.options.ticks)
        result.published = self.client.next_number
        result.acked = len(self.client.acked)
        result.acks_confirmed = len(self.client.confirmed)
        return result

    def step(self) -> None:
        self.tick += 1
        self.replicas.step()
        self._observe()

    def _settle(self) -> None:
        """Heal everything, start every server, and let the publisher finish; then ack every
        delivery until the consumer holds nothing pending; then wait for the replicas to hold
        the same stores and states."""
        replicas = self.replicas
        replicas.network.heal()
        replicas.network.faults = NetworkFaults()
        while self.down:
            self._start(self.down[0])
        start = self.tick
        while self.client.unacked:
            if self.tick - start > SETTLE_TICKS_MAX:
                raise Violation(f"liveness: {len(self.client.unacked)} publishes never acknowledged "
                                f"after healing (e.g. message {min(self.client.unacked)})")
            self._clients(publishing=False)
            self.step()
        self.acking_all = True
        while not self._consumer_done():
            if self.tick - start > SETTLE_TICKS_MAX:
                raise Violation("liveness: after healing, the consumer did not deliver and get acked every message")
            self._clients(publishing=False)
            self.step()
        while not self._converged():
            if self.tick - start > SETTLE_TICKS_MAX:
                raise Violation("liveness: replicas did not converge after healing")
            self.step()
        self.result.settle_ticks = self.tick - start

    def _consumer_done(self) -> bool:
        leader = self.replicas.consumer_leader()
        if leader is None or leader.consumer is None or not leader.consumer.group.ready_to_lead():
            return False
        state = leader.consumer.state
        return not state.pending and state.delivered_sseq >= leader.stream.store.state().last_seq

    def _converged(self) -> bool:
        everyone = list(self.replicas.replicas.values())
        streams = {r.stream.group.applied() for r in everyone}
        consumers = {r.consumer.group.applied() for r in everyone if r.consumer is not None}
        leader = self.replicas.leader()
        return (len(streams) == 1 and len(consumers) == 1 and leader is not None
                and leader.stream.group.core.log.committed == streams.pop())

    # --- faults ------------------------------------------------------------------------------------

    def _nemesis(self) -> None:
        rng, replicas = self.rng, self.replicas
        if self.down and rng.random() < 0.05:
            self._start(rng.choice(self.down))
        live = sorted(replicas.replicas)
        if live and len(self.down) < 2 and rng.random() < self.crash_rate:
            aimed = [r.name for r in (replicas.leader(), replicas.consumer_leader()) if r is not None]
            victim = rng.choice(aimed) if aimed and rng.random() < 0.7 else rng.choice(live)
            replicas.crash(victim, rng.choice(["lose", "flush"]))
            self.down.append(victim)
            self.result.crashes += 1
        if not replicas.network.blocked and rng.random() < self.partition_rate:
            side = set(rng.sample(list(replicas.peers), rng.choice([1, 1, 2])))
            replicas.network.partition(side, list(replicas.peers))
            self.result.partitions += 1
        elif replicas.network.blocked and rng.random() < 0.04:
            replicas.network.heal()

    def _start(self, name: str) -> None:
        self.down.remove(name)
        self.replicas.start(name)

    # --- clients -----------------------------------------------------------------------------------

    def _leading(self, consumer: bool) -> Replica | None:
        """Where a client's message lands: a replica that believes it leads (only leaders listen);
        a partitioned old leader may still believe so."""
        leaders = [r for r in self.replicas.replicas.values()
                   if (r.consumer.group if consumer and r.consumer else r.stream.group).is_leader()]
        return self.rng.choice(leaders) if leaders else None

    def _clients(self, *, publishing: bool) -> None:
        rng, client = self.rng, self.client
        target = self._leading(consumer=False)
        numbers = [n for n, sent in client.unacked.items() if sent + RETRY_TICKS <= self.tick]
        if publishing and rng.random() < 0.7:
            for _ in range(rng.randrange(1, 4)):
                numbers.append(client.next_number)
                client.next_number += 1
        for number in numbers:
            client.unacked[number] = self.tick
            if target is not None:
                header = b"NATS/1.0\r\nNats-Msg-Id: m%d\r\n\r\n" % number
                target.publish("s.%d" % (number % 3), b"m%d" % number, reply="r.%d" % number, header=header)
        consumer = self._leading(consumer=True)
        if consumer is not None and consumer.consumer is not None and (self.acking_all or rng.random() < 0.15):
            client.pulls += 1
            batch = PULL_BATCH * 10 if self.acking_all else PULL_BATCH
            body = json.dumps({"batch": batch, "expires": PULL_EXPIRES_TICKS * int(TICK_S * NS)})
            consumer.consumer.on_pull(f"_INBOX.p{client.pulls}", body.encode())
        due = [item for item in client.acks_due if item[0] <= self.tick]
        client.acks_due = [item for item in client.acks_due if item[0] > self.tick]
        for _, subject, sync in due:
            self.result.acks_sent += 1
            consumer = self._leading(consumer=True)
            if consumer is None or consumer.consumer is None:
                continue  # nobody listens: the ack is lost, the message comes again
            reply = ""
            client.acked_seqs.add(int(subject.split(b".")[5]))
            if sync:
                reply = f"acked.{self.result.acks_sent}"
                client.sync_waiting[reply] = int(subject.split(b".")[5])
            consumer.consumer.on_ack(subject.decode().split("."), reply, b"+ACK")

    # --- what the servers sent ---------------------------------------------------------------------

    def _observe(self) -> None:
        for replica in self.replicas.replicas.values():
            for group, name in ((replica.stream.group, GROUP_ID),
                                (replica.consumer.group if replica.consumer else None, CONSUMER_GROUP_ID)):
                if group is not None and group.is_leader():
                    if self.checkers.on_leader(name, group.core.term, replica.name):
                        if name == GROUP_ID:
                            self.result.stream_leaders += 1
                        else:
                            self.result.consumer_leaders += 1
        answered: list[int] = []
        for replica in self.replicas.replicas.values():
            seen = self.observed.get(replica.name)
            if seen is None or seen.host is not replica.host:
                seen = self.observed[replica.name] = _Observed(replica.host)
            sent = replica.host.sent[seen.sent:]
            seen.sent += len(sent)
            for subject, body in sent:
                if subject.startswith(b"r."):
                    self._on_puback(int(subject[2:]), body)
                elif subject.startswith(b"acked."):
                    sseq = self.client.sync_waiting.pop(subject.decode(), None)
                    if sseq is not None:
                        answered.append(sseq)
            delivered = replica.host.delivered[seen.delivered:]
            seen.delivered += len(delivered)
            for _, ack, payload in delivered:
                self._on_delivery(replica, ack, payload)
        if answered:
            self._check_acks_on_quorum(answered)
            self.client.confirmed.update(answered)

    def _on_puback(self, number: int, body: bytes) -> None:
        answer = json.loads(body)
        if "error" in answer:
            return
        seq = int(answer["seq"])
        known = self.client.acked.setdefault(number, seq)
        if known != seq:
            raise Violation(f"message {number} acknowledged at seq {known} and again at seq {seq}")
        self.client.unacked.pop(number, None)

    def _on_delivery(self, replica: Replica, ack: bytes, payload: bytes) -> None:
        tokens = ack.split(b".")
        dc, sseq = int(tokens[4]), int(tokens[5])
        self.result.deliveries += 1
        number = int(payload[1:])
        stored_at = self.client.acked.get(number)
        if stored_at is not None and stored_at != sseq:
            raise Violation(f"message {number} delivered from seq {sseq}, but its PubAck named seq {stored_at}")
        if sseq in self.client.confirmed:
            raise Violation(f"seq {sseq} delivered again (dc {dc}) by {replica.name} after its AckSync was answered")
        if self.max_deliver > 0 and dc > self.max_deliver:
            raise Violation(f"seq {sseq} delivered {dc} times, max_deliver is {self.max_deliver}")
        assert replica.consumer is not None
        term = replica.consumer.group.core.term
        last = self.deliveries.get(sseq)
        if last is not None:
            self.result.redeliveries += 1
            if last.name == replica.name and last.term == term and self.tick - last.tick < self.ack_wait_ticks:
                raise Violation(f"seq {sseq} redelivered by {replica.name} {self.tick - last.tick} ticks after "
                                f"its last delivery, ack_wait is {self.ack_wait_ticks} ticks")
        self.deliveries[sseq] = _Delivery(self.tick, replica.name, term)
        self.most_deliveries[sseq] = max(self.most_deliveries.get(sseq, 0), dc)
        roll = self.rng.random()
        if self.acking_all:
            self.client.acks_due.append((self.tick, ack, True))
        elif roll < 0.7:
            delay = self.rng.randrange(0, self.ack_wait_ticks * 3 // 2 + 1)
            self.client.acks_due.append((self.tick + delay, ack, roll < 0.35))

    def _check_acks_on_quorum(self, sseqs: list[int]) -> None:
        """Each answered AckSync's ack must survive a power cut of all servers now, on a quorum."""
        holders = {sseq: 0 for sseq in sseqs}
        for peer, disk in self.replicas.disks.items():
            image = disk.copy()
            image.crash(self.check_rng, torn=False)
            log = DurableStorage(image, f"{CONSUMER_GROUP_ID}.raftlog")
            state = consumer_state.ConsumerState("explicit")
            state.restore(log.snapshot().data)
            acked: set[int] = set()
            first, last = log.snapshot().meta.index + 1, log.last_index()
            if last >= first:
                for entry in log.entries(first, last + 1, 1 << 62):
                    if entry.type == EntryType.NORMAL and entry.data:
                        acked.update(state.apply(entry.data))
            for sseq in sseqs:
                if sseq in acked or state.has_acked(sseq):
                    holders[sseq] += 1
        quorum = len(self.replicas.peers) // 2 + 1
        for sseq, count in holders.items():
            if count < quorum:
                raise Violation(f"AckSync of seq {sseq} answered while its ack is durable on {count} "
                                f"of {len(self.replicas.peers)} consumer logs")

    # --- the end -----------------------------------------------------------------------------------

    def _final_checks(self) -> None:
        everyone = sorted(self.replicas.replicas.values(), key=lambda r: r.name)
        contents = {r.name: _contents(r) for r in everyone}
        for replica in everyone:
            stored = contents[replica.name]
            by_seq = {seq: payload for seq, _, _, payload, _ in stored}
            payloads = [payload for _, _, _, payload, _ in stored]
            if len(payloads) != len(set(payloads)):
                twice = sorted({p for p in payloads if payloads.count(p) > 1})[:3]
                raise Violation(f"{replica.name} stores a message twice: {twice}")
            for number, seq in sorted(self.client.acked.items()):
                if by_seq.get(seq) != b"m%d" % number:
                    raise Violation(f"acknowledged message {number} (seq {seq}) is not stored on {replica.name}: "
                                    f"{by_seq.get(seq)!r} is there")
        first = everyone[0]
        assert first.consumer is not None
        state = first.consumer.state
        given_up = set(state.given_up())  # and those the floor passed over: delivered max_deliver times
        given_up.update(seq for seq, dc in self.most_deliveries.items() if 0 < self.max_deliver <= dc)
        for seq, _, _, _, _ in contents[first.name]:  # at least once: the client acked each, or it was given up on
            if seq not in self.client.acked_seqs and seq not in given_up:
                raise Violation(f"seq {seq} was never acked by the client nor given up on, yet nothing is pending")
        for replica in everyone[1:]:
            if contents[replica.name] != contents[first.name]:
                raise Violation(f"the stores of {first.name} and {replica.name} differ")
            assert replica.consumer is not None and first.consumer is not None
            if replica.consumer.state.snapshot() != first.consumer.state.snapshot():
                raise Violation(f"the consumer states of {first.name} and {replica.name} differ")


def _contents(replica: Replica) -> list[tuple[int, str, bytes, bytes, int]]:
    store = replica.stream.store
    state = store.state()
    out = []
    for seq in range(state.first_seq, state.last_seq + 1):
        msg = store.load(seq)
        if msg is not None:
            out.append((msg.seq, msg.subject, msg.headers, msg.payload, msg.timestamp_ns))
    return out


def run_stream_seed(options: StreamSimOptions) -> StreamSimResult:
    return StreamScenario(options).run()
