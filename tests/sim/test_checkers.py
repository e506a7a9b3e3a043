"""Each simulator checker fires on exactly the violation it names (and stays quiet otherwise)."""

import pytest

from appliance.raft.types import Entry
from appliance.testing.sim.checkers import Checkers, Violation


@pytest.fixture
def checkers() -> Checkers:
    return Checkers(["g"])


def test_two_leaders_in_one_term_break_election_safety(checkers: Checkers) -> None:
    assert checkers.on_leader("g", 3, "n1")
    assert not checkers.on_leader("g", 3, "n1")
    assert checkers.on_leader("g", 4, "n2")
    with pytest.raises(Violation, match="election safety"):
        checkers.on_leader("g", 3, "n2")


def test_the_same_index_and_term_with_other_data_or_history_breaks_log_matching(checkers: Checkers) -> None:
    checkers.on_persist("n1", "g", Entry(2, 5, data=b"a"), prev_term=2)
    checkers.on_persist("n2", "g", Entry(2, 5, data=b"a"), prev_term=2)
    with pytest.raises(Violation, match="log matching.*other data"):
        checkers.on_persist("n3", "g", Entry(2, 5, data=b"b"), prev_term=2)
    with pytest.raises(Violation, match="log matching.*prev term 1"):
        checkers.on_persist("n3", "g", Entry(2, 5, data=b"a"), prev_term=1)


def test_applying_different_entries_or_reaching_different_states_is_caught(checkers: Checkers) -> None:
    checkers.on_state("n1", "g", 1, b"s1", Entry(1, 1, data=b"x"))
    with pytest.raises(Violation, match="state machine safety"):
        checkers.on_state("n2", "g", 1, b"s1", Entry(2, 1, data=b"y"))
    with pytest.raises(Violation, match="state divergence"):
        checkers.on_state("n2", "g", 1, b"other", None)


def test_an_acknowledged_write_must_be_what_is_applied(checkers: Checkers) -> None:
    with pytest.raises(Violation, match="not applied"):
        checkers.on_ack("g", 1, b"x")
    checkers.on_state("n1", "g", 1, b"s1", Entry(1, 1, data=b"x"))
    checkers.on_ack("g", 1, b"x")
    assert checkers.acked_count() == 1


def test_a_committed_entry_must_stay_on_a_quorum(checkers: Checkers) -> None:
    checkers.on_quorum_holds("g", index=4, term=2, holders=["n1", "n2"], voters=3)
    with pytest.raises(Violation, match="not on a quorum"):
        checkers.on_quorum_holds("g", index=4, term=2, holders=["n1"], voters=3)


def test_a_new_leader_must_hold_every_committed_entry(checkers: Checkers) -> None:
    checkers.on_committed("g", index=7, term=3)
    checkers.on_new_leader("g", "n1", holds_committed=True)
    with pytest.raises(Violation, match="leader completeness.*3/7"):
        checkers.on_new_leader("g", "n2", holds_committed=False)


def test_a_snapshot_must_hold_the_state_of_its_index(checkers: Checkers) -> None:
    checkers.on_applied_index("n1", "g", state_index=5, raft_applied=5)
    with pytest.raises(Violation, match="snapshot/apply mismatch"):
        checkers.on_applied_index("n1", "g", state_index=4, raft_applied=5)
