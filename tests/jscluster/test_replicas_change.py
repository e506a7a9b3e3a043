"""Changing a live stream's replicas with STREAM.UPDATE `num_replicas` 1 -> 3 -> 1 on the seed's
three-node cluster: publishes go on throughout, new replicas catch up (identical stores), the
dropped ones delete their copies, and nothing acknowledged is lost or stored twice."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import nats
import pytest

from tests.jscluster.test_peer_remove import Publisher, identical, info, peers, replica_states, until
from tests.routes.conftest import Node, wait_until

pytestmark = pytest.mark.timeout(240)


async def update(nc: nats.NATS, config: dict[str, object]) -> dict[str, object]:
    msg = await nc.request(f"$JS.API.STREAM.UPDATE.{config['name']}", json.dumps(config).encode(), timeout=10)
    return json.loads(msg.data)  # type: ignore[no-any-return]


def test_replicas_one_to_three_to_one_under_publishes(js_cluster: list[Node], tmp_path: Path) -> None:
    names = {node.name for node in js_cluster}

    async def scenario() -> None:
        nc = await nats.connect(js_cluster[0].url, max_reconnect_attempts=-1)
        config: dict[str, object] = {"name": "RC", "subjects": ["rc.>"], "storage": "file", "num_replicas": 1}
        reply = json.loads((await nc.request("$JS.API.STREAM.CREATE.RC", json.dumps(config).encode(), timeout=10)).data)
        assert "error" not in reply, reply
        cons = {"stream_name": "RC", "config": {"durable_name": "D", "ack_policy": "explicit"}}
        reply = json.loads((await nc.request("$JS.API.CONSUMER.CREATE.RC.D", json.dumps(cons).encode(),
                                             timeout=10)).data)
        assert "error" not in reply, reply
        publisher = Publisher(nc.jetstream(), "rc.x")
        for i in range(30):
            await publisher.one(i, time.monotonic() + 60)
        publisher.start()

        started = time.monotonic()
        reply = await update(nc, {**config, "num_replicas": 3})
        assert "error" not in reply, reply
        assert reply["config"]["num_replicas"] == 3  # type: ignore[index]
        await until(lambda: _peers_are(nc, names), "three peers", 60)
        grown_s = time.monotonic() - started
        target = len(publisher.acked) + 20
        await until(lambda: _count_at_least(publisher, target), "publishes on three peers")
        await publisher.finish()
        count = len(publisher.acked)
        wait_until(lambda: identical(replica_states(js_cluster, "RC"), names, count), "three identical replicas", 60)
        consumer = json.loads((await nc.request("$JS.API.CONSUMER.INFO.RC.D", b"", timeout=5)).data)
        assert "error" not in consumer, consumer
        wait_until(lambda: all(s["state"]["consumer_count"] == 1 for s in replica_states(js_cluster, "RC").values()),
                   "the consumer on every replica", 30)
        consumer = json.loads((await nc.request("$JS.API.CONSUMER.INFO.RC.D", b"", timeout=5)).data)
        assert len(consumer["cluster"]["replicas"]) == 2, consumer

        publisher.stop = False
        publisher.start()
        started = time.monotonic()
        reply = await update(nc, {**config, "num_replicas": 1})
        assert "error" not in reply, reply
        await until(lambda: _peer_count(nc, 1), "one peer", 60)
        shrunk_s = time.monotonic() - started
        target = len(publisher.acked) + 20
        await until(lambda: _count_at_least(publisher, target), "publishes on one peer")
        await publisher.finish()
        count = len(publisher.acked)
        assert sorted(publisher.acked.values()) == list(range(1, count + 1))  # nothing lost, nothing twice
        holder = next(iter(await peers(nc, "RC")))
        wait_until(lambda: set(replica_states(js_cluster, "RC")) == {holder}, "the dropped copies deleted", 30)
        state = (await info(nc, "RC"))["state"]
        assert state["messages"] == count, state  # type: ignore[index]
        consumer = json.loads((await nc.request("$JS.API.CONSUMER.INFO.RC.D", b"", timeout=5)).data)
        assert "error" not in consumer, consumer
        print(f"replicas 1->3: three peers after {grown_s:.2f}s; 3->1: one peer after {shrunk_s:.2f}s; "
              f"{count} acknowledged, {publisher.failures} publish retries")
        await nc.close()

    asyncio.run(scenario())


async def _peers_are(nc: nats.NATS, wanted: set[str]) -> bool:
    return await peers(nc, "RC") == wanted


async def _peer_count(nc: nats.NATS, count: int) -> bool:
    return len(await peers(nc, "RC")) == count


async def _count_at_least(publisher: Publisher, count: int) -> bool:
    return len(publisher.acked) >= count
