"""Placement as a pure function: spread by load, tags, unique_tag zones, resources, and the
error texts nats-server answers (JetStream API 10005, spec/jetstream-api.md and captures/cap3)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from appliance.cluster.placement import PlacementError, PlacementRequest, ServerInfo, place


def cluster(count: int) -> list[ServerInfo]:
    return [ServerInfo(name=f"n{i}", peer=f"p{i}", cluster="C1") for i in range(1, count + 1)]


def test_replicas_go_to_the_least_loaded_servers_then_the_freest() -> None:
    servers = [
        ServerInfo("n1", "p1", "C1", assets=3),
        ServerInfo("n2", "p2", "C1", assets=0, storage_free_bytes=10),
        ServerInfo("n3", "p3", "C1", assets=0, storage_free_bytes=20),
        ServerInfo("n4", "p4", "C1", assets=1),
    ]
    assert place(PlacementRequest(3, "C1"), servers) == ["p3", "p2", "p4"]


def test_more_replicas_than_servers_or_an_unknown_cluster_have_no_suitable_peers() -> None:
    with pytest.raises(PlacementError, match="^no suitable peers for placement$"):
        place(PlacementRequest(5, "C1"), cluster(3))
    with pytest.raises(PlacementError, match="^no suitable peers for placement$"):
        place(PlacementRequest(1, "NOPE"), cluster(3))


def test_tags_must_all_match_and_the_error_names_them_as_nats_server() -> None:
    servers = cluster(3)
    with pytest.raises(PlacementError) as raised:
        place(PlacementRequest(1, "C1", tags=("ssd",)), servers)
    assert str(raised.value) == "no suitable peers for placement, tags not matched ['ssd']"  # captures/cap3
    tagged = [ServerInfo("n1", "p1", "C1", tags=("SSD", "az:1")), *servers[1:]]
    assert place(PlacementRequest(1, "C1", tags=("ssd",)), tagged) == ["p1"]  # tags are case-insensitive


def test_unique_tag_puts_each_replica_in_another_zone() -> None:
    zones = ["az:1", "az:1", "az:2", "az:2", "az:3"]
    servers = [ServerInfo(f"n{i}", f"p{i}", "C1", tags=(zone,)) for i, zone in enumerate(zones, 1)]
    peers = place(PlacementRequest(3, "C1", unique_tag="az:"), servers)
    assert len({zones[int(peer[1:]) - 1] for peer in peers}) == 3
    with pytest.raises(PlacementError):
        place(PlacementRequest(4, "C1", unique_tag="az:"), servers)  # three zones only


def test_offline_excluded_and_full_servers_are_skipped_and_preferred_comes_first() -> None:
    servers = [
        ServerInfo("n1", "p1", "C1", online=False),
        ServerInfo("n2", "p2", "C1", storage_free_bytes=100),
        ServerInfo("n3", "p3", "C1"),
        ServerInfo("n4", "p4", "C1", jetstream=False),
        ServerInfo("n5", "p5", "C1", assets=9),
    ]
    assert place(PlacementRequest(1, "C1", reserved_bytes=1000), servers) == ["p3"]
    assert place(PlacementRequest(2, "C1", exclude=frozenset({"p3"})), servers) == ["p2", "p5"]
    assert place(PlacementRequest(2, "C1", preferred="n5"), servers)[0] == "p5"


@given(
    loads=st.lists(st.integers(min_value=0, max_value=5), min_size=1, max_size=7),
    replicas=st.integers(min_value=1, max_value=7),
)
def test_a_placement_is_distinct_least_loaded_servers_and_deterministic(loads: list[int], replicas: int) -> None:
    servers = [ServerInfo(f"n{i}", f"p{i}", "C1", assets=load) for i, load in enumerate(loads)]
    request = PlacementRequest(replicas, "C1")
    if replicas > len(servers):
        with pytest.raises(PlacementError):
            place(request, servers)
        return
    peers = place(request, servers)
    assert len(set(peers)) == replicas
    assert peers == place(request, list(reversed(servers)))
    chosen_max = max(servers[int(p[1:])].assets for p in peers)
    assert all(s.assets >= chosen_max for s in servers if s.peer not in peers)  # the least loaded won


def test_a_replacement_keeps_unique_tag_with_the_peers_the_group_keeps() -> None:
    servers = [ServerInfo(f"n{i}", f"p{i}", "C1", (f"az:{zone}",)) for i, zone in
               ((1, 1), (2, 1), (3, 2), (4, 2), (5, 3))]
    # the group keeps p1 (az:1) and p3 (az:2): only az:3 may take the third replica
    request = PlacementRequest(1, "C1", unique_tag="az:", exclude=frozenset({"p5"}), kept=frozenset({"p1", "p3"}))
    with pytest.raises(PlacementError):
        place(request, servers)
    request = PlacementRequest(1, "C1", unique_tag="az:", kept=frozenset({"p1", "p3"}))
    assert place(request, servers) == ["p5"]


def test_servers_without_room_for_max_bytes_are_refused_with_nats_servers_reason() -> None:
    servers = [ServerInfo("n1", "p1", "C1", storage_free_bytes=5000), ServerInfo("n2", "p2", "C1"),
               ServerInfo("n3", "p3", "C1", storage_free_bytes=10, memory_free_bytes=1 << 40)]
    assert place(PlacementRequest(2, "C1", reserved_bytes=1000), servers) == ["p2", "p1"]  # more room first
    with pytest.raises(PlacementError, match=r"^no suitable peers for placement, insufficient storage$"):
        place(PlacementRequest(3, "C1", reserved_bytes=1000), servers)
    assert place(PlacementRequest(3, "C1", reserved_bytes=1000, storage="memory"), servers)  # memory has room
    with pytest.raises(PlacementError, match=r"^no suitable peers for placement$"):
        place(PlacementRequest(4, "C1"), servers)  # too few servers, none for want of storage
