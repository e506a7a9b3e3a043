"""FaultProfile: how hard one simulated run is hit. Swarm testing (as TigerBeetle's VOPR does):
each seed draws its own rates, so some runs are calm and some are storms, and bugs that need an
unusual mix of faults are still found. A fault left out of `enabled` is never injected.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

FAULT_NAMES = (
    "drop", "dup", "reorder", "clog", "partition", "crash", "reboot", "leader-kill", "powerloss", "torn", "transfer",
    "reconfig",
)


@dataclass(frozen=True, slots=True)
class FaultProfile:
    drop: float = 0.0  # per message
    duplicate: float = 0.0  # per message
    delay_ticks_max: int = 0  # extra per-message delay: reordering
    partition_rate: float = 0.0  # per tick, when whole
    heal_rate: float = 0.05  # per tick, when partitioned
    crash_rate: float = 0.0  # per tick: one node stops, loses unsynced writes
    restart_rate: float = 0.05  # per tick, per stopped node
    reboot_rate: float = 0.0  # per tick: one node crashes and restarts at once (a process restart)
    powerloss_rate: float = 0.0  # per tick: every node crashes at once
    leader_kill_rate: float = 0.0  # per tick: a current leader crashes (Jepsen's "kill the leader")
    fresh_leader_kill: float = 0.0  # per election: the new leader crashes before its first entry spreads
    commit_kill: float = 0.0  # per commit advance on a leader: it crashes right after (FoundationDB's "buggify")
    clog_rate: float = 0.0  # per tick: one directed link starts delaying everything by 10..40 ticks
    torn: bool = False  # a crash keeps a random prefix of the unsynced bytes
    transfer_rate: float = 0.0  # per tick: some leader hands over leadership
    reconfig_rate: float = 0.0  # per tick: a leader removes a voter (maybe itself) or adds a removed one back
    propose_rate: float = 0.5  # per group per tick
    append_bytes_max: int = 512  # small appends split a backlog into many acknowledgements
    pre_vote: bool = True
    check_quorum: bool = True
    closes_connections: bool = True  # a crash or a cut tells the other side peer_gone (a killed process)

    def describe(self) -> str:
        return (f"drop={self.drop} dup={self.duplicate} delay<={self.delay_ticks_max} "
                f"partition={self.partition_rate} crash={self.crash_rate} reboot={self.reboot_rate} "
                f"powerloss={self.powerloss_rate} leader-kill={self.leader_kill_rate}/{self.fresh_leader_kill}/{self.commit_kill} clog={self.clog_rate} torn={self.torn} transfer={self.transfer_rate} reconfig={self.reconfig_rate} "
                f"propose={self.propose_rate} append_bytes={self.append_bytes_max} "
                f"pre_vote={self.pre_vote} check_quorum={self.check_quorum} "
                f"closes_connections={self.closes_connections}")


def draw_profile(rng: random.Random, enabled: frozenset[str]) -> FaultProfile:
    """A seed's profile: each enabled fault gets a rate drawn from a few orders of magnitude."""

    def pick(name: str, choices: tuple[float, ...]) -> float:
        value = rng.choice(choices)  # always draw, so enabling a fault never shifts the others
        return value if name in enabled else 0.0

    return FaultProfile(
        drop=pick("drop", (0.0, 0.01, 0.05, 0.2)),
        duplicate=pick("dup", (0.0, 0.02, 0.1)),
        delay_ticks_max=int(pick("reorder", (0.0, 2.0, 5.0, 12.0))),
        partition_rate=pick("partition", (0.0, 0.005, 0.02)),
        heal_rate=rng.choice((0.02, 0.1)),
        crash_rate=pick("crash", (0.0, 0.003, 0.01, 0.03)),
        restart_rate=rng.choice((0.02, 0.1, 0.5)),
        reboot_rate=pick("reboot", (0.0, 0.005, 0.02, 0.05)),
        powerloss_rate=pick("powerloss", (0.0, 0.002, 0.01)),
        leader_kill_rate=pick("leader-kill", (0.0, 0.01, 0.03, 0.08)),
        fresh_leader_kill=pick("leader-kill", (0.0, 0.1, 0.3)),
        commit_kill=pick("leader-kill", (0.0, 0.02, 0.1)),
        clog_rate=pick("clog", (0.0, 0.01, 0.05)),
        torn="torn" in enabled and rng.random() < 0.7,
        transfer_rate=pick("transfer", (0.0, 0.005, 0.02)),
        propose_rate=rng.choice((0.2, 0.5, 1.0)),
        append_bytes_max=rng.choice((40, 40, 512, 8192)),  # 40: one entry per append, as with big messages
        pre_vote=rng.random() < 0.7,
        check_quorum=rng.random() < 0.7,
        reconfig_rate=pick("reconfig", (0.0, 0.005, 0.02)),  # drawn late: older seeds keep their mix
        # half the seeds: crashes and cuts close connections (kill -9, a dropped route: the fast
        # failover path); the other half: they go silent (a paused process, a black-holed link)
        closes_connections=rng.random() < 0.5,
    )
