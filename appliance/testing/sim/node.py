"""SimNode: one simulated server hosting one RaftGroup per group, over its own SimDisk.

Persisted entries are reported to the log-matching checker by CheckedStorage; crashing a node
drops every in-memory structure and loses unsynced disk writes; starting it again rebuilds each
group from its durable log, exactly as a restarted process would.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from appliance.clock import ManualClock
from appliance.cluster.group import RaftGroup
from appliance.cluster.raft_storage import DurableStorage
from appliance.raft.codec import decode_message, encode_message
from appliance.raft.types import ConfState, Entry, HardState, Message, RaftConfig
from appliance.testing.sim.checkers import Checkers
from appliance.testing.sim.disk import SimDisk
from appliance.testing.sim.network import SimNetwork
from appliance.testing.sim.statemachine import SimStateMachine


class CheckedStorage(DurableStorage):
    """DurableStorage that shows every entry it persists to the log-matching checker first."""

    def __init__(self, disk: SimDisk, name: str, *, bootstrap: ConfState | None,
                 on_persist: Callable[[Entry, int], None]) -> None:
        super().__init__(disk, name, bootstrap=bootstrap)
        self.on_persist = on_persist

    def save(self, hard_state: HardState | None, entries: Sequence[Entry], *, sync: bool) -> None:
        offset = self.memory.snapshot().meta.index
        fresh = [entry for entry in entries if entry.index > offset]
        if fresh:
            prev_term = self.memory.term(fresh[0].index - 1)
            for entry in fresh:
                self.on_persist(entry, prev_term)
                prev_term = entry.term
        super().save(hard_state, entries, sync=sync)


class SimTransport:
    def __init__(self, network: SimNetwork, group_id: str, now: Callable[[], int]) -> None:
        self.network = network
        self.group_id = group_id
        self.now = now

    def send(self, messages: Sequence[Message]) -> None:
        for message in messages:
            wire = decode_message(encode_message(message))  # every message takes the real wire format
            self.network.send(self.now(), self.group_id, wire)


class SimNode:
    def __init__(self, name: str, disk: SimDisk) -> None:
        self.name = name
        self.disk = disk
        self.alive = False
        self.groups: dict[str, RaftGroup] = {}
        self.machines: dict[str, SimStateMachine] = {}
        self.starts = 0
        self.durable_views: dict[str, DurableStorage] = {}  # while stopped: what each log will recover to

    def start(self, *, group_ids: list[str], conf: ConfState | None, config: RaftConfig, clock: ManualClock,
              network: SimNetwork, now: Callable[[], int], checkers: Checkers, rng_seed: int,
              tick_s: float, snapshot_entries: int) -> None:
        assert not self.alive
        rng = random.Random(rng_seed)
        self.groups = {}
        self.machines = {}
        for group_id in group_ids:
            def on_state(index: int, digest: bytes, entry: Entry | None, group_id: str = group_id) -> None:
                checkers.on_state(self.name, group_id, index, digest, entry)

            def on_persist(entry: Entry, prev_term: int, group_id: str = group_id) -> None:
                checkers.on_persist(self.name, group_id, entry, prev_term)

            machine = SimStateMachine(on_state)
            storage = CheckedStorage(self.disk, f"{group_id}.raftlog", bootstrap=conf, on_persist=on_persist)
            self.machines[group_id] = machine
            self.groups[group_id] = RaftGroup(
                group_id=group_id, config=config, storage=storage,
                transport=SimTransport(network, group_id, now), state_machine=machine, clock=clock,
                rng=random.Random(rng.getrandbits(64)), tick_s=tick_s, snapshot_entries=snapshot_entries,
                proposals_pending_max=64,
            )
        self.alive = True
        self.starts += 1
        self.durable_views = {}

    def crash(self, rng: random.Random, *, torn: bool) -> None:
        assert self.alive
        self.alive = False
        self.groups = {}
        self.machines = {}
        self.disk.crash(rng, torn=torn)
        image = self.disk.copy()  # recovering a view must not repair the real disk before the restart does
        self.durable_views = {name.removesuffix(".raftlog"): DurableStorage(image, name) for name in image.files}

    def holds(self, group_id: str, *, index: int, term: int) -> bool:
        """Does this node's log (durable view while stopped) contain entry (index, term)?"""
        storage = self.groups[group_id].storage if self.alive else self.durable_views.get(group_id)
        if storage is None:
            return False
        if index <= storage.first_index() - 1:
            return True  # covered by the snapshot, which only ever holds committed state
        return index <= storage.last_index() and storage.term(index) == term
