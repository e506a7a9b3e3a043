"""NUMA topology from sysfs and where workers run."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from appliance.supervisor.topology import (
    Placement,
    Topology,
    parse_cpulist,
    place_workers,
    read_topology,
    store_dir_for_node,
    worker_count,
)


def _sysfs(root: Path, nodes: dict[int, str]) -> Path:
    for node, cpulist in nodes.items():
        (root / f"node{node}").mkdir(parents=True)
        (root / f"node{node}" / "cpulist").write_text(cpulist + "\n")
    (root / "possible").write_text("0-1\n")  # files that are not node directories are ignored
    (root / "power").mkdir()
    return root


@pytest.mark.parametrize(("text", "cpus"), [
    ("0", {0}),
    ("0-3", {0, 1, 2, 3}),
    ("0-3,8-11", {0, 1, 2, 3, 8, 9, 10, 11}),
    ("1,3,5\n", {1, 3, 5}),
    ("0-7:2", {0, 2, 4, 6}),
    ("", set()),
])
def test_cpulist_format(text: str, cpus: set[int]) -> None:
    assert parse_cpulist(text) == cpus


@pytest.mark.parametrize("text", ["3-1", "a", "0-", "0-7:0"])
def test_bad_cpulist_is_rejected(text: str) -> None:
    with pytest.raises(ValueError):
        parse_cpulist(text)


def _as_cpulist(cpus: set[int]) -> str:
    """The kernel's way: sorted, consecutive runs as ranges."""
    runs: list[list[int]] = []
    for cpu in sorted(cpus):
        if runs and runs[-1][1] == cpu - 1:
            runs[-1][1] = cpu
        else:
            runs.append([cpu, cpu])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


@given(st.sets(st.integers(min_value=0, max_value=1023), max_size=64))
def test_cpulist_round_trip(cpus: set[int]) -> None:
    assert parse_cpulist(_as_cpulist(cpus)) == cpus


def test_two_nodes_from_a_fake_sysfs_root(tmp_path: Path) -> None:
    root = _sysfs(tmp_path, {0: "0-3,8-11", 1: "4-7,12-15"})
    topology = read_topology(root)
    assert topology.nodes == {0: frozenset({0, 1, 2, 3, 8, 9, 10, 11}), 1: frozenset({4, 5, 6, 7, 12, 13, 14, 15})}
    assert topology.node_of(12) == 1
    assert topology.node_of(9) == 0


def test_without_sysfs_the_host_is_one_node(tmp_path: Path) -> None:
    assert read_topology(tmp_path / "missing", all_cpus=frozenset({0, 1, 2})).nodes == {0: frozenset({0, 1, 2})}


def test_this_machine_has_a_topology() -> None:
    topology = read_topology()
    assert topology.nodes
    assert all(cpus for cpus in topology.nodes.values())


def test_workers_spread_over_nodes_then_fill_them() -> None:
    topology = Topology(nodes={0: frozenset({0, 1, 2, 3}), 1: frozenset({4, 5, 6, 7})})
    placements = place_workers(4, topology=topology, usable=frozenset(range(8)))
    assert [(p.core, p.numa_node) for p in placements] == [(0, 0), (4, 1), (1, 0), (5, 1)]


def test_only_usable_cpus_get_workers() -> None:
    topology = Topology(nodes={0: frozenset({0, 1}), 1: frozenset({2, 3})})
    placements = place_workers(2, topology=topology, usable=frozenset({1, 3}))
    assert placements == [Placement(0, core=1, numa_node=0), Placement(1, core=3, numa_node=1)]


def test_a_node_without_usable_cpus_gets_no_worker() -> None:
    topology = Topology(nodes={0: frozenset({0, 1}), 1: frozenset({2, 3})})
    placements = place_workers(3, topology=topology, usable=frozenset({2, 3}))
    assert [(p.core, p.numa_node) for p in placements] == [(2, 1), (3, 1), (2, 1)]


def test_more_workers_than_cores_wrap_around() -> None:
    topology = Topology(nodes={0: frozenset({0, 1})})
    assert [p.core for p in place_workers(5, topology=topology, usable=frozenset({0, 1}))] == [0, 1, 0, 1, 0]


def test_affinity_outside_the_topology_still_places_workers() -> None:
    placements = place_workers(2, topology=Topology(nodes={0: frozenset({0})}), usable=frozenset({5, 6}))
    assert [(p.core, p.numa_node) for p in placements] == [(5, 0), (6, 0)]


def test_worker_count_is_configured_or_one_per_usable_cpu() -> None:
    assert worker_count(0, frozenset({0, 1, 2})) == 3
    assert worker_count(5, frozenset({0, 1, 2})) == 5
    assert worker_count(0, frozenset()) == 1


def test_per_node_store_dirs() -> None:
    dirs = {0: "/nvme0/js", 1: "/nvme1/js"}
    assert store_dir_for_node(dirs, 1, "/var/lib/appliance") == "/nvme1/js"
    assert store_dir_for_node(dirs, 2, "/var/lib/appliance") == "/var/lib/appliance"
