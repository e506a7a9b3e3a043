"""Simulator: several RAFT groups on several nodes, in one process, driven by one seed.

Theory of operation
- Everything random comes from `random.Random(seed)` (split into child generators), time is a
  ManualClock advanced one tick per step, so a seed replays exactly: `appliance sim --seed N`.
- Safety phase (`ticks` steps): network faults (drop, duplicate, reorder), partitions and heals,
  node crashes (unsynced writes lost, last write torn) and restarts from disk, leader transfers,
  and a client workload proposing to whoever it believes leads. Checkers run after every step.
- With profile.closes_connections (half the seeds), a crash or a partition closes the connections
  it cuts, as a kill -9 or a dropped route does on real hosts: the nodes on the other side hear
  peer_gone(node) (the fast failover path), and a partition that heals is exactly the route flap
  the fast path must survive. Otherwise they go silent (a paused process, a black-holed link).
- Liveness phase: every fault healed, every node restarted; each group must elect a leader,
  commit a fresh probe entry and bring every node to the same applied state within
  `liveness_ticks`, or the run fails.
"""

from __future__ import annotations

import dataclasses
import random
import traceback
from dataclasses import dataclass, field

from appliance.clock import ManualClock
from appliance.errors import ApplianceError
from appliance.raft.types import BUG_NAMES, Bugs, ConfState, RaftConfig, Role
from appliance.testing.sim.checkers import Checkers, Violation
from appliance.testing.sim.disk import SimDisk
from appliance.testing.sim.faults import Nemesis
from appliance.testing.sim.network import NetworkFaults, SimNetwork
from appliance.testing.sim.node import SimNode
from appliance.testing.sim.profile import FAULT_NAMES, FaultProfile, draw_profile

TICK_S = 0.1
READY_ROUNDS_PER_STEP = 4


@dataclass(frozen=True, slots=True)
class SimOptions:
    seed: int
    ticks: int = 1500
    liveness_ticks: int = 600
    nodes: int = 3
    groups: int = 2
    faults: frozenset[str] = frozenset(FAULT_NAMES)
    bugs: Bugs = field(default_factory=Bugs)
    snapshot_entries: int = 40
    election_ticks: int = 10
    heartbeat_ticks: int = 2

    def __post_init__(self) -> None:
        assert self.nodes >= 1 and self.groups >= 1 and self.ticks >= 0
        assert self.faults <= set(FAULT_NAMES), f"unknown faults {sorted(self.faults - set(FAULT_NAMES))}"

    def command(self) -> str:
        parts = [f"appliance sim --seed {self.seed} --ticks {self.ticks} --nodes {self.nodes} --groups {self.groups}"]
        if self.faults != frozenset(FAULT_NAMES):
            parts.append(f"--faults {','.join(sorted(self.faults)) or 'none'}")
        parts += [f"--bug {name}" for name in self.bugs.names_on()]
        return " ".join(parts)


@dataclass(slots=True)
class SimResult:
    seed: int
    ok: bool
    failure: str = ""
    failed_tick: int = -1
    ticks: int = 0
    liveness_ticks: int = 0
    commits: int = 0
    acked: int = 0
    proposals: int = 0
    accepted: int = 0  # proposals a leader took (the others were refused: not leader, backpressure)
    leaders: int = 0
    crashes: int = 0
    partitions: int = 0
    messages: int = 0
    dropped: int = 0
    checks: int = 0
    command: str = ""
    profile: str = ""

    def summary(self) -> str:
        verdict = "ok" if self.ok else f"FAILED at tick {self.failed_tick}: {self.failure}"
        return (f"seed {self.seed}: {verdict}\n"
                f"  ticks {self.ticks} (+{self.liveness_ticks} liveness), commits {self.commits}, "
                f"acked {self.acked}/{self.accepted}/{self.proposals} (acked/accepted/proposed), leaders {self.leaders}, crashes {self.crashes}, "
                f"partitions {self.partitions}, messages {self.messages} ({self.dropped} dropped), "
                f"checks {self.checks}\n  faults: {self.profile}\n  replay: {self.command}")


class Simulator:
    def __init__(self, options: SimOptions) -> None:
        self.options = options
        master = random.Random(options.seed)
        self.fault_rng = random.Random(master.getrandbits(64))
        self.workload_rng = random.Random(master.getrandbits(64))
        self.core_rng = random.Random(master.getrandbits(64))
        self.profile: FaultProfile = draw_profile(random.Random(master.getrandbits(64)), options.faults)
        p = self.profile
        network_faults = NetworkFaults(drop=p.drop, duplicate=p.duplicate, delay_ticks_max=p.delay_ticks_max)
        self.network = SimNetwork(random.Random(master.getrandbits(64)), network_faults, queue_max=100_000)
        self.clock = ManualClock()
        self.now = 0
        self.group_ids = [f"g{i}" for i in range(options.groups)]
        self.node_ids = [f"n{i + 1}" for i in range(options.nodes)]
        self.checkers = Checkers(self.group_ids)
        self.result = SimResult(options.seed, ok=True, command=options.command(), profile=self.profile.describe())
        self.nodes = {name: SimNode(name, SimDisk()) for name in self.node_ids}
        self.node_list = list(self.nodes.values())
        self.commit_seen: dict[tuple[str, str], int] = {}
        self.sequence = 0
        for node in self.nodes.values():
            self._start(node, bootstrap=True)
        self.nemesis = Nemesis(self, self.profile, self.fault_rng)

    # --- lifecycle -----------------------------------------------------------------------------------
    def _config(self, name: str) -> RaftConfig:
        o = self.options
        return RaftConfig(id=name, election_ticks=o.election_ticks, heartbeat_ticks=o.heartbeat_ticks,
                          inflight_msgs_max=8, append_bytes_max=self.profile.append_bytes_max, uncommitted_entries_max=512,
                          pre_vote=self.profile.pre_vote,
                          check_quorum=self.profile.check_quorum, bugs=o.bugs)

    def _start(self, node: SimNode, *, bootstrap: bool) -> None:
        conf = ConfState(tuple(self.node_ids)) if bootstrap else None
        node.start(
            group_ids=self.group_ids, conf=conf, config=self._config(node.name), clock=self.clock,
            network=self.network, now=lambda: self.now, checkers=self.checkers,
            rng_seed=self.core_rng.getrandbits(64), tick_s=TICK_S, snapshot_entries=self.options.snapshot_entries,
        )

    def run(self) -> SimResult:
        try:
            for _ in range(self.options.ticks):
                self._step(safety=True)
            self.result.ticks = self.now
            self._heal_all()
            self._run_liveness()
        except (AssertionError, ApplianceError) as error:
            self._fail(error)
        self._finish()
        return self.result

    def _fail(self, error: BaseException) -> None:
        self.result.ok = False
        self.result.failed_tick = self.now
        if isinstance(error, Violation):
            self.result.failure = str(error)
        else:
            where = traceback.extract_tb(error.__traceback__)[-1]
            self.result.failure = (f"{type(error).__name__} in {where.filename.rsplit('/', 1)[-1]}:"
                                   f"{where.lineno}: {error}")

    def _finish(self) -> None:
        r = self.result
        r.commits = sum(len(h.applied) for h in self.checkers.history.values())
        r.acked = self.checkers.acked_count()
        r.leaders = sum(len(h.leaders) for h in self.checkers.history.values())
        r.messages = self.network.sent
        r.dropped = self.network.dropped
        r.checks = self.checkers.checks
        r.partitions = self.nemesis.partitions

    # --- scripting (scenario tests drive the same harness by hand) -----------------------------------
    def run_ticks(self, ticks: int, *, workload: bool = False) -> None:
        """Step `ticks` times with the profile's faults off; checkers still run after every step."""
        for _ in range(ticks):
            self._step(safety=False)
            if workload:
                self._propose_workload()

    def leader(self, group_id: str) -> SimNode | None:
        leaders = [node for node in self.live() if node.groups[group_id].is_leader()]
        return leaders[0] if len(leaders) == 1 else None

    def propose(self, node_name: str, group_id: str) -> bool:
        return self._propose(self.nodes[node_name], group_id)

    def crash(self, node_name: str) -> None:
        self.crash_node(self.nodes[node_name])

    def restart(self, node_name: str) -> None:
        self._start(self.nodes[node_name], bootstrap=False)

    def isolate(self, node_name: str) -> None:
        self.cut({node_name})

    def cut(self, side: set[str]) -> None:
        """Partition `side` from the rest; each side's nodes see the connections to the other close."""
        self.network.partition(side, self.node_ids)
        for node in self.live():
            for other in self.node_ids:
                if (node.name in side) != (other in side):
                    self._peer_gone(node, other)

    def heal(self) -> None:
        self.network.heal()

    def settle(self, ticks_max: int = 600) -> None:
        """Heal everything and run the liveness phase (raises Violation if it does not converge)."""
        saved, self.options = self.options, dataclasses.replace(self.options, liveness_ticks=ticks_max)
        try:
            self._heal_all()
            self._run_liveness()
        finally:
            self.options = saved

    # --- one step ------------------------------------------------------------------------------------
    def _step(self, *, safety: bool) -> None:
        self.now += 1
        self.clock.advance(TICK_S)
        if safety:
            self.nemesis.inject()
            for group_id in self.group_ids:
                self._check_quorum_holds(group_id)  # what the crashes left on disk, before anyone acts on it
        for group_id, message in self.network.due(self.now):
            node = self.nodes[message.to]
            if node.alive:
                node.groups[group_id].step(message)
        for node in self.live():
            for group in node.groups.values():
                group.tick()
        if safety:
            self._propose_workload()
        for node in self.live():
            for group in node.groups.values():
                for _ in range(READY_ROUNDS_PER_STEP):
                    if not group.process_ready():
                        break
        self._check()

    def _check_quorum_holds(self, group_id: str) -> None:
        best: tuple[int, int] | None = None
        for node in self.live():
            log = node.groups[group_id].core.log
            term = log.term(log.committed)
            if term is not None and (best is None or log.committed > best[0]):
                best = (log.committed, term)
        if best is None or best[0] == 0:
            return
        index, term = best
        self.checkers.on_committed(group_id, index=index, term=term)
        holders = [node.name for node in self.nodes.values() if node.holds(group_id, index=index, term=term)]
        self.checkers.on_quorum_holds(group_id, index=index, term=term, holders=holders, voters=len(self.node_ids))

    def live(self) -> list[SimNode]:
        return [node for node in self.node_list if node.alive]

    def _check(self) -> None:
        for group_id in self.group_ids:
            self._check_quorum_holds(group_id)
        for node in self.live():
            for group_id, group in node.groups.items():
                core = group.core
                if core.role == Role.LEADER and self.checkers.on_leader(group_id, core.term, node.name):
                    self.nemesis.fresh_leaders.append(node)
                    index, term = self.checkers.history[group_id].committed
                    holds = index == 0 or node.holds(group_id, index=index, term=term)
                    self.checkers.on_new_leader(group_id, node.name, holds_committed=holds)
                self.checkers.on_applied_index(node.name, group_id, state_index=node.machines[group_id].index,
                                               raft_applied=core.log.applied)
                key = (node.name, group_id)
                if core.role == Role.LEADER and core.log.committed > self.commit_seen.get(key, 0):
                    self.nemesis.committing_leaders.append(node)
                self.commit_seen[key] = core.log.committed

    # --- faults --------------------------------------------------------------------------------------
    def crash_node(self, node: SimNode) -> None:
        node.crash(self.fault_rng, torn=self.profile.torn)
        self.network.lose_unflushed(node.name, sent_since=self.now - 1)
        self.result.crashes += 1
        for other in self.live():  # its connections closed with the process
            self._peer_gone(other, node.name)

    def _peer_gone(self, node: SimNode, peer: str) -> None:
        if not self.profile.closes_connections:
            return
        for group in node.groups.values():
            group.peer_gone(peer)

    def start_node(self, node: SimNode) -> None:
        self._start(node, bootstrap=False)

    def _heal_all(self) -> None:
        self.network.heal()
        self.network.faults = NetworkFaults()
        for node in self.nodes.values():
            if not node.alive:
                self._start(node, bootstrap=False)

    # --- workload ------------------------------------------------------------------------------------
    def _propose_workload(self) -> None:
        rng = self.workload_rng
        for group_id in self.group_ids:
            if rng.random() >= self.profile.propose_rate:
                continue
            leaders = [node for node in self.live() if node.groups[group_id].is_leader()]
            live = self.live()
            if not live:
                return
            node = rng.choice(leaders) if leaders and rng.random() < 0.9 else rng.choice(live)
            self._propose(node, group_id)

    def _propose(self, node: SimNode, group_id: str) -> bool:
        self.sequence += 1
        data = f"{group_id}:{self.sequence}".encode()
        self.result.proposals += 1

        def on_done(ok: bool, index: int) -> None:
            if ok:
                self.checkers.on_ack(group_id, index, data)

        try:
            node.groups[group_id].propose(data, on_done)
        except ApplianceError:
            return False
        self.result.accepted += 1
        return True

    # --- liveness ------------------------------------------------------------------------------------
    def _run_liveness(self) -> None:
        start = self.now
        probes: dict[str, int] = {}
        while self.now - start < self.options.liveness_ticks:
            self._step(safety=False)
            self._restore_voters()
            self._propose_probes(probes)
            if all(self._converged(group_id, probes) for group_id in self.group_ids):
                self.result.liveness_ticks = self.now - start
                return
        self.result.liveness_ticks = self.now - start
        lagging = [g for g in self.group_ids if not self._converged(g, probes)]
        raise Violation(f"liveness: groups {lagging} did not converge within "
                        f"{self.options.liveness_ticks} ticks after healing")

    def _restore_voters(self) -> None:
        """After healing, every removed voter is added back (one change at a time), as a
        learner that its group's leader promotes once caught up."""
        for group_id in self.group_ids:
            leader = self.leader(group_id)
            if leader is None:
                continue
            group = leader.groups[group_id]
            missing = [name for name in self.node_ids if name not in group.voters() + group.learners()]
            if missing:
                try:
                    group.add_learner(missing[0])
                except ApplianceError:
                    continue

    def _propose_probes(self, probes: dict[str, int]) -> None:
        for group_id in self.group_ids:
            if group_id in probes:
                continue  # pending (0) or acknowledged (its index)
            leaders = [node for node in self.live() if node.groups[group_id].is_leader()]
            if len(leaders) != 1:
                continue
            data = f"{group_id}:probe:{self.now}".encode()
            probes[group_id] = 0

            def on_done(ok: bool, index: int, group_id: str = group_id, data: bytes = data) -> None:
                if ok:
                    self.checkers.on_ack(group_id, index, data)
                    probes[group_id] = index
                else:
                    probes.pop(group_id, None)

            try:
                leaders[0].groups[group_id].propose(data, on_done)
            except ApplianceError:
                probes.pop(group_id, None)

    def _converged(self, group_id: str, probes: dict[str, int]) -> bool:
        if probes.get(group_id, 0) <= 0:
            return False
        groups = [node.groups[group_id] for node in self.nodes.values()]
        leaders = [group for group in groups if group.is_leader()]
        if len(leaders) != 1:
            return False
        if leaders[0].core.voters != tuple(self.node_ids):
            return False
        last = leaders[0].core.log.last_index()
        if any(group.core.log.applied != last for group in groups):
            return False
        digests = {node.machines[group_id].digest for node in self.nodes.values()}
        return len(digests) == 1


def parse_faults(text: str) -> frozenset[str]:
    if text in ("", "all"):
        return frozenset(FAULT_NAMES)
    if text == "none":
        return frozenset()
    names = frozenset(name.strip() for name in text.split(",") if name.strip())
    unknown = names - set(FAULT_NAMES)
    if unknown:
        raise ValueError(f"unknown faults: {', '.join(sorted(unknown))} (known: {', '.join(FAULT_NAMES)})")
    return names


def bugs_from_names(names: list[str]) -> Bugs:
    unknown = set(names) - set(BUG_NAMES)
    if unknown:
        raise ValueError(f"unknown bugs: {', '.join(sorted(unknown))} (known: {', '.join(BUG_NAMES)})")
    return Bugs(**{name: True for name in names})


def run_seed(options: SimOptions) -> SimResult:
    return Simulator(options).run()
