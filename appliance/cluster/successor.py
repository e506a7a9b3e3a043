"""Leader step-down: which voter takes over a RAFT group from its leader. Pure.

A step-down request (`$JS.API.STREAM|CONSUMER.LEADER.STEPDOWN`, `$JS.API.META.LEADER.STEPDOWN`)
may carry `placement {preferred, cluster, tags}`. nats-server's rules (getStepDownPreferredPlacement,
then raft.StepDown) decide what is refused, with its 10005 texts:

  - `preferred` names a server: the leader itself is refused ("preferred server "x" is already
    leader"), a server that is not a voter of the group too ("preferred server "x" not known");
  - otherwise `cluster` / `tags` narrow the other voters that are online; none left is refused
    ("no replacement peer connected");
  - a chosen voter that is not healthy (offline, or not heard from recently) gives way to a
    healthy one.

Where nats-server then picks any healthy voter (and steps down blindly without one), we hand
leadership to the most up-to-date healthy voter (a whole copy before one whose store has a lost
range awaiting repair, then the highest match index, then the lowest peer id: deterministic): it needs the fewest entries before it can take over, so the transfer is quick
and loses nothing. "" means no voter is healthy; the caller still asks the RAFT group to
transfer (it picks the most up-to-date voter and gives up after an election timeout, leaving
the current leader in place rather than the group leaderless).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass


class StepDownRefused(Exception):
    """The placement of a step-down cannot be met; str() is nats-server's 10005 description."""


@dataclass(frozen=True, slots=True)
class Voter:
    """A voter of the group as the leader sees it."""

    peer: str
    name: str  # its server name ("" when not known)
    cluster: str = ""
    tags: tuple[str, ...] = ()
    online: bool = True  # a route connects the leader's server to it
    seen_ago_s: float | None = None  # since the leader last heard from it (None: never)
    match: int = 0  # the leader's view of its log: entries known to be there
    degraded: bool = False  # its store lacks data its log holds (a lost range awaiting repair)


def choose_successor(leader: str, voters: Sequence[Voter], placement: Mapping[str, object] | None,
                     *, seen_within_s: float) -> str:
    """The peer id that should lead next ("" when no voter is healthy); raises StepDownRefused."""
    others = [voter for voter in voters if voter.peer != leader]

    def healthy(voter: Voter) -> bool:
        return voter.online and voter.seen_ago_s is not None and voter.seen_ago_s < seen_within_s

    placement = placement or {}
    preferred = str(placement.get("preferred") or "")
    if preferred:
        named = [voter for voter in voters if voter.name == preferred]
        if named and named[0].peer == leader:
            raise StepDownRefused(f'preferred server "{preferred}" is already leader')
        if not named:
            raise StepDownRefused(f'preferred server "{preferred}" not known')
        if healthy(named[0]):
            return named[0].peer
        return _most_up_to_date([voter for voter in others if healthy(voter)])
    if not placement.get("cluster") and not placement.get("tags"):
        return _most_up_to_date([voter for voter in others if healthy(voter)])
    cluster = str(placement.get("cluster") or "")
    raw_tags = placement.get("tags")
    wanted = {str(tag).lower() for tag in raw_tags} if isinstance(raw_tags, (list, tuple)) else set()
    possible = [voter for voter in others if voter.online and (not cluster or voter.cluster == cluster)
                and wanted <= {tag.lower() for tag in voter.tags}]
    if not possible:
        raise StepDownRefused("no replacement peer connected")
    chosen = _most_up_to_date([voter for voter in possible if healthy(voter)])
    return chosen or _most_up_to_date([voter for voter in others if healthy(voter)])


def _most_up_to_date(candidates: Sequence[Voter]) -> str:
    if not candidates:
        return ""
    return min(candidates, key=lambda voter: (voter.degraded, -voter.match, voter.peer)).peer
