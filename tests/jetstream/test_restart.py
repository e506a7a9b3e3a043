"""Streams and consumers survive a restart: messages, dedupe window, delivered and ack floors,
pending acks and redelivery counts (clean stop in-process; kill -9 in test_kill9.py)."""

from __future__ import annotations

import json

from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig

from appliance.testing.inproc import InProcessServer

from .conftest import api, run_with


def test_state_survives_restart(store_dir: str) -> None:
    async def before(nc: Client, js: JetStreamContext) -> None:
        await js.add_stream(name="ORDERS", subjects=["orders.>"])
        for index in range(5):
            await js.publish("orders.new", f"m{index}".encode(), headers={"Nats-Msg-Id": f"id-{index}"})
        await js.add_consumer("ORDERS", ConsumerConfig(durable_name="D", ack_policy=AckPolicy.EXPLICIT))
        sub = await js.pull_subscribe_bind("D", "ORDERS")
        msgs = await sub.fetch(3, timeout=2)
        await msgs[0].ack_sync()
        await msgs[2].ack_sync()
        await msgs[1].nak()
        again = await sub.fetch(1, timeout=2)
        assert again[0].metadata.num_delivered == 2
        kv = await js.create_key_value(bucket="cfg")
        await kv.put("k", b"v")

    async def after(nc: Client, js: JetStreamContext) -> None:
        state = (await js.stream_info("ORDERS")).state
        assert (state.messages, state.first_seq, state.last_seq) == (5, 1, 5)
        dup = json.loads(
            (await nc.request("orders.new", b"x", headers={"Nats-Msg-Id": "id-3"}, timeout=5)).data
        )
        assert dup == {"stream": "ORDERS", "seq": 4, "duplicate": True}
        info = await api(nc, "$JS.API.CONSUMER.INFO.ORDERS.D")
        assert info["delivered"]["consumer_seq"] == 4 and info["delivered"]["stream_seq"] == 3
        assert info["ack_floor"] == {
            "consumer_seq": 1,
            "stream_seq": 1,
            "last_active": info["ack_floor"]["last_active"],
        }
        assert info["num_ack_pending"] == 1 and info["num_redelivered"] == 1 and info["num_pending"] == 2
        sub = await js.pull_subscribe_bind("D", "ORDERS")
        nxt = await sub.fetch(1, timeout=2)
        assert nxt[0].metadata.sequence.stream == 4
        kv = await js.key_value("cfg")
        assert (await kv.get("k")).value == b"v"

    with InProcessServer(jetstream_dir=store_dir) as server:
        run_with(server.url, before)
    with InProcessServer(jetstream_dir=store_dir) as server:
        run_with(server.url, after)


def test_deleted_stream_stays_deleted(store_dir: str) -> None:
    async def before(nc: Client, js: JetStreamContext) -> None:
        await js.add_stream(name="GONE", subjects=["gone"])
        await js.add_stream(name="KEPT", subjects=["kept"], storage="memory")
        await js.publish("gone", b"x")
        await js.publish("kept", b"x")
        await js.delete_stream("GONE")

    async def after(nc: Client, js: JetStreamContext) -> None:
        names = await api(nc, "$JS.API.STREAM.NAMES")
        assert names["streams"] == ["KEPT"]
        assert (await js.stream_info("KEPT")).state.messages == 0  # memory streams restart empty

    with InProcessServer(jetstream_dir=store_dir) as server:
        run_with(server.url, before)
    with InProcessServer(jetstream_dir=store_dir) as server:
        run_with(server.url, after)


def test_ephemeral_consumers_end_with_the_server(store_dir: str) -> None:
    async def before(nc: Client, js: JetStreamContext) -> None:
        await js.add_stream(name="E", subjects=["e"])
        await api(nc, "$JS.API.CONSUMER.CREATE.E.EPH", b'{"stream_name":"E","config":{"name":"EPH"}}')
        await js.add_consumer("E", ConsumerConfig(durable_name="DUR", ack_policy=AckPolicy.EXPLICIT))

    async def after(nc: Client, js: JetStreamContext) -> None:
        assert (await api(nc, "$JS.API.CONSUMER.NAMES.E"))["consumers"] == ["DUR"]

    with InProcessServer(jetstream_dir=store_dir) as server:
        run_with(server.url, before)
    with InProcessServer(jetstream_dir=store_dir) as server:
        run_with(server.url, after)
