"""Nemesis: injects the faults of a FaultProfile into a simulated cluster, one roll per step.

It draws only from its own RNG (the simulator's fault stream), in a fixed order, so a seed
replays the same faults. "Interesting moments" get extra attention, FoundationDB-style: a leader
just elected or that just advanced its commit index is more likely to crash right then.
"""

from __future__ import annotations

import random
from typing import Protocol

from appliance.errors import ApplianceError
from appliance.testing.sim.network import SimNetwork
from appliance.testing.sim.node import SimNode
from appliance.testing.sim.profile import FaultProfile


class Cluster(Protocol):
    node_ids: list[str]
    nodes: dict[str, SimNode]
    network: SimNetwork
    now: int

    def live(self) -> list[SimNode]: ...

    def crash_node(self, node: SimNode) -> None: ...

    def cut(self, side: set[str]) -> None: ...

    def start_node(self, node: SimNode) -> None: ...


class Nemesis:
    def __init__(self, cluster: Cluster, profile: FaultProfile, rng: random.Random) -> None:
        self.cluster = cluster
        self.profile = profile
        self.rng = rng
        self.partitions = 0
        self.fresh_leaders: list[SimNode] = []  # elected in the last step
        self.committing_leaders: list[SimNode] = []  # advanced their commit index in the last step

    def inject(self) -> None:
        """Roll every fault of the profile once (called at the start of each safety step)."""
        p, rng, cluster = self.profile, self.rng, self.cluster
        if not cluster.network.blocked and p.partition_rate and rng.random() < p.partition_rate:
            size = rng.randrange(1, len(cluster.node_ids)) if len(cluster.node_ids) > 1 else 1
            cluster.cut(set(rng.sample(cluster.node_ids, size)))
            self.partitions += 1
        elif cluster.network.blocked and rng.random() < p.heal_rate:
            cluster.network.heal()
        if p.crash_rate and cluster.live() and rng.random() < p.crash_rate:
            cluster.crash_node(rng.choice(cluster.live()))
        if p.reboot_rate and cluster.live() and rng.random() < p.reboot_rate:
            victim = rng.choice(cluster.live())
            cluster.crash_node(victim)
            cluster.start_node(victim)
        fresh, self.fresh_leaders = self.fresh_leaders, []
        for node in fresh:
            if node.alive and p.fresh_leader_kill and rng.random() < p.fresh_leader_kill:
                cluster.crash_node(node)
        committing, self.committing_leaders = self.committing_leaders, []
        for node in committing:
            if node.alive and p.commit_kill and rng.random() < p.commit_kill:
                cluster.crash_node(node)
        if p.leader_kill_rate and rng.random() < p.leader_kill_rate:
            leaders = [node for node in cluster.live() if any(g.is_leader() for g in node.groups.values())]
            if leaders:
                cluster.crash_node(rng.choice(leaders))
        if p.clog_rate and len(cluster.node_ids) > 1 and rng.random() < p.clog_rate:
            self._clog_some_node(rng)
        if p.powerloss_rate and rng.random() < p.powerloss_rate:
            for node in cluster.live():
                cluster.crash_node(node)
        for node in cluster.nodes.values():
            if not node.alive and rng.random() < p.restart_rate:
                cluster.start_node(node)
        if p.transfer_rate and rng.random() < p.transfer_rate:
            self._transfer_some_leader(rng)
        if p.reconfig_rate and len(cluster.node_ids) % 2 == 1 and rng.random() < p.reconfig_rate:
            self._reconfigure_some_group(rng)

    def _reconfigure_some_group(self, rng: random.Random) -> None:
        """One server at a time: add back a removed voter (as a learner, which its group's
        leader promotes once caught up), or remove a member (maybe the leader itself).

        Only with an odd node count and at most one voter missing, so a majority of the voters is
        never smaller than a majority of all nodes (what the quorum checker counts).
        """
        cluster = self.cluster
        leaders = [group for node in cluster.live() for group in node.groups.values() if group.is_leader()]
        if not leaders:
            return
        group = rng.choice(leaders)
        missing = [name for name in cluster.node_ids if name not in group.voters() + group.learners()]
        try:
            if missing:
                group.add_learner(rng.choice(missing))
            elif len(group.voters()) >= 3 and not group.learners():
                group.remove_voter(rng.choice(group.voters()))
        except ApplianceError:
            return

    def _clog_some_node(self, rng: random.Random) -> None:
        """A node whose outgoing traffic stalls (a slow NIC, a paused VM): often a leader."""
        cluster = self.cluster
        leaders = [node.name for node in cluster.live() if any(g.is_leader() for g in node.groups.values())]
        sender = rng.choice(leaders) if leaders and rng.random() < 0.7 else rng.choice(cluster.node_ids)
        until, delay = cluster.now + rng.randrange(10, 60), rng.randrange(10, 40)
        for receiver in cluster.node_ids:
            if receiver != sender:
                cluster.network.clog((sender, receiver), until=until, delay_ticks=delay)

    def _transfer_some_leader(self, rng: random.Random) -> None:
        cluster = self.cluster
        leaders = [(node, group) for node in cluster.live() for group in node.groups.values() if group.is_leader()]
        if not leaders:
            return
        node, group = rng.choice(leaders)
        target = rng.choice([None, *[n for n in cluster.node_ids if n != node.name]])
        try:
            group.core.transfer_leadership(target)
        except ApplianceError:
            return
