"""Quorum arithmetic as pure functions over a voter set (majority = floor(n/2) + 1).

`committed_index` is checked against a naive oracle by a property test (tests/raft/test_quorum.py).
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Mapping


class VoteResult(enum.IntEnum):
    PENDING = 1
    WON = 2
    LOST = 3


def majority(voter_count: int) -> int:
    return voter_count // 2 + 1


def committed_index(voters: Collection[str], acked: Mapping[str, int]) -> int:
    """The largest index acknowledged by a majority of `voters` (missing voters count as 0).

    An empty voter set has committed everything ("infinity" in etcd); we return 0 instead, since a
    group without voters never commits.
    """
    if not voters:
        return 0
    indexes = sorted((acked.get(voter, 0) for voter in voters), reverse=True)
    return indexes[majority(len(indexes)) - 1]


def vote_result(voters: Collection[str], votes: Mapping[str, bool]) -> VoteResult:
    """WON once a majority granted, LOST once a majority is out of reach, else PENDING."""
    if not voters:
        return VoteResult.LOST
    granted = sum(1 for voter in voters if votes.get(voter) is True)
    rejected = sum(1 for voter in voters if votes.get(voter) is False)
    needed = majority(len(voters))
    if granted >= needed:
        return VoteResult.WON
    if len(voters) - rejected < needed:
        return VoteResult.LOST
    return VoteResult.PENDING


def has_quorum(voters: Collection[str], active: Collection[str]) -> bool:
    return sum(1 for voter in voters if voter in active) >= majority(len(voters)) if voters else False
