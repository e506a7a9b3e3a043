"""The meta group over the routes: it forms on the seed's three servers, every server agrees on
its leader, and the JetStream API answers once, from the right server."""

from __future__ import annotations

import asyncio
import json
import urllib.error

import nats
import pytest

from tests.jscluster.conftest import META_TIMEOUT_S, meta_leader
from tests.routes.conftest import Node, wait_until

pytestmark = pytest.mark.timeout(180)


def test_the_meta_group_forms_with_every_server(js_cluster: list[Node]) -> None:
    leader = meta_leader(js_cluster)
    assert leader in {node.name for node in js_cluster}

    def everyone_in() -> bool:
        # a server that started late (a loaded host) is added by the leader a moment later
        metas = [node.monitor("/jsz")["meta_cluster"] for node in js_cluster]
        return all(meta["cluster_size"] == 3 for meta in metas)

    wait_until(everyone_in, "every server counting three voters", META_TIMEOUT_S)
    for node in js_cluster:
        meta = node.monitor("/jsz")["meta_cluster"]
        assert meta["name"] == "C1"
        assert meta["quorum_needed"] == 2


async def _request(url: str, subject: str, body: dict[str, object] | None = None, timeout: float = 5.0) -> dict:
    nc = await nats.connect(url)
    try:
        payload = json.dumps(body).encode() if body is not None else b""
        msg = await nc.request(subject, payload, timeout=timeout)
        return json.loads(msg.data)
    finally:
        await nc.close()


def test_streams_are_created_placed_and_used_from_any_server(js_cluster: list[Node]) -> None:
    async def scenario() -> None:
        urls = [node.url for node in js_cluster]
        created = []
        for index in range(3):
            config = {"name": f"S{index}", "subjects": [f"s{index}.>"], "storage": "file", "num_replicas": 1}
            reply = await _request(urls[index], f"$JS.API.STREAM.CREATE.S{index}", config)
            assert "error" not in reply, reply
            created.append(reply)
        # each publish reaches its stream from any server, once
        for url in urls:
            nc = await nats.connect(url)
            js = nc.jetstream()
            for index in range(3):
                ack = await js.publish(f"s{index}.x", b"hello", timeout=5)
                assert ack.stream == f"S{index}"
            await nc.close()
        names = await _request(urls[1], "$JS.API.STREAM.NAMES")
        assert sorted(names["streams"]) == ["S0", "S1", "S2"]
        for index in range(3):
            info = await _request(urls[2], f"$JS.API.STREAM.INFO.S{index}")
            assert info["state"]["messages"] == 3, info

    asyncio.run(scenario())


def test_r3_stream_replicates_and_acks_after_quorum(js_cluster: list[Node]) -> None:
    async def scenario() -> None:
        url = js_cluster[0].url
        config = {"name": "R3", "subjects": ["r3.>"], "storage": "file", "num_replicas": 3}
        reply = await _request(url, "$JS.API.STREAM.CREATE.R3", config)
        assert "error" not in reply, reply
        nc = await nats.connect(js_cluster[1].url)
        js = nc.jetstream()
        for i in range(100):
            ack = await js.publish("r3.a", f"m{i}".encode(), timeout=5)
            assert ack.seq == i + 1
        await nc.close()
        info = await _request(js_cluster[2].url, "$JS.API.STREAM.INFO.R3")
        assert info["state"]["messages"] == 100

    asyncio.run(scenario())


def test_r3_pull_consumer_delivers_and_acks_from_any_server(js_cluster: list[Node]) -> None:
    async def scenario() -> None:
        config = {"name": "Q", "subjects": ["q.>"], "storage": "file", "num_replicas": 3}
        reply = await _request(js_cluster[2].url, "$JS.API.STREAM.CREATE.Q", config)
        assert "error" not in reply, reply
        nc = await nats.connect(js_cluster[0].url)
        js = nc.jetstream()
        for i in range(20):
            await js.publish("q.a", f"m{i}".encode(), timeout=5)
        consumer = {"stream_name": "Q", "config": {"durable_name": "D", "ack_policy": "explicit",
                                                   "num_replicas": 3}}
        reply = await _request(js_cluster[1].url, "$JS.API.CONSUMER.DURABLE.CREATE.Q.D", consumer)
        assert "error" not in reply, reply
        sub = await js.pull_subscribe_bind("D", stream="Q")
        got = []
        deadline = asyncio.get_running_loop().time() + 10
        while len(got) < 20:
            try:
                msgs = await sub.fetch(10, timeout=5)
            except nats.js.errors.ServiceUnavailableError:
                # the consumer leader's MSG.NEXT interest may reach this server a moment after the
                # create answer came back through another one (nats-server has the same window)
                assert asyncio.get_running_loop().time() < deadline, "no consumer leader interest"
                await asyncio.sleep(0.1)
                continue
            for msg in msgs:
                got.append(msg.data)
                await msg.ack_sync(timeout=5)
        assert got == [f"m{i}".encode() for i in range(20)]
        await nc.close()
        info = await _request(js_cluster[2].url, "$JS.API.CONSUMER.INFO.Q.D")
        assert info["num_ack_pending"] == 0 and info["delivered"]["stream_seq"] == 20, info
        assert info["ack_floor"]["stream_seq"] == 20, info

    asyncio.run(scenario())


def test_without_a_meta_leader_every_server_answers_10008(js_cluster: list[Node]) -> None:
    async def scenario() -> None:
        survivor = js_cluster[0]
        for node in js_cluster[1:]:
            node.kill9()
        wait_until(lambda: not survivor.monitor("/jsz")["meta_cluster"].get("leader"), "no meta leader",
                   META_TIMEOUT_S)
        reply = await _request(survivor.url, "$JS.API.INFO")
        assert reply["error"] == {"code": 503, "err_code": 10008,
                                  "description": "JetStream system temporarily unavailable"}
        try:
            survivor.monitor("/healthz")
            raise AssertionError("/healthz must fail without a meta leader")
        except urllib.error.HTTPError as exc:
            assert exc.code == 503
            body = json.loads(exc.read())
            assert body["error"] == "JetStream has not established contact with a meta leader", body

    asyncio.run(scenario())


def test_r3_stream_update_purge_msg_delete_and_delete(js_cluster: list[Node]) -> None:
    async def scenario() -> None:
        urls = [node.url for node in js_cluster]
        config = {"name": "U", "subjects": ["u.a"], "storage": "file", "num_replicas": 3}
        assert "error" not in await _request(urls[0], "$JS.API.STREAM.CREATE.U", config)
        config["subjects"] = ["u.a", "u.b"]
        reply = await _request(urls[1], "$JS.API.STREAM.UPDATE.U", config)
        assert reply["config"]["subjects"] == ["u.a", "u.b"], reply
        nc = await nats.connect(urls[2])
        js = nc.jetstream()
        for subject in ("u.a", "u.b", "u.a", "u.b"):
            await js.publish(subject, b"x", timeout=5)
        reply = await _request(urls[0], "$JS.API.STREAM.MSG.DELETE.U", {"seq": 2})
        assert reply.get("success") is True, reply
        reply = await _request(urls[1], "$JS.API.STREAM.PURGE.U", {"filter": "u.a"})
        assert reply == {"type": "io.nats.jetstream.api.v1.stream_purge_response", "success": True, "purged": 2}
        info = await _request(urls[2], "$JS.API.STREAM.INFO.U")
        assert info["state"]["messages"] == 1 and info["state"]["last_seq"] == 4, info
        reply = await _request(urls[2], "$JS.API.STREAM.DELETE.U")
        assert reply.get("success") is True, reply
        names = await _request(urls[0], "$JS.API.STREAM.NAMES")
        assert names["streams"] in (None, []), names
        missing = await _request(urls[1], "$JS.API.STREAM.INFO.U")
        assert missing["error"]["err_code"] == 10059
        await nc.close()

    asyncio.run(scenario())
