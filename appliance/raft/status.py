"""A read-only picture of one replica, for monitoring ("current / outdated, seen Xs ago")."""

from __future__ import annotations

from dataclasses import dataclass

from appliance.raft.progress import ProgressState
from appliance.raft.types import Role


@dataclass(frozen=True, slots=True)
class PeerStatus:
    peer: str
    match: int
    next: int
    state: ProgressState
    inflight: int
    ticks_since_contact: int
    degraded: bool = False  # its state machine lacks data its log holds (a lost range awaiting repair)


@dataclass(frozen=True, slots=True)
class Status:
    id: str
    role: Role
    term: int
    lead: str
    commit: int
    applied: int
    last_index: int
    voters: tuple[str, ...]
    peers: tuple[PeerStatus, ...]  # leader only (voters and learners); empty elsewhere
    learners: tuple[str, ...] = ()
