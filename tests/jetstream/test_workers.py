"""Two workers joined by the local fabric: JetStream runs on worker 0; clients on either worker
create streams, publish, and consume (pull and push) as if there were one server."""

from __future__ import annotations

import asyncio
from pathlib import Path

import nats
from nats.js.api import AckPolicy, ConsumerConfig

from appliance.config.options import ServerOptions
from appliance.jetstream.service import start_jetstream, start_relay
from appliance.testing.inproc_mesh import InProcessMesh


def test_stream_on_worker0_serves_clients_on_both_workers(tmp_path: Path) -> None:
    options = ServerOptions()
    options.jetstream.enabled = True
    options.jetstream.store_dir = str(tmp_path / "store")
    with InProcessMesh(2, options=options) as mesh:
        service = mesh.call(start_jetstream, mesh.servers[0])
        relay = mesh.call(start_relay, mesh.servers[1])
        try:
            asyncio.run(asyncio.wait_for(_scenario(mesh.url(0), mesh.url(1)), 30))
        finally:
            mesh.call(service.stop)
            mesh.call(relay.close)


async def _scenario(url0: str, url1: str) -> None:
    near = await nats.connect(url0, allow_reconnect=False)
    far = await nats.connect(url1, allow_reconnect=False)
    try:
        js_far, js_near = far.jetstream(timeout=5), near.jetstream(timeout=5)
        await js_far.add_stream(name="ORDERS", subjects=["orders.>"], storage="memory")
        for index in range(4):
            ack = await (js_far if index % 2 else js_near).publish("orders.new", str(index).encode())
            assert ack.seq == index + 1
        for js, name in ((js_near, "NEAR"), (js_far, "FAR")):
            await js.add_consumer("ORDERS", ConsumerConfig(durable_name=name, ack_policy=AckPolicy.EXPLICIT))
            sub = await js.pull_subscribe_bind(name, "ORDERS")
            msgs = await sub.fetch(4, timeout=5)
            assert [m.data for m in msgs] == [b"0", b"1", b"2", b"3"]
            for msg in msgs:
                await msg.ack_sync()
            assert (await js.consumer_info("ORDERS", name)).ack_floor.stream_seq == 4
        pushed = await js_far.subscribe("orders.>", durable="PUSH")
        assert (await pushed.next_msg(timeout=5)).data == b"0"
        kv = await js_far.create_key_value(bucket="cfg", storage="memory")
        await kv.put("k", b"v")
        assert (await (await js_near.key_value("cfg")).get("k")).value == b"v"
    finally:
        await near.close()
        await far.close()
