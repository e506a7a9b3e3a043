"""Restarts: the whole cluster stopped and started keeps every acknowledged message and consumer;
quorum loss stops writes and they resume when a peer returns."""

from __future__ import annotations

import asyncio
import json

import nats
import pytest
from nats.errors import NoRespondersError, TimeoutError as NatsTimeout
from nats.js.errors import NoStreamResponseError

from tests.jscluster.conftest import META_TIMEOUT_S, meta_leader
from tests.routes.conftest import Node, wait_until

pytestmark = pytest.mark.timeout(300)


async def info_everywhere(nodes: list[Node], name: str) -> list[dict[str, object]]:
    """The stream as each replica holds it (/jsz of every server that lists it)."""
    out = []
    for node in nodes:
        for account in node.monitor("/jsz?streams=true").get("account_details") or []:
            for stream in account.get("stream_detail") or []:
                if stream["name"] == name:
                    out.append(stream["state"])
    return out


def test_a_whole_cluster_restart_keeps_every_acknowledged_message(js_cluster: list[Node]) -> None:
    async def scenario() -> None:
        nc = await nats.connect(js_cluster[0].url)
        config = {"name": "K", "subjects": ["k.>"], "storage": "file", "num_replicas": 3}
        msg = await nc.request("$JS.API.STREAM.CREATE.K", json.dumps(config).encode(), timeout=5)
        assert "error" not in json.loads(msg.data)
        js = nc.jetstream()
        for i in range(200):
            await js.publish("k.x", b"%d" % i, timeout=5)
        await js.add_consumer("K", durable_name="D", ack_policy="explicit", num_replicas=3)
        sub = await js.pull_subscribe_bind("D", stream="K")
        for msg in await sub.fetch(50, timeout=5):
            await msg.ack_sync(timeout=5)
        await nc.close()

    asyncio.run(scenario())
    for node in js_cluster:
        node.stop()
    for node in js_cluster:
        node.start()
    wait_until(lambda: meta_leader(js_cluster), "a meta leader after the restart", META_TIMEOUT_S)

    async def after() -> None:
        nc = await nats.connect(js_cluster[1].url)
        js = nc.jetstream()
        deadline = asyncio.get_running_loop().time() + META_TIMEOUT_S
        while True:
            try:
                info = await js.stream_info("K")
                break
            except (NatsTimeout, NoRespondersError, NoStreamResponseError):
                assert asyncio.get_running_loop().time() < deadline
        assert info.state.messages == 200 and info.state.last_seq == 200
        states: list[dict[str, object]] = []
        while True:  # followers apply what they replay once they hear the leader's commit index
            states = await info_everywhere(js_cluster, "K")
            if len(states) == 3 and all(s["messages"] == 200 and s["last_seq"] == 200 for s in states):
                break
            assert asyncio.get_running_loop().time() < deadline, states
            await asyncio.sleep(0.1)
        consumer = await js.consumer_info("K", "D")
        assert consumer.ack_floor.stream_seq == 50 and consumer.num_pending == 150
        await nc.close()

    asyncio.run(after())


def test_quorum_loss_stops_writes_and_they_resume_when_a_peer_returns(js_cluster: list[Node]) -> None:
    async def scenario() -> None:
        nc = await nats.connect(js_cluster[0].url)
        config = {"name": "Q", "subjects": ["q.>"], "storage": "file", "num_replicas": 3}
        msg = await nc.request("$JS.API.STREAM.CREATE.Q", json.dumps(config).encode(), timeout=5)
        assert "error" not in json.loads(msg.data)
        js = nc.jetstream()
        await js.publish("q.x", b"before", timeout=5)
        for node in js_cluster[1:]:
            node.kill9()
        deadline = asyncio.get_running_loop().time() + META_TIMEOUT_S
        while True:  # the leader steps down once it misses its quorum: no responders, or no ack
            try:
                await js.publish("q.x", b"lost?", timeout=1)
            except (NatsTimeout, NoRespondersError, NoStreamResponseError):
                break
            assert asyncio.get_running_loop().time() < deadline, "writes went on without a quorum"
        deadline = asyncio.get_running_loop().time() + META_TIMEOUT_S
        info: dict = {}
        while True:  # a leaderless replica's own view, once it no longer names the dead leader
            try:  # silence while it still names it (that leader would answer), as nats-server
                info = json.loads((await nc.request("$JS.API.STREAM.INFO.Q", b"", timeout=3)).data)
            except NatsTimeout:
                info = {"error": "no answer"}
            if "error" not in info:
                break
            assert asyncio.get_running_loop().time() < deadline, info
            await asyncio.sleep(0.2)
        assert info["state"]["messages"] >= 1, info
        js_cluster[1].start()
        deadline = asyncio.get_running_loop().time() + META_TIMEOUT_S
        while True:
            try:
                ack = await js.publish("q.x", b"after", timeout=1)
                break
            except (NatsTimeout, NoRespondersError, NoStreamResponseError):
                assert asyncio.get_running_loop().time() < deadline, "writes did not resume"
        assert ack.seq >= 2
        await nc.close()

    asyncio.run(scenario())
