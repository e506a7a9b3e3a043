"""Failover of an R3 pull consumer: kill -9 of the consumer's leader, with some messages acked
(AckSync: answered once the ack is on a quorum) and some not. The next leader never delivers an
acked message again, and delivers the unacked ones again, once their ack_wait has passed."""

from __future__ import annotations

import asyncio
import json
import time

import nats
import pytest
from nats.errors import NoRespondersError, TimeoutError as NatsTimeout
from nats.js.errors import APIError

from tests.jscluster.test_failover import publish_until_acked
from tests.routes.conftest import Node

pytestmark = pytest.mark.timeout(240)

ACK_WAIT_S = 2.0
NS = 1_000_000_000


async def consumer_leader(nc: nats.NATS, stream: str, name: str) -> str:
    msg = await nc.request(f"$JS.API.CONSUMER.INFO.{stream}.{name}", b"", timeout=3)
    return str(json.loads(msg.data)["cluster"].get("leader", ""))


def test_killing_the_consumer_leader_keeps_acks_and_redelivers_the_rest_after_ack_wait(
    js_cluster: list[Node],
) -> None:
    by_name = {node.name: node for node in js_cluster}

    async def scenario() -> None:
        client_node = js_cluster[0]
        nc = await nats.connect(client_node.url, max_reconnect_attempts=-1)
        config = {"name": "CF", "subjects": ["cf.>"], "storage": "file", "num_replicas": 3}
        reply = json.loads((await nc.request("$JS.API.STREAM.CREATE.CF", json.dumps(config).encode(), timeout=5)).data)
        assert "error" not in reply, reply
        js = nc.jetstream()
        deadline = time.monotonic() + 120
        for i in range(10):
            await publish_until_acked(js, "cf.x", b"m%d" % i, f"cf-{i}", deadline)
        consumer = {"stream_name": "CF", "config": {"durable_name": "D", "ack_policy": "explicit",
                                                     "ack_wait": int(ACK_WAIT_S * NS)}}
        reply = json.loads((await nc.request("$JS.API.CONSUMER.DURABLE.CREATE.CF.D",
                                              json.dumps(consumer).encode(), timeout=5)).data)
        assert "error" not in reply, reply
        assert reply["config"]["num_replicas"] in (0, 3) and len(reply["cluster"]["replicas"]) == 2, reply
        psub = await js.pull_subscribe_bind("D", stream="CF")
        first = await psub.fetch(10, timeout=10)
        delivered_at = time.monotonic()
        assert [m.data for m in first] == [b"m%d" % i for i in range(10)]
        for msg in first[:5]:
            await msg.ack_sync(timeout=5)  # answered: on a quorum of the consumer's replicas
        leader = await consumer_leader(nc, "CF", "D")
        victim = by_name[leader]
        if victim is client_node:  # keep the client's server alive: move the client
            await nc.close()
            client_node = next(n for n in js_cluster if n is not victim)
            nc = await nats.connect(client_node.url, max_reconnect_attempts=-1)
            js = nc.jetstream()
            psub = await js.pull_subscribe_bind("D", stream="CF")
        victim.kill9()

        again: dict[bytes, tuple[float, int]] = {}  # payload -> (seconds after the first delivery, count)
        while len(again) < 5:
            assert time.monotonic() < deadline, f"only {sorted(again)} delivered again"
            try:
                msgs = await psub.fetch(5, timeout=1)
            except (NatsTimeout, NoRespondersError, APIError):
                continue
            for msg in msgs:
                assert msg.data not in {m.data for m in first[:5]}, f"acked {msg.data!r} delivered again"
                again.setdefault(msg.data, (time.monotonic() - delivered_at, msg.metadata.num_delivered))
                await msg.ack_sync(timeout=5)
        assert sorted(again) == [b"m%d" % i for i in range(5, 10)]
        for data, (after_s, _count) in again.items():
            assert after_s >= ACK_WAIT_S * 0.9, f"{data!r} delivered again {after_s:.2f}s later, before ack_wait"
        assert all(count >= 2 for _, count in again.values()), again  # counted as redeliveries

        quiet_until = time.monotonic() + ACK_WAIT_S + 1.0  # everything acked: nothing comes again
        while time.monotonic() < quiet_until:
            try:
                msgs = await psub.fetch(10, timeout=0.5)
            except (NatsTimeout, NoRespondersError, APIError):
                continue
            assert not msgs, f"{[m.data for m in msgs]} delivered after every message was acked"
        info = json.loads((await nc.request("$JS.API.CONSUMER.INFO.CF.D", b"", timeout=5)).data)
        assert info["num_ack_pending"] == 0 and info["ack_floor"]["stream_seq"] == 10, info
        assert info["cluster"]["leader"] != leader
        await nc.close()

    asyncio.run(scenario())
