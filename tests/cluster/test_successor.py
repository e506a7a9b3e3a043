"""Who takes over a RAFT group on a leader step-down (cluster/successor.py): nats-server's refusals,
then the most up-to-date healthy voter."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from appliance.cluster.successor import StepDownRefused, Voter, choose_successor

SEEN_S = 1.0


def voters(*extra: Voter) -> list[Voter]:
    return [
        Voter("P1", "n1", "C1", ("az:1",), seen_ago_s=0.0, match=10),  # the leader
        Voter("P2", "n2", "C1", ("az:2",), seen_ago_s=0.1, match=9),
        Voter("P3", "n3", "C2", ("az:3", "SSD"), seen_ago_s=0.1, match=10),
        *extra,
    ]


def choose(placement: dict[str, object] | None, group: list[Voter] | None = None) -> str:
    return choose_successor("P1", group if group is not None else voters(), placement, seen_within_s=SEEN_S)


def test_without_placement_the_most_up_to_date_follower_takes_over() -> None:
    assert choose(None) == "P3"
    assert choose({}) == "P3"


def test_equal_logs_pick_the_lowest_peer_id() -> None:
    group = [Voter("P1", "n1", match=5, seen_ago_s=0.0), Voter("P9", "n9", match=5, seen_ago_s=0.1),
             Voter("P4", "n4", match=5, seen_ago_s=0.1)]
    assert choose(None, group) == "P4"


def test_a_voter_with_a_lost_range_takes_over_only_when_no_whole_copy_can() -> None:
    """A follower whose store lacks a range (damaged, awaiting repair) is not the most
    up-to-date copy, whatever its log says."""
    group = voters()
    group[2] = Voter("P3", "n3", "C2", ("az:3", "SSD"), seen_ago_s=0.1, match=10, degraded=True)
    assert choose(None, group) == "P2"
    assert choose(None, [group[0], group[2]]) == "P3"
    assert choose({"preferred": "n3"}, group) == "P3"  # named: it is the operator's choice


def test_preferred_server_is_chosen_even_when_behind() -> None:
    assert choose({"preferred": "n2"}) == "P2"


def test_preferred_leader_or_stranger_is_refused_with_nats_texts() -> None:
    with pytest.raises(StepDownRefused, match='^preferred server "n1" is already leader$'):
        choose({"preferred": "n1"})
    with pytest.raises(StepDownRefused, match='^preferred server "nope" not known$'):
        choose({"preferred": "nope"})


def test_preferred_wins_over_cluster_and_tags() -> None:
    assert choose({"preferred": "n2", "cluster": "C2", "tags": ["ssd"]}) == "P2"


def test_an_unhealthy_preferred_server_gives_way_to_a_healthy_one() -> None:
    group = voters()
    group[1] = Voter("P2", "n2", "C1", online=False, seen_ago_s=0.1, match=10)
    assert choose({"preferred": "n2"}, group) == "P3"
    group[1] = Voter("P2", "n2", "C1", seen_ago_s=5.0, match=10)
    assert choose({"preferred": "n2"}, group) == "P3"


def test_cluster_and_tags_narrow_the_candidates() -> None:
    assert choose({"cluster": "C1"}) == "P2"
    assert choose({"tags": ["ssd"]}) == "P3"  # tags match case-insensitively
    assert choose({"tags": ["az:2"]}) == "P2"


def test_no_candidate_for_cluster_or_tags_is_refused() -> None:
    for placement in ({"cluster": "XX"}, {"tags": ["zz"]}, {"tags": ["az:1"]}, {"cluster": "C2", "tags": ["az:2"]}):
        with pytest.raises(StepDownRefused, match="^no replacement peer connected$"):
            choose(placement)


def test_an_offline_voter_is_no_candidate_for_cluster_or_tags() -> None:
    group = voters()
    group[2] = Voter("P3", "n3", "C2", ("ssd",), online=False)
    with pytest.raises(StepDownRefused, match="^no replacement peer connected$"):
        choose({"cluster": "C2"}, group)


def test_no_healthy_voter_leaves_the_choice_to_the_group() -> None:
    group = [Voter("P1", "n1", seen_ago_s=0.0), Voter("P2", "n2", online=False, match=3),
             Voter("P3", "n3", seen_ago_s=None)]
    assert choose(None, group) == ""


@given(st.lists(st.tuples(st.integers(0, 20), st.booleans(), st.one_of(st.none(), st.floats(0, 3))),
                min_size=1, max_size=6))
def test_the_successor_is_a_healthy_follower_behind_no_other_healthy_one(
        followers: list[tuple[int, bool, float | None]]) -> None:
    group = [Voter("L", "leader", seen_ago_s=0.0, match=20)]
    group += [Voter(f"P{i}", f"n{i}", online=online, seen_ago_s=seen, match=match)
              for i, (match, online, seen) in enumerate(followers)]
    healthy = [v for v in group[1:] if v.online and v.seen_ago_s is not None and v.seen_ago_s < SEEN_S]
    chosen = choose_successor("L", group, None, seen_within_s=SEEN_S)
    if not healthy:
        assert chosen == ""
        return
    winner = next(v for v in healthy if v.peer == chosen)
    assert all(winner.match >= v.match for v in healthy)
