"""Clustered JetStream through a plain nats-server 2.15.1 node (spec §6): a client connected to
the Go node creates an R3 stream, publishes right after the create reply, fetches and acks, gets
push deliveries across the route (the `@` convention), and uses a KV bucket — every API request
answered once."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import nats
import pytest

from appliance.testing.process import free_port
from tests.routes.conftest import Node, plain_config

pytestmark = pytest.mark.timeout(240)


def test_a_client_on_a_go_node_uses_r3_streams_consumers_and_kv(tmp_path: Path, js_cluster: list[Node]) -> None:
    port = free_port()
    path = tmp_path / "go.conf"
    path.write_text(plain_config("g1", client=free_port(), cluster_port=port,
                                 routes=[node.cluster_port for node in js_cluster]))
    text = path.read_text()
    client_port = int(text.split("listen=127.0.0.1:")[1].split("\n")[0])
    go = Node("g1", client_port, port, path, kind="go", log_dir=tmp_path).start()
    try:
        asyncio.run(_scenario(go))
    finally:
        go.stop()


async def _scenario(go: Node) -> None:
    nc = await nats.connect(go.url)
    answers: list[bytes] = []
    inbox = nc.new_inbox()

    async def on_answer(msg: nats.aio.msg.Msg) -> None:
        answers.append(msg.data)

    sub = await nc.subscribe(inbox, cb=on_answer)
    deadline = asyncio.get_running_loop().time() + 30
    while True:  # the routes from the Go node and our API interest are up
        await nc.publish("$JS.API.INFO", b"", reply=inbox)
        await nc.flush()
        await asyncio.sleep(0.3)
        if answers:
            break
        assert asyncio.get_running_loop().time() < deadline, "no JetStream answer through the Go node"
    answers.clear()
    await nc.publish("$JS.API.INFO", b"", reply=inbox)
    await nc.flush()
    await asyncio.sleep(1.0)
    assert len(answers) == 1, answers  # one answer, from the meta leader
    await sub.unsubscribe()
    js = nc.jetstream()
    await js.add_stream(name="G", subjects=["g.>"], num_replicas=3)
    ack = await js.publish("g.first", b"at once", timeout=5)  # right after the create reply
    assert ack.seq == 1
    for i in range(2, 11):
        await js.publish("g.x", b"%d" % i, timeout=5)
    pull = await js.pull_subscribe("g.>", durable="P", stream="G")
    got = []
    while len(got) < 10:
        for msg in await pull.fetch(10, timeout=5):
            got.append(msg.data)
            await msg.ack()
    assert got[0] == b"at once" and len(got) == 10
    pushed: list[str] = []
    done = asyncio.Event()

    async def on_push(msg: nats.aio.msg.Msg) -> None:
        pushed.append(msg.subject)
        await msg.ack()
        if len(pushed) == 10:
            done.set()

    await js.subscribe("g.>", durable="PUSH", stream="G", cb=on_push, manual_ack=True)
    await asyncio.wait_for(done.wait(), 15)
    assert pushed[0] == "g.first"  # the original subject, rewritten from the `@` form by the Go node
    kv = await js.create_key_value(bucket="CFG", replicas=3)
    await kv.put("color", b"blue")
    entry = await kv.get("color")
    assert entry.value == b"blue"
    info = json.loads((await nc.request("$JS.API.STREAM.INFO.G", b"", timeout=5)).data)
    assert info["state"]["messages"] == 10
    await nc.close()
