"""Clustered JetStream on real `appliance run` processes: the seed's three-node cluster."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.routes.conftest import Node, seed_cluster, wait_until

META_TIMEOUT_S = 60.0  # a loaded 2-core machine starts nine worker processes slowly


def meta_leader(nodes: list[Node]) -> str:
    """The meta leader every running node agrees on ("" if they do not, yet)."""
    leaders = set()
    for node in nodes:
        try:
            meta = node.monitor("/jsz").get("meta_cluster") or {}
        except OSError:
            return ""
        leaders.add(meta.get("leader", "") if isinstance(meta, dict) else "")
    return leaders.pop() if len(leaders) == 1 else ""


@pytest.fixture
def js_cluster(tmp_path: Path) -> Iterator[list[Node]]:
    """The seed's three JetStream servers, started, with a meta leader they agree on."""
    nodes = seed_cluster(tmp_path, workers=2)
    try:
        for node in nodes:
            node.start()
        wait_until(lambda: meta_leader(nodes), "a meta leader", META_TIMEOUT_S)
        yield nodes
    finally:
        for node in nodes:
            node.stop()
