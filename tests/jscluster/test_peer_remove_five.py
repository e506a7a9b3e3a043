"""On the five-server zone cluster (test_placement.py): a peer-remove with spare servers gets a
replacement placed by the placement rules (another zone, not the removed server) that catches up
while publishes go on, and replicas change 3 -> 5 -> 3 on the live stream."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nats
import pytest

from tests.jscluster.conftest import META_TIMEOUT_S, meta_leader
from tests.jscluster.test_peer_remove import Publisher, identical, info, peers, replica_states, until
from tests.jscluster.test_placement import ZONES, five_node_config
from tests.routes.conftest import Node, wait_until
from appliance.testing.process import free_port

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(params=[True, False], ids=["unique_tag", "no_unique_tag"])
def five(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[list[Node]]:
    """test_placement's five servers, started side by side: started one after the other on a
    loaded machine, the first waits out META_FORM_WAIT_S and forms the meta group without the
    last (meta_formation.py's partial start), which is not what these tests are about."""
    cluster = {n: free_port() for n in range(1, 6)}
    nodes = []
    for n in range(1, 6):
        client, http = free_port(), free_port()
        path = tmp_path / f"n{n}.conf"
        text = five_node_config(n, client=client, http=http, cluster=cluster, store=tmp_path / f"s{n}")
        path.write_text(text if request.param else text.replace('  unique_tag: "az:"\n', ""))
        nodes.append(Node(f"n{n}-c1", client, cluster[n], path, log_dir=tmp_path, http_port=http))
    try:
        with ThreadPoolExecutor(max_workers=5) as pool:
            list(pool.map(Node.start, nodes))
        wait_until(lambda: meta_leader(nodes), "a meta leader", META_TIMEOUT_S)
        wait_until(lambda: all(n.monitor("/jsz")["meta_cluster"]["cluster_size"] == 5 for n in nodes),
                   "five voters", META_TIMEOUT_S)
        yield nodes
    finally:
        for node in nodes:
            node.stop()


def test_peer_remove_places_a_replacement_and_replicas_go_three_five_three(five: list[Node]) -> None:
    unique = '"az:"' in five[0].config.read_text()
    zone_of = {f"n{n}-c1": zone for n, zone in ZONES.items()}
    names = {node.name for node in five}

    async def scenario() -> None:
        nc = await nats.connect(five[0].url, max_reconnect_attempts=-1)
        config: dict[str, object] = {"name": "P5", "subjects": ["p5.>"], "storage": "file", "num_replicas": 3}
        reply = json.loads((await nc.request("$JS.API.STREAM.CREATE.P5", json.dumps(config).encode(), timeout=10)).data)
        assert "error" not in reply, reply
        publisher = Publisher(nc.jetstream(), "p5.x")
        for i in range(30):
            await publisher.one(i, time.monotonic() + 60)
        publisher.start()
        before = await peers(nc, "P5")
        leader = str((await info(nc, "P5"))["cluster"]["leader"])  # type: ignore[index]
        victim = next(name for name in sorted(before) if name != leader)
        msg = await nc.request("$JS.API.STREAM.PEER.REMOVE.P5", json.dumps({"peer": victim}).encode(), timeout=10)
        assert json.loads(msg.data)["success"] is True
        await until(lambda: _three_without(nc, victim), "a replacement", 60)
        after = await peers(nc, "P5")
        if unique:
            assert len({zone_of[name] for name in after}) == 3, after  # unique_tag "az:" still holds
        assert victim not in after
        wait_until(lambda: set(replica_states(five, "P5")) == after, "the removed copy deleted", 30)

        reply = json.loads((await nc.request("$JS.API.STREAM.UPDATE.P5", json.dumps(
            {**config, "num_replicas": 5}).encode(), timeout=10)).data)
        if unique:  # five replicas in three zones break unique_tag: placement refuses, as nats-server does
            assert reply["error"]["err_code"] == 10005, reply
        else:
            assert "error" not in reply, reply
            await until(lambda: _count(nc, 5), "five peers", 60)
            reply = json.loads((await nc.request("$JS.API.STREAM.UPDATE.P5", json.dumps(config).encode(),
                                                 timeout=10)).data)
            assert "error" not in reply, reply
            await until(lambda: _count(nc, 3), "three peers again", 60)
            after = await peers(nc, "P5")
            wait_until(lambda: set(replica_states(five, "P5")) == after, "the dropped copies deleted", 30)
        await publisher.finish()
        count = len(publisher.acked)
        assert sorted(publisher.acked.values()) == list(range(1, count + 1))
        wait_until(lambda: identical(replica_states(five, "P5"), after, count), "identical replicas", 60)
        assert names >= after
        await nc.close()

    asyncio.run(scenario())


async def _three_without(nc: nats.NATS, victim: str) -> bool:
    current = await peers(nc, "P5")
    return len(current) == 3 and victim not in current


async def _count(nc: nats.NATS, count: int) -> bool:
    return len(await peers(nc, "P5")) == count
