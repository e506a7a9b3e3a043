"""How a new server's meta group forms (cluster/meta_formation.py), pure: time passed in."""

from __future__ import annotations

from appliance.cluster.meta_formation import Decision, Formation


def formation(expected: int = 3) -> Formation:
    return Formation("b", expected, wait_s=10.0, started_s=100.0)


def test_every_configured_server_known_bootstraps_them_all_at_once() -> None:
    assert formation().decide(["c", "a"], heard_group=False, now_s=100.0) == Decision(join=False, voters=("a", "b", "c"))


def test_a_partial_start_waits_then_bootstraps_a_quorum_or_joins_a_group_it_heard() -> None:
    assert formation().decide(["a"], heard_group=False, now_s=105.0) is None
    assert formation().decide(["a"], heard_group=False, now_s=110.0) == Decision(join=False, voters=("a", "b"))
    assert formation().decide(["a"], heard_group=True, now_s=110.0) == Decision(join=True)
    assert formation(5).decide(["a"], heard_group=False, now_s=200.0) is None  # 2 of 5: no quorum


def test_a_group_a_peer_already_runs_is_taken_as_it_is_never_bootstrapped_again() -> None:
    """A server that started late (its peer formed with the servers it knew then) used to
    bootstrap every configured server as voters: a second voter set for one group."""
    for known, now_s in ((["a", "c"], 100.0), (["a"], 101.0), (["a"], 150.0)):
        assert formation().decide(known, heard_group=False, now_s=now_s, formed=("a", "b")) == Decision(
            join=False, voters=("a", "b"))  # one of its voters: the same voters
        assert formation().decide(known, heard_group=False, now_s=now_s, formed=("a", "c")) == Decision(
            join=True)  # not one: the leader adds it
