"""+NXT, max_waiting, multiple filter subjects, and push flow control through nats-py."""

from __future__ import annotations

import asyncio
import json

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig

from appliance import limits
from appliance.testing.inproc import InProcessServer

from .conftest import run_with


def test_ack_next_delivers_to_the_ack_reply(js_server: InProcessServer) -> None:
    async def scenario(nc: Client, js: JetStreamContext) -> None:
        await js.add_stream(name="N", subjects=["n"])
        for index in range(3):
            await js.publish("n", str(index).encode())
        await js.add_consumer("N", ConsumerConfig(durable_name="C", ack_policy=AckPolicy.EXPLICIT))
        first = (await (await js.pull_subscribe_bind("C", "N")).fetch(1, timeout=2))[0]
        inbox = nc.new_inbox()
        following: asyncio.Queue[Msg] = asyncio.Queue()
        await nc.subscribe(inbox, cb=following.put)
        await nc.publish(first.reply, b'+NXT {"batch":2}', reply=inbox)
        got = [await asyncio.wait_for(following.get(), 5) for _ in range(2)]
        assert [m.data for m in got] == [b"1", b"2"]
        info = await js.consumer_info("N", "C")
        assert info.ack_floor.stream_seq == 1 and info.num_ack_pending == 2

    run_with(js_server.url, scenario)


def test_max_waiting_and_multiple_filters(js_server: InProcessServer) -> None:
    async def scenario(nc: Client, js: JetStreamContext) -> None:
        await js.add_stream(name="M", subjects=["m.>"])
        for subject in ("m.a", "m.b", "m.c", "m.a"):
            await js.publish(subject, subject.encode())
        await nc.request(
            "$JS.API.CONSUMER.CREATE.M.W",
            json.dumps(
                {
                    "stream_name": "M",
                    "config": {
                        "durable_name": "W",
                        "ack_policy": "explicit",
                        "max_waiting": 1,
                        "filter_subjects": ["m.a", "m.c"],
                    },
                }
            ).encode(),
            timeout=5,
        )
        info = await js.consumer_info("M", "W")
        assert info.num_pending == 3
        inbox = nc.new_inbox()
        answers: asyncio.Queue[Msg] = asyncio.Queue()
        await nc.subscribe(inbox, cb=answers.put)
        subject = "$JS.API.CONSUMER.MSG.NEXT.M.W"
        await nc.publish(subject, b'{"batch":3,"expires":2000000000}', reply=inbox)
        got = [await asyncio.wait_for(answers.get(), 5) for _ in range(3)]
        assert [m.subject for m in got] == ["m.a", "m.c", "m.a"]
        await nc.publish(subject, b'{"batch":1,"expires":2000000000}', reply=inbox)
        await nc.publish(subject, b'{"batch":1,"expires":2000000000}', reply=inbox)
        refused = await asyncio.wait_for(answers.get(), 5)
        assert refused.headers is not None and (
            refused.headers["Status"],
            refused.headers["Description"],
        ) == ("409", "Exceeded MaxWaiting")

    run_with(js_server.url, scenario)


def test_push_flow_control_is_answered_and_delivery_resumes(js_server: InProcessServer) -> None:
    total = limits.JS_FLOW_CONTROL_MSGS * 2 + 10

    async def scenario(nc: Client, js: JetStreamContext) -> None:
        await js.add_stream(name="FC", subjects=["fc"])
        acks = (
            [await js.publish_async("fc", b"x") for _ in range(total)]
            if hasattr(js, "publish_async")
            else None
        )
        if acks is None:
            for _ in range(total):
                await js.publish("fc", b"x")
        else:
            await asyncio.gather(*acks)
        received = 0
        done = asyncio.Event()
        fc_answers = await nc.subscribe("$JS.FC.>")  # what the client sends back to the consumer

        async def on_msg(msg: Msg) -> None:
            nonlocal received
            received += 1
            if received == total:
                done.set()

        await js.subscribe(
            "fc",
            cb=on_msg,
            flow_control=True,
            idle_heartbeat=1.0,
            manual_ack=True,
            config=ConsumerConfig(ack_policy=AckPolicy.NONE),
        )
        await asyncio.wait_for(done.wait(), 20)
        assert fc_answers.pending_msgs >= 2  # paused twice, resumed twice

    run_with(js_server.url, scenario)
