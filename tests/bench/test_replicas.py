"""When a replicated stream is ready for a run, and which node a client goes to (pure: STREAM.INFO dicts)."""

import pytest

from appliance.bench.replicas import NotHealthy, group_of, health, node_for


def info(leader: str | None, *replicas: tuple[str, bool]) -> dict[str, object]:
    cluster: dict[str, object] = {"name": "BENCH", "replicas": [{"name": n, "current": c, "active": 1} for n, c in replicas]}
    if leader is not None:
        cluster["leader"] = leader
    return {"config": {"name": "S"}, "cluster": cluster}


def test_a_stream_with_a_leader_and_every_replica_current_is_ready() -> None:
    assert health(info("n3", ("n1", True), ("n2", True)), 3) == ("n3", "")


@pytest.mark.parametrize("answer, missing", [
    (info(None, ("n1", True), ("n2", True)), "no leader"),
    (info("n3", ("n1", True), ("n2", False)), "replicas not current: n2"),
    (info("n3", ("n1", True)), "1 of 2 replicas besides the leader n3"),
    ({"config": {"name": "S"}}, "no cluster information in STREAM.INFO"),
])
def test_what_a_replicated_stream_still_misses(answer: dict[str, object], missing: str) -> None:
    assert health(answer, 3)[1] == missing


def test_a_replica_without_current_true_is_not_current() -> None:
    answer = {"cluster": {"leader": "n1", "replicas": [{"name": "n2", "current": True}, {"name": "n3"}]}}
    assert health(answer, 3) == ("n1", "replicas not current: n3")


def test_a_single_copy_needs_no_cluster_block() -> None:
    assert health({"config": {}}, 1) == (None, "")
    assert health({"cluster": {"leader": "n1"}}, 1) == ("n1", "")


def test_the_group_lists_the_leader_first() -> None:
    assert group_of(info("n2", ("n1", True), ("n3", False))) == ("n2", "n1", "n3")
    assert group_of({"config": {}}) == ()


def test_the_client_goes_to_the_leaders_node_or_a_followers() -> None:
    names = ["n1", "n2", "n3"]
    group = ("n2", "n3", "n1")
    assert node_for(names, group, "leader") == 1
    assert node_for(names, group, "follower") == 2


def test_a_group_of_servers_that_are_not_ours_is_an_error() -> None:
    with pytest.raises(NotHealthy, match="no node of ours is the stream's follower"):
        node_for(["n1", "n2", "n3"], ("n1", "x", "y"), "follower")
    with pytest.raises(NotHealthy, match="no leader"):
        node_for(["n1"], (), "leader")
