"""The RAFT groups JetStream runs on: the meta group and one group per stream and per consumer.

On one server every group has one voter (this server's peer id), so it elects itself at once and
commits an entry as soon as it is persisted. The group is the same RaftGroup a cluster will use
(appliance/cluster/group.py); `replicas: 3` later adds voters and a transport, not a rewrite.

Storage per group kind:
  - meta and consumers: DurableStorage (the durable RAFT log under <store>/_raft/<group>): the log
    is their persistence, replayed on restart and compacted into snapshots.
  - streams: MemoryStorage. A stream's state machine is its StreamStore, which is durable itself
    (group commit); nats-server keeps no RAFT log for R1 streams either, and writing every message
    twice would halve throughput.
"""

from __future__ import annotations

import hashlib
import os
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from appliance import limits
from appliance.clock import Clock
from appliance.cluster.group import AppliedSync, RaftGroup, Scheduler, StateMachine, Transport
from appliance.cluster.raft_storage import DurableStorage
from appliance.raft.storage import LogStorage, MemoryStorage
from appliance.raft.types import ConfState, Message, RaftConfig
from appliance.store.api import StoredMsg
from appliance.store.raftlog import OsLogFiles

ELECTION_READIES_MAX = 8  # a single voter leads after pre-vote, vote, and the first append


class NoTransport:
    """A single-voter group sends nothing; anything it would send is a bug."""

    def send(self, messages: Sequence[Message]) -> None:
        assert not messages, "a single-voter group has no peers to send to"


class CatchUpSource(Protocol):
    """Where a replica behind the leader's snapshot gets the leader's stored messages: over the
    routes, `RaftHost.catch_up.source(group_id)` (cluster/catch_up.py); in the simulator, the
    leader's store read in-process."""

    def fetch(
        self, leader: str, from_seq: int, to_seq: int, done: Callable[[list[StoredMsg] | None], None]
    ) -> None:
        """Ask `leader` for its stored messages in [from_seq, to_seq], ascending, at most
        JS_CATCHUP_BATCH_MSGS of them; done(batch) later, on the loop (empty: none left in the
        range), or done(None) when the leader could not answer (the replica asks again)."""
        ...


@dataclass(frozen=True, slots=True)
class Replication:
    """What a replicated (R>1) stream or consumer group runs on: a durable RAFT log bootstrapped
    with its voters, and the transport of its worker's GroupRegistry (cluster/registry.py).
    The group elects its leader over the network; nothing assumes this server leads."""

    storage: LogStorage
    transport: Transport
    tick_s: float = limits.RAFT_TICK_S
    snapshot_entries: int | None = None  # None: the kind's default
    catch_up: CatchUpSource | None = None  # streams: the leader's stored messages after a snapshot
    lost: bool = False  # the log should have been here and was not: the group abstains (service.watch_lost)


def replicated_group(
    *,
    name: str,
    peer: str,
    replication: Replication,
    machine: StateMachine,
    clock: Clock,
    rng: random.Random,
    scheduler: Scheduler,
    snapshot_entries: int,
) -> RaftGroup:
    """A multi-voter group: it campaigns when its election timer fires (ticks from the registry)."""
    return RaftGroup(
        group_id=name,
        config=RaftConfig(id=peer),
        storage=replication.storage,
        transport=replication.transport,
        state_machine=machine,
        clock=clock,
        rng=rng,
        tick_s=replication.tick_s,
        snapshot_entries=replication.snapshot_entries or snapshot_entries,
        scheduler=scheduler,
    )


def group_name(kind: str, *parts: str) -> str:
    """A stable, file-name-safe group id (nats-server style: kind + short hash of the names)."""
    digest = hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:10]
    return f"{kind}-{digest}"


def durable_storage(root: str, name: str, peer: str) -> DurableStorage:
    files = OsLogFiles(os.path.join(root, name))
    return DurableStorage(files, "log", bootstrap=ConfState((peer,)))


def memory_storage(peer: str) -> MemoryStorage:
    return MemoryStorage(ConfState((peer,)))


def start_group(
    *,
    name: str,
    peer: str,
    storage: LogStorage,
    machine: StateMachine,
    clock: Clock,
    rng: random.Random,
    events: Callable[[str], None] | None = None,
    snapshot_entries: int = limits.RAFT_SNAPSHOT_ENTRIES,
    scheduler: Scheduler | None = None,
    applied_sync: AppliedSync | None = None,
) -> RaftGroup:
    """Create the group, replay what its storage holds, and make this peer its leader; then
    hand its Ready loop to `scheduler` (the event loop), which runs it after every proposal."""
    group = RaftGroup(
        group_id=name,
        config=RaftConfig(id=peer),
        storage=storage,
        transport=NoTransport(),
        state_machine=machine,
        clock=clock,
        rng=rng,
        events=events,
        snapshot_entries=snapshot_entries,
        applied_sync=applied_sync,
    )
    group.core.campaign()
    for _ in range(ELECTION_READIES_MAX):
        if not group.process_ready() and group.is_leader():
            break
    assert group.is_leader(), f"single-voter group {name} did not elect itself"
    while group.process_ready():
        pass
    group.scheduler = scheduler
    return group
