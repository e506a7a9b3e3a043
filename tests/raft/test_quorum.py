"""Quorum arithmetic against naive oracles (etcd's quick_test.go idea)."""

from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.raft import quorum

PEERS = [f"p{i}" for i in range(9)]
voter_sets = st.lists(st.sampled_from(PEERS), min_size=1, max_size=9, unique=True)


def naive_committed(voters: list[str], acked: dict[str, int]) -> int:
    """The largest index that at least a majority of voters have acknowledged, by brute force."""
    best = 0
    for candidate in range(max(acked.values(), default=0) + 1):
        holders = sum(1 for voter in voters if acked.get(voter, 0) >= candidate)
        if holders * 2 > len(voters):
            best = candidate
    return best


def naive_vote(voters: list[str], votes: dict[str, bool]) -> quorum.VoteResult:
    yes = sum(1 for v in voters if votes.get(v) is True)
    missing = sum(1 for v in voters if v not in votes)
    if yes * 2 > len(voters):
        return quorum.VoteResult.WON
    if (yes + missing) * 2 > len(voters):
        return quorum.VoteResult.PENDING
    return quorum.VoteResult.LOST


@settings(deadline=None)  # the machine is shared: no per-example deadline
@given(voters=voter_sets, acked=st.dictionaries(st.sampled_from(PEERS), st.integers(0, 50)))
def test_committed_index_matches_the_naive_oracle(voters: list[str], acked: dict[str, int]) -> None:
    assert quorum.committed_index(voters, acked) == naive_committed(voters, acked)


@settings(deadline=None)  # the machine is shared: no per-example deadline
@given(voters=voter_sets, votes=st.dictionaries(st.sampled_from(PEERS), st.booleans()))
def test_vote_result_matches_the_naive_oracle(voters: list[str], votes: dict[str, bool]) -> None:
    assert quorum.vote_result(voters, votes) == naive_vote(voters, votes)


def test_majority_is_floor_half_plus_one() -> None:
    assert [quorum.majority(n) for n in range(1, 8)] == [1, 2, 2, 3, 3, 4, 4]


def test_no_voters_commit_nothing_and_win_nothing() -> None:
    assert quorum.committed_index([], {"a": 5}) == 0
    assert quorum.vote_result([], {}) == quorum.VoteResult.LOST
    assert not quorum.has_quorum([], {"a"})
