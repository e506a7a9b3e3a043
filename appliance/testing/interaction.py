"""InteractionEnv: a tiny DSL that drives RaftCores by hand for transcript tests (etcd's rafttest).

Commands (one per case in tests/raft/testdata/*.txt):
  add-nodes N [voters=1,2,3] [pre-vote=true] [check-quorum=true] [election=10] [heartbeat=1]
            [inflight=N] [append-bytes=N] [bug=name]
  campaign ID | propose ID DATA | propose-conf-change ID add|add_learner|remove PEER
  transfer-leadership ID [to=PEER] | tick ID [n=N] | tick-election ID | tick-heartbeat ID
  process-ready ID... | deliver-msgs [ID...] [drop=true] | stabilize [ID...]
  isolate ID | partition 1,2 3,4,5 | heal | restart ID | compact ID INDEX | status ID | log ID | raft-state
Output is the cores' transition lines plus the rendered Readies and messages.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from appliance.errors import ApplianceError
from appliance.raft import describe
from appliance.raft.core import RaftCore
from appliance.raft.storage import MemoryStorage
from appliance.raft.types import (
    Bugs,
    ConfChange,
    ConfChangeOp,
    ConfState,
    Message,
    RaftConfig,
    Snapshot,
    SnapshotMeta,
)
from appliance.testing.datadriven import Case

STABILIZE_ROUNDS_MAX = 1000


class InteractionEnv:
    def __init__(self) -> None:
        self.nodes: dict[str, RaftCore] = {}
        self.stores: dict[str, MemoryStorage] = {}
        self.configs: dict[str, RaftConfig] = {}
        self.queues: dict[str, list[Message]] = {}
        self.blocked: set[tuple[str, str]] = set()  # (sender, receiver) links that drop everything
        self.output: list[str] = []
        self.handlers: dict[str, Callable[[Case], None]] = {
            "add-nodes": self._add_nodes, "campaign": self._campaign, "propose": self._propose,
            "propose-conf-change": self._propose_conf_change, "transfer-leadership": self._transfer,
            "tick": self._tick, "tick-election": self._tick_election, "tick-heartbeat": self._tick_heartbeat,
            "process-ready": self._process_ready, "deliver-msgs": self._deliver_msgs,
            "stabilize": self._stabilize, "isolate": self._isolate, "partition": self._partition, "heal": self._heal,
            "restart": self._restart, "compact": self._compact, "status": self._status, "log": self._log,
            "raft-state": self._raft_state,
        }

    def handle(self, case: Case) -> str:
        self.output = []
        handler = self.handlers.get(case.command)
        assert handler is not None, f"line {case.line}: unknown command {case.command}"
        try:
            handler(case)
        except ApplianceError as error:
            self.output.append(f"error: {type(error).__name__}: {error}")
        return "\n".join(self.output)

    # --- setup ---------------------------------------------------------------------------------
    def _add_nodes(self, case: Case) -> None:
        count = int(case.args[0])
        first = len(self.nodes) + 1
        ids = [str(first + i) for i in range(count)]
        voters = tuple(sorted(v for v in case.options.get("voters", ",".join(ids)).split(",") if v))
        bug = case.options.get("bug")
        for node_id in ids:
            config = RaftConfig(
                id=node_id,
                election_ticks=int(case.options.get("election", "10")),
                heartbeat_ticks=int(case.options.get("heartbeat", "1")),
                inflight_msgs_max=int(case.options.get("inflight", "256")),
                append_bytes_max=int(case.options.get("append-bytes", str(1 << 20))),
                pre_vote=case.options.get("pre-vote", "false") == "true",
                check_quorum=case.options.get("check-quorum", "false") == "true",
                bugs=Bugs(**{bug: True}) if bug else Bugs(),
            )
            self.configs[node_id] = config
            self.stores[node_id] = MemoryStorage(ConfState(voters))
            self.queues[node_id] = []
            self._start(node_id)

    def _start(self, node_id: str) -> None:
        rng = random.Random(int(node_id))
        self.nodes[node_id] = RaftCore(self.configs[node_id], self.stores[node_id], rng, events=self._event)

    def _event(self, text: str) -> None:
        self.output.append(text)

    def _node(self, case: Case, position: int = 0) -> RaftCore:
        return self.nodes[case.args[position]]

    # --- inputs --------------------------------------------------------------------------------
    def _campaign(self, case: Case) -> None:
        self._node(case).campaign()

    def _propose(self, case: Case) -> None:
        index = self._node(case).propose(case.args[1].encode())
        self.output.append(f"proposed at index {index}")

    def _propose_conf_change(self, case: Case) -> None:
        change = ConfChange(ConfChangeOp[case.args[1].upper()], case.args[2])
        index = self._node(case).propose_conf_change(change)
        self.output.append(f"proposed {change.op.name} {change.peer} at index {index}")

    def _transfer(self, case: Case) -> None:
        target = self._node(case).transfer_leadership(case.options.get("to"))
        self.output.append(f"transferring to {target}")

    def _tick(self, case: Case) -> None:
        for _ in range(int(case.options.get("n", "1"))):
            self._node(case).tick()

    def _tick_election(self, case: Case) -> None:
        node = self._node(case)
        for _ in range(node.randomized_election_ticks):
            node.tick()

    def _tick_heartbeat(self, case: Case) -> None:
        node = self._node(case)
        for _ in range(node.config.heartbeat_ticks):
            node.tick()

    # --- the Ready loop ------------------------------------------------------------------------
    def process_ready(self, node_id: str) -> bool:
        node = self.nodes[node_id]
        if not node.has_ready():
            return False
        ready = node.ready()
        self.output.extend(describe.ready(node_id, ready))
        store = self.stores[node_id]
        if ready.snapshot is not None:
            store.apply_snapshot(ready.snapshot)
        store.save(ready.hard_state, ready.entries, sync=ready.must_sync)
        for message in ready.messages:
            if (message.sender, message.to) in self.blocked:
                self.output.append(f"  dropped: {describe.message(message)}")
            elif message.to in self.queues:
                self.queues[message.to].append(message)
        node.advance(ready)
        return True

    def deliver(self, node_id: str, *, drop: bool) -> bool:
        pending, self.queues[node_id] = self.queues[node_id], []
        for message in pending:
            verb = "dropped" if drop else "delivered"
            self.output.append(f"{verb}: {describe.message(message)}")
            if not drop:
                self.nodes[node_id].step(message)
        return bool(pending)

    def _process_ready(self, case: Case) -> None:
        for node_id in case.args:
            self.process_ready(node_id)

    def _deliver_msgs(self, case: Case) -> None:
        for node_id in case.args or tuple(self.nodes):
            self.deliver(node_id, drop=case.options.get("drop") == "true")

    def _stabilize(self, case: Case) -> None:
        ids = list(case.args or self.nodes)
        for _ in range(STABILIZE_ROUNDS_MAX):
            busy = False
            for node_id in ids:
                busy |= self.process_ready(node_id)
            for node_id in ids:
                busy |= self.deliver(node_id, drop=False)
            if not busy:
                return
        raise AssertionError("stabilize did not converge")

    # --- faults --------------------------------------------------------------------------------
    def _isolate(self, case: Case) -> None:
        node_id = case.args[0]
        self._cut([[node_id], [other for other in self.nodes if other != node_id]])

    def _partition(self, case: Case) -> None:
        self._cut([side.split(",") for side in case.args])

    def _cut(self, sides: list[list[str]]) -> None:
        for side in sides:
            for other_side in sides:
                if other_side is not side:
                    self.blocked.update((a, b) for a in side for b in other_side)

    def _heal(self, case: Case) -> None:
        self.blocked.clear()

    def _restart(self, case: Case) -> None:
        node_id = case.args[0]
        self.queues[node_id] = []
        self._start(node_id)

    def _compact(self, case: Case) -> None:
        node = self._node(case)
        index = int(case.args[1])
        assert index <= node.log.applied, "compact only applied entries"
        store = self.stores[case.args[0]]
        meta = SnapshotMeta(index, store.term(index), node.conf_state())
        store.compact(Snapshot(meta, f"state@{index}".encode()))
        self.output.append(f"compacted to {index}; first index {store.first_index()}")

    # --- inspection ----------------------------------------------------------------------------
    def _status(self, case: Case) -> None:
        status = self._node(case).status()
        self.output.append(f"{status.id} {status.role.name} term={status.term} lead={status.lead or '-'} "
                           f"commit={status.commit} applied={status.applied} last={status.last_index} "
                           f"voters={','.join(status.voters) or '-'}"
                           + (f" learners={','.join(status.learners)}" if status.learners else ""))
        for peer in status.peers:
            self.output.append(f"  {peer.peer}: match={peer.match} next={peer.next} {peer.state.name} "
                               f"inflight={peer.inflight} seen={peer.ticks_since_contact} ticks ago")

    def _log(self, case: Case) -> None:
        store = self.stores[case.args[0]]
        snapshot = store.snapshot()
        if not snapshot.is_empty():
            self.output.append(describe.snapshot(snapshot))
        entries = store.entries(store.first_index(), store.last_index() + 1, 1 << 62) \
            if store.last_index() >= store.first_index() else []
        self.output.append(describe.entries(entries) or "log is empty")

    def _raft_state(self, case: Case) -> None:
        for node_id, node in self.nodes.items():
            self.output.append(f"{node_id}: {node.role.name} term={node.term} lead={node.lead or '-'}")
