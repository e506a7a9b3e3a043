"""CPU and NUMA topology, and where each worker runs.

Linux lists NUMA nodes under /sys/devices/system/node as `node<N>/cpulist` ("0-3,8-11"). The
root is a parameter so tests can hand in a fake sysfs tree. Without that tree (containers, non-NUMA
kernels) the host is one node 0 holding every CPU.

Placement: worker k goes to NUMA node (k mod nodes with usable CPUs), on the next usable CPU of
that node, so a host with fewer workers than cores still spreads over every node. With more
workers than usable CPUs the assignment wraps around (two workers share a core).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

SYSFS_NODE_ROOT = Path("/sys/devices/system/node")
_NODE_DIR = re.compile(r"^node(\d+)$")


@dataclass(frozen=True, slots=True)
class Topology:
    nodes: dict[int, frozenset[int]]  # NUMA node -> its CPUs

    def node_of(self, cpu: int) -> int:
        for node, cpus in self.nodes.items():
            if cpu in cpus:
                return node
        return 0


@dataclass(frozen=True, slots=True)
class Placement:
    worker_index: int
    core: int
    numa_node: int


def parse_cpulist(text: str) -> frozenset[int]:
    """Parse the kernel's cpulist format: "0-3,8,10-11" (ranges may carry a stride, "0-7:2")."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        stride = 1
        if ":" in part:
            part, stride_text = part.split(":", 1)
            stride = int(stride_text)
            if stride <= 0:
                raise ValueError(f"bad cpulist stride in {text!r}")
        if "-" in part:
            first_text, last_text = part.split("-", 1)
            first, last = int(first_text), int(last_text)
            if last < first:
                raise ValueError(f"bad cpulist range {part!r}")
            cpus.update(range(first, last + 1, stride))
        else:
            cpus.add(int(part))
    return frozenset(cpus)


def read_topology(root: Path = SYSFS_NODE_ROOT, *, all_cpus: frozenset[int] | None = None) -> Topology:
    """NUMA nodes with their CPUs from `root`; one node 0 with `all_cpus` when there is none."""
    nodes: dict[int, frozenset[int]] = {}
    if root.is_dir():
        for entry in sorted(root.iterdir()):
            match = _NODE_DIR.match(entry.name)
            cpulist = entry / "cpulist"
            if match is None or not cpulist.is_file():
                continue
            nodes[int(match.group(1))] = parse_cpulist(cpulist.read_text())
    if not nodes:
        cpus = all_cpus if all_cpus is not None else usable_cpus()
        nodes = {0: cpus}
    return Topology(nodes=dict(sorted(nodes.items())))


def usable_cpus() -> frozenset[int]:
    """The CPUs this process may run on (cgroups / taskset), not every CPU of the host."""
    return frozenset(os.sched_getaffinity(0))


def worker_count(configured: int, usable: frozenset[int]) -> int:
    """`appliance { workers: N }`, or one per usable CPU when N is 0."""
    assert configured >= 0
    return configured if configured > 0 else max(1, len(usable))


def place_workers(count: int, *, topology: Topology, usable: frozenset[int]) -> list[Placement]:
    """Worker -> core -> node, spreading workers over the nodes that have usable CPUs."""
    assert count >= 1
    per_node = {node: sorted(cpus & usable) for node, cpus in topology.nodes.items()}
    per_node = {node: cpus for node, cpus in per_node.items() if cpus}
    if not per_node:  # the affinity mask names CPUs the topology does not know
        per_node = {0: sorted(usable) or [0]}
    order = sorted(per_node)
    taken = {node: 0 for node in order}
    placements = []
    for index in range(count):
        node = order[index % len(order)]
        cpus = per_node[node]
        placements.append(Placement(worker_index=index, core=cpus[taken[node] % len(cpus)], numa_node=node))
        taken[node] += 1
    return placements


def store_dir_for_node(numa_store_dirs: dict[int, str], node: int, default: str) -> str:
    """The store directory of a worker on `node`: `appliance { numa_store_dirs }` or the default."""
    return numa_store_dirs.get(node, default)
