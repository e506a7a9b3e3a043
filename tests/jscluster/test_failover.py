"""Failover of an R3 stream: kill -9 of the stream's leader under publishes; a new leader takes
them, nothing acknowledged is lost or stored twice (Nats-Msg-Id), and the killed server rejoins."""

from __future__ import annotations

import asyncio
import json
import time

import nats
import pytest
from nats.errors import NoRespondersError, TimeoutError as NatsTimeout
from nats.js.errors import APIError, NoStreamResponseError

from tests.jscluster.conftest import META_TIMEOUT_S, meta_leader
from tests.routes.conftest import Node, wait_until

pytestmark = pytest.mark.timeout(240)


async def stream_leader(nc: nats.NATS, name: str) -> str:
    msg = await nc.request(f"$JS.API.STREAM.INFO.{name}", b"", timeout=3)
    return str(json.loads(msg.data)["cluster"]["leader"])


async def publish_until_acked(js: object, subject: str, data: bytes, msg_id: str, deadline_s: float) -> int:
    while True:
        try:
            ack = await js.publish(subject, data, timeout=1, headers={"Nats-Msg-Id": msg_id})  # type: ignore[attr-defined]
            return int(ack.seq)
        except (NatsTimeout, NoRespondersError, NoStreamResponseError, APIError):
            assert time.monotonic() < deadline_s, f"{msg_id} never acknowledged"
            await asyncio.sleep(0.05)


def test_killing_the_stream_leader_loses_no_acknowledged_message(js_cluster: list[Node]) -> None:
    by_name = {node.name: node for node in js_cluster}

    async def scenario() -> None:
        config = {"name": "F", "subjects": ["f.>"], "storage": "file", "num_replicas": 3}
        client_node = js_cluster[0]
        nc = await nats.connect(client_node.url, max_reconnect_attempts=-1)
        msg = await nc.request("$JS.API.STREAM.CREATE.F", json.dumps(config).encode(), timeout=5)
        assert "error" not in json.loads(msg.data)
        js = nc.jetstream()
        acked: dict[str, int] = {}
        deadline = time.monotonic() + 120
        for i in range(50):
            acked[f"id-{i}"] = await publish_until_acked(js, "f.x", b"%d" % i, f"id-{i}", deadline)
        leader = await stream_leader(nc, "F")
        victim = by_name[leader]
        if victim is client_node:  # keep the client's server alive: move the client
            await nc.close()
            client_node = next(n for n in js_cluster if n is not victim)
            nc = await nats.connect(client_node.url, max_reconnect_attempts=-1)
            js = nc.jetstream()
        victim.kill9()
        for i in range(50, 100):
            acked[f"id-{i}"] = await publish_until_acked(js, "f.x", b"%d" % i, f"id-{i}", deadline)
        new_leader = await stream_leader(nc, "F")
        assert new_leader != leader
        victim.start()
        survivors = [n for n in js_cluster]
        wait_until(lambda: meta_leader(survivors), "a meta leader after the restart", META_TIMEOUT_S)
        info = json.loads((await nc.request("$JS.API.STREAM.INFO.F", b"", timeout=5)).data)
        assert info["state"]["messages"] == 100, info
        assert sorted(acked.values()) == list(range(1, 101))
        await nc.close()

    asyncio.run(scenario())
