"""Placement on a five-server cluster in three zones (the seed's `server_tags` and `unique_tag`):
replicas land in different zones, tags are honoured, and impossible requests get nats-server's
10005 errors."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest

from appliance.testing.process import free_port
from tests.jscluster.conftest import META_TIMEOUT_S, meta_leader
from tests.routes.conftest import Node, wait_until

pytestmark = pytest.mark.timeout(240)

ZONES = {1: "az:1", 2: "az:1", 3: "az:2", 4: "az:2", 5: "az:3"}


def five_node_config(index: int, *, client: int, http: int, cluster: dict[int, int], store: Path) -> str:
    routes = "\n".join(f"    nats-route://127.0.0.1:{cluster[n]}" for n in cluster if n != index)
    disk = "ssd" if index in (1, 3) else "hdd"
    return (f"server_name: n{index}-c1\nlisten: 127.0.0.1:{client}\nhttp: 127.0.0.1:{http}\n"
            f'server_tags: ["{ZONES[index]}", "{disk}"]\n'
            f'jetstream {{\n  store_dir: "{store}"\n  unique_tag: "az:"\n}}\n'
            f"cluster {{\n  name: C1\n  listen: 127.0.0.1:{cluster[index]}\n  routes: [\n{routes}\n  ]\n}}\n"
            "appliance { workers: 1 }\n")


@pytest.fixture
def five(tmp_path: Path) -> Iterator[list[Node]]:
    cluster = {n: free_port() for n in range(1, 6)}
    nodes = []
    for n in range(1, 6):
        client, http = free_port(), free_port()
        path = tmp_path / f"n{n}.conf"
        path.write_text(five_node_config(n, client=client, http=http, cluster=cluster, store=tmp_path / f"s{n}"))
        nodes.append(Node(f"n{n}-c1", client, cluster[n], path, log_dir=tmp_path, http_port=http))
    try:
        for node in nodes:
            node.start()
        wait_until(lambda: meta_leader(nodes), "a meta leader", META_TIMEOUT_S)
        wait_until(lambda: all(n.monitor("/jsz")["meta_cluster"]["cluster_size"] == 5 for n in nodes),
                   "five voters", META_TIMEOUT_S)
        yield nodes
    finally:
        for node in nodes:
            node.stop()


async def create(url: str, config: dict[str, object]) -> dict[str, object]:
    nc = await nats.connect(url)
    try:
        msg = await nc.request(f"$JS.API.STREAM.CREATE.{config['name']}", json.dumps(config).encode(), timeout=10)
        return json.loads(msg.data)  # type: ignore[no-any-return]
    finally:
        await nc.close()


def holders(nodes: list[Node], stream: str) -> set[str]:
    """The servers that hold a replica of `stream` (their /jsz lists it)."""
    out = set()
    for node in nodes:
        detail = node.monitor("/jsz?streams=true")
        for account in detail.get("account_details") or []:
            if any(s["name"] == stream for s in account.get("stream_detail") or []):
                out.add(node.name)
    return out


def test_replicas_spread_over_zones_and_tags_are_honoured(five: list[Node]) -> None:
    zone_of = {f"n{n}-c1": zone for n, zone in ZONES.items()}

    async def scenario() -> None:
        reply = await create(five[4].url, {"name": "Z", "subjects": ["z.>"], "num_replicas": 3})
        assert "error" not in reply, reply
        held = holders(five, "Z")
        assert len(held) == 3 and len({zone_of[name] for name in held}) == 3, held
        reply = await create(five[0].url, {"name": "SSD", "subjects": ["ssd.>"], "num_replicas": 1,
                                           "placement": {"tags": ["ssd"]}})
        assert "error" not in reply, reply
        assert holders(five, "SSD") <= {"n1-c1", "n3-c1"}
        reply = await create(five[1].url, {"name": "R5", "subjects": ["r5.>"], "num_replicas": 5})
        assert reply["error"] == {"code": 400, "err_code": 10005, "description": "no suitable peers for placement"}
        reply = await create(five[1].url, {"name": "NV", "subjects": ["nv.>"], "num_replicas": 1,
                                           "placement": {"tags": ["nvme"]}})
        assert reply["error"] == {"code": 400, "err_code": 10005,
                                  "description": "no suitable peers for placement, tags not matched ['nvme']"}

    asyncio.run(scenario())
