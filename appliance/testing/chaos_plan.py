"""The pure half of the chaos suite: which faults a seed throws at a cluster, and the verdict on
what the cluster kept afterwards. No processes, sockets or clocks here (appliance/testing/chaos.py
runs the plan on real `appliance run` processes).

A run is a list of faults, each aimed by role (the stream's leader at that moment, or one of the
other servers) because the leader is only known when the fault fires. Besides crashes, pauses,
partitions and a power loss of every server (unsynced writes dropped), a plan holds what
operators do to a running cluster: a leader step-down of the stream, its consumer or the meta
group, and a peer-remove of one of the stream's servers (restarted after its hold, so the stream
regains its replicas). The same seed always gives the same plan.

The verdict compares what clients were told with what every replica holds at rest:
- lost: a message id that got a PubAck but is missing from a replica's copy;
- duplicated: an id stored twice in a copy (Nats-Msg-Id makes a retried publish a duplicate, so a
  second copy means the dedupe failed across a failover);
- diverged: a replica whose copy is not identical (sequence, subject, headers, payload, time) to
  the others', counted once per replica that differs from the majority copy.
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from appliance.store.api import StoredMsg

# fault kinds, in the order the soak reports them
KILL_LEADER = "kill-leader"  # SIGKILL the stream leader's server (its supervisor and workers)
KILL_OTHER = "kill-other"  # SIGKILL a server that is not the stream leader
PAUSE_LEADER = "pause-leader"  # SIGSTOP the leader's server, later SIGCONT (a GC pause, a frozen VM)
PAUSE_OTHER = "pause-other"
RESTART = "restart"  # SIGTERM a server (graceful stop) and start it again on its store
KILL_ALL = "kill-all"  # SIGKILL every server at once, then start them all again (the OS keeps its page cache)
PARTITION_LEADER = "partition-leader"  # cut the leader's routes to every other server (clients reach it)
PARTITION_OTHER = "partition-other"
# what operators do to a running cluster, mid-load (issue 15 items 1 and 2)
STEPDOWN_STREAM = "stepdown-stream"  # $JS.API.STREAM.LEADER.STEPDOWN.<s>
STEPDOWN_CONSUMER = "stepdown-consumer"  # $JS.API.CONSUMER.LEADER.STEPDOWN.<s>.<c>
STEPDOWN_META = "stepdown-meta"  # $JS.API.META.LEADER.STEPDOWN, from the system account
PEER_REMOVE = "peer-remove"  # $JS.API.STREAM.PEER.REMOVE.<s> of one of the stream's peers, which
# restarts after the hold (a removed server is not placed on the stream again until it restarts)
POWER_LOSS = "power-loss"  # SIGKILL every server, then every write not fsynced is dropped (the
# servers write through appliance/store/powerloss.py's journal); an odd victim also tears the last
# unsynced write of each file in half; then start them all again
FAULT_KINDS = (KILL_LEADER, KILL_OTHER, PAUSE_LEADER, PAUSE_OTHER, RESTART, KILL_ALL, PARTITION_LEADER,
               PARTITION_OTHER, STEPDOWN_STREAM, STEPDOWN_CONSUMER, STEPDOWN_META, PEER_REMOVE, POWER_LOSS)
PARTITIONS = (PARTITION_LEADER, PARTITION_OTHER)
STEPDOWNS = (STEPDOWN_STREAM, STEPDOWN_CONSUMER, STEPDOWN_META)
PEER_REMOVE_MIN_S = 0.5  # how long the stream goes on without the removed server before it restarts
PEER_REMOVE_MAX_S = 3.0
PAUSE_MIN_S = 0.5
PAUSE_MAX_S = 4.0  # longer than an election timeout: the paused leader is deposed meanwhile
PARTITION_MIN_S = 2.0
PARTITION_MAX_S = 8.0  # several election timeouts: the rest elect a leader while the cut one cannot hear it
GAP_MIN_S = 0.3  # load between two faults
GAP_MAX_S = 2.0


@dataclass(frozen=True, slots=True)
class Fault:
    kind: str
    victim: int  # among the candidates of its role (leader: always 0; other: index into the others;
    # peer-remove: index into the stream's peers, its leader first; a step-down: 0, the group's leader)
    hold_s: float  # a pause: how long the server stays stopped; a kill: how long it stays down;
    # a peer-remove: how long the removed server stays out before it restarts; a step-down: 0
    gap_s: float  # load before this fault

    def describe(self) -> str:
        return f"{self.kind}(victim {self.victim}, hold {self.hold_s:.2f}s, after {self.gap_s:.2f}s)"


def plan(seed: int, faults: int, kinds: Sequence[str] = FAULT_KINDS) -> list[Fault]:
    """`faults` faults for run `seed`, drawn from `kinds` (replayable: same seed, same plan). A
    plan of at least len(kinds) faults has every kind at least once, in a seeded order."""
    unknown = set(kinds) - set(FAULT_KINDS)
    if unknown or not kinds:
        raise ValueError(f"fault kinds must be among {', '.join(FAULT_KINDS)}; "
                         f"got {', '.join(kinds) or 'none'}")
    rng = random.Random(seed)
    order = list(dict.fromkeys(kinds)) if faults >= len(set(kinds)) else []
    order += [rng.choice(list(kinds)) for _ in range(faults - len(order))]
    rng.shuffle(order)
    chosen = []
    for kind in order:
        if kind in STEPDOWNS:  # the current leader of the stream, the consumer or the meta group
            chosen.append(Fault(kind, 0, 0.0, round(rng.uniform(GAP_MIN_S, GAP_MAX_S), 3)))
            continue
        victim = 0 if kind in (KILL_LEADER, PAUSE_LEADER, PARTITION_LEADER) else rng.randrange(1 << 16)
        if kind in PARTITIONS:
            hold = rng.uniform(PARTITION_MIN_S, PARTITION_MAX_S)
        elif kind in (PAUSE_LEADER, PAUSE_OTHER):
            hold = rng.uniform(PAUSE_MIN_S, PAUSE_MAX_S)
        elif kind == PEER_REMOVE:  # victim: an index into the stream's peers, its leader first
            hold = rng.uniform(PEER_REMOVE_MIN_S, PEER_REMOVE_MAX_S)
        else:
            hold = rng.uniform(0.0, 1.5)
        chosen.append(Fault(kind, victim, round(hold, 3), round(rng.uniform(GAP_MIN_S, GAP_MAX_S), 3)))
    return chosen


def parse_kinds(text: str) -> tuple[str, ...]:
    """`all` or a comma list of FAULT_KINDS."""
    if text.strip() == "all":
        return FAULT_KINDS
    kinds = tuple(part.strip() for part in text.split(",") if part.strip())
    plan(0, 0, kinds)  # validates
    return kinds


@dataclass(frozen=True, slots=True)
class Record:
    """One stored message as the comparison sees it."""

    seq: int
    subject: str
    msg_id: str | None
    digest: str  # of headers, payload and timestamp: equal digests = identical records

    @classmethod
    def of(cls, msg: StoredMsg, msg_id: str | None) -> Record:
        digest = hashlib.blake2b(digest_size=16)
        for part in (msg.headers, msg.payload, str(msg.timestamp_ns).encode()):
            digest.update(len(part).to_bytes(8, "little"))
            digest.update(part)
        return cls(msg.seq, msg.subject, msg_id, digest.hexdigest())


@dataclass(slots=True)
class Verdict:
    acknowledged: int = 0
    lost: int = 0
    duplicated: int = 0
    diverged: int = 0
    ack_floor_ahead: int = 0  # consumers whose ack floor covers a sequence never delivered
    acks_lost: int = 0  # consumers whose ack floor is behind acks the server confirmed (AckSync)
    examples: list[str] = field(default_factory=list)  # the first few findings, for the report

    @property
    def clean(self) -> bool:
        return not (self.lost or self.duplicated or self.diverged or self.ack_floor_ahead or self.acks_lost)

    def add(self, other: Verdict) -> None:
        self.acknowledged += other.acknowledged
        self.lost += other.lost
        self.duplicated += other.duplicated
        self.diverged += other.diverged
        self.ack_floor_ahead += other.ack_floor_ahead
        self.acks_lost += other.acks_lost
        self.examples += other.examples[: max(0, EXAMPLES_MAX - len(self.examples))]


EXAMPLES_MAX = 10


def judge(acked: Iterable[str], copies: Mapping[str, Sequence[Record]]) -> Verdict:
    """The verdict on replicas' copies (server name -> records in sequence order) against the
    acknowledged ids. Lost and duplicated count ids over every copy (an id lost on two replicas
    counts once); diverged counts replicas that differ from the copy most replicas hold."""
    acked = set(acked)
    verdict = Verdict(acknowledged=len(acked))
    lost: set[str] = set()
    duplicated: set[str] = set()
    for name, records in sorted(copies.items()):
        counts = Counter(r.msg_id for r in records if r.msg_id is not None)
        missing = acked - counts.keys()
        twice = {msg_id for msg_id, n in counts.items() if n > 1}
        verdict.examples += [f"{name}: lost {x}" for x in sorted(missing - lost)[:3]]
        verdict.examples += [f"{name}: duplicated {x}" for x in sorted(twice - duplicated)[:3]]
        lost |= missing
        duplicated |= twice
    verdict.lost, verdict.duplicated = len(lost), len(duplicated)
    shapes = {name: tuple(records) for name, records in copies.items()}
    majority, _ = Counter(shapes.values()).most_common(1)[0] if shapes else ((), 0)
    for name, shape in sorted(shapes.items()):
        if shape != majority:
            verdict.diverged += 1
            verdict.examples.append(f"{name}: diverged ({first_difference(shape, majority)})")
    del verdict.examples[EXAMPLES_MAX:]
    return verdict


def first_difference(mine: Sequence[Record], theirs: Sequence[Record]) -> str:
    for a, b in zip(mine, theirs):
        if a != b:
            return f"at seq {a.seq}: {a.subject} {a.msg_id} vs seq {b.seq}: {b.subject} {b.msg_id}"
    return f"{len(mine)} records vs {len(theirs)}"


def ack_floor_ahead(ack_floor: int, delivered: Iterable[int], stored: Iterable[int]) -> list[int]:
    """Stream sequences at or below a consumer's ack floor that are stored but were never
    delivered to its (only) client: an ack floor ahead of what was delivered."""
    seen = set(delivered)
    return sorted(seq for seq in stored if seq <= ack_floor and seq not in seen)


def confirmed_floor(confirmed: Iterable[int], stored: Iterable[int]) -> int:
    """The highest stream sequence s such that every stored message up to s had its ack
    confirmed (AckSync answered): a consumer's ack floor may not be below it."""
    acked = set(confirmed)
    floor = 0
    for seq in sorted(stored):
        if seq not in acked:
            break
        floor = seq
    return floor


def failover_times(kills: Iterable[float], acks: Sequence[tuple[float, float]]) -> list[float]:
    """Per kill (a moment), seconds until the first PubAck of a publish begun at or after it
    (acks: (first attempt, PubAck) moments); a kill no such publish followed is left out."""
    times = []
    for kill in kills:
        after = [acked for began, acked in acks if began >= kill]
        if after:
            times.append(min(after) - kill)
    return times


def summary_line(runs: int, verdict: Verdict) -> str:
    """The soak's one line."""
    return (f"runs={runs} acknowledged={verdict.acknowledged} lost={verdict.lost} "
            f"duplicated={verdict.duplicated} diverged={verdict.diverged} "
            f"ack_floor_ahead={verdict.ack_floor_ahead} acks_lost={verdict.acks_lost}")
