"""Retention (interest), max_age expiry, max_deliver, backoff, max_ack_pending, headers_only,
replay original, deliver by start time, and Direct Get in all its forms."""

from __future__ import annotations

import asyncio
import json
import time

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, ReplayPolicy

from appliance.testing.inproc import InProcessServer

from .conftest import api, run_with


async def _until(predicate, timeout_s: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not await predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)


def test_interest_retention_drops_messages_every_consumer_acked(js_server: InProcessServer) -> None:
    async def scenario(nc: Client, js: JetStreamContext) -> None:
        await api(nc, "$JS.API.STREAM.CREATE.I", b'{"name":"I","subjects":["i.>"],"retention":"interest"}')
        await js.publish("i.lost", b"nobody listens")
        assert (await js.stream_info("I")).state.messages == 0
        for name in ("A", "B"):
            await js.add_consumer("I", ConsumerConfig(durable_name=name, ack_policy=AckPolicy.EXPLICIT))
        await js.publish("i.x", b"kept")
        first = await js.pull_subscribe_bind("A", "I")
        await (await first.fetch(1, timeout=2))[0].ack_sync()
        assert (await js.stream_info("I")).state.messages == 1  # B has not acked yet
        second = await js.pull_subscribe_bind("B", "I")
        await (await second.fetch(1, timeout=2))[0].ack_sync()
        assert (await js.stream_info("I")).state.messages == 0

    run_with(js_server.url, scenario)


def test_max_age_expires_messages(js_server: InProcessServer) -> None:
    async def scenario(nc: Client, js: JetStreamContext) -> None:
        await js.add_stream(name="AGE", subjects=["age"], max_age=0.3)
        await js.publish("age", b"short lived")

        async def gone() -> bool:
            return (await js.stream_info("AGE")).state.messages == 0

        await _until(gone)

    run_with(js_server.url, scenario)


def test_max_deliver_backoff_and_max_ack_pending(js_server: InProcessServer) -> None:
    async def scenario(nc: Client, js: JetStreamContext) -> None:
        await js.add_stream(name="R", subjects=["r.>"])
        for index in range(3):
            await js.publish("r.x", str(index).encode())
        await js.add_consumer(
            "R",
            ConsumerConfig(
                durable_name="MD",
                ack_policy=AckPolicy.EXPLICIT,
                max_deliver=3,
                backoff=[0.1, 0.2],
                max_ack_pending=1,
            ),
        )
        sub = await js.pull_subscribe_bind("MD", "R")
        # max_ack_pending 1 holds "1" and "2" back; the request (nats-py: no_wait, held while
        # max_ack_pending is reached, as nats-server holds it) gets the backoff redeliveries of "0"
        first = await sub.fetch(3, timeout=1)
        assert [(m.data, m.metadata.num_delivered) for m in first] == [(b"0", 1), (b"0", 2), (b"0", 3)]
        after_give_up = await sub.fetch(1, timeout=3)  # max_deliver reached: the consumer moves on
        assert after_give_up[0].data == b"1"

    run_with(js_server.url, scenario)


def test_headers_only_and_by_start_time_and_replay_original(js_server: InProcessServer) -> None:
    async def scenario(nc: Client, js: JetStreamContext) -> None:
        await js.add_stream(name="H", subjects=["h.>"])
        await js.publish("h.a", b"12345", headers={"X-Tag": "one"})
        await asyncio.sleep(0.05)  # the two messages must get distinct timestamps
        boundary = time.time()
        await asyncio.sleep(0.05)
        await js.publish("h.b", b"later")
        await js.add_consumer(
            "H", ConsumerConfig(durable_name="HO", headers_only=True, ack_policy=AckPolicy.NONE)
        )
        msg = (await (await js.pull_subscribe_bind("HO", "H")).fetch(1, timeout=2))[0]
        assert msg.data == b"" and msg.headers == {"X-Tag": "one", "Nats-Msg-Size": "5"}
        start = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(boundary)) + f".{int(boundary % 1 * 1e9):09d}Z"
        created = await api(
            nc,
            "$JS.API.CONSUMER.CREATE.H.T",
            json.dumps(
                {
                    "stream_name": "H",
                    "config": {
                        "name": "T",
                        "deliver_policy": "by_start_time",
                        "opt_start_time": start,
                        "ack_policy": "none",
                    },
                }
            ).encode(),
        )
        assert created["num_pending"] == 1
        await js.add_consumer(
            "H",
            ConsumerConfig(
                durable_name="ORIG",
                replay_policy=ReplayPolicy.ORIGINAL,
                deliver_policy=DeliverPolicy.ALL,
                ack_policy=AckPolicy.NONE,
            ),
        )
        replayed = await (await js.pull_subscribe_bind("ORIG", "H")).fetch(2, timeout=3)
        assert [m.data for m in replayed][:1] == [b"12345"]

    run_with(js_server.url, scenario)


def test_direct_get_forms(js_server: InProcessServer) -> None:
    async def scenario(nc: Client, js: JetStreamContext) -> None:
        await api(nc, "$JS.API.STREAM.CREATE.D", b'{"name":"D","subjects":["d.>"],"allow_direct":true}')
        for subject, data in (("d.a", b"1"), ("d.a", b"2"), ("d.b", b"3")):
            await js.publish(subject, data)
        by_seq = await nc.request("$JS.API.DIRECT.GET.D", b'{"seq":1}', timeout=2)
        assert by_seq.data == b"1" and by_seq.headers is not None
        assert (by_seq.headers["Nats-Subject"], by_seq.headers["Nats-Sequence"]) == ("d.a", "1")
        last = await nc.request("$JS.API.DIRECT.GET.D.d.a", b"", timeout=2)
        assert last.data == b"2"
        missing = await nc.request("$JS.API.DIRECT.GET.D", b'{"seq":99}', timeout=2)
        assert missing.headers is not None and missing.headers["Status"] == "404"
        empty = await nc.request("$JS.API.DIRECT.GET.D", b"", timeout=2)
        assert empty.headers is not None and empty.headers["Description"] == "Empty Request"
        inbox = nc.new_inbox()
        batch: asyncio.Queue[Msg] = asyncio.Queue()
        await nc.subscribe(inbox, cb=batch.put)
        await nc.publish("$JS.API.DIRECT.GET.D", b'{"multi_last":["d.>"],"batch":10}', reply=inbox)
        got = [await asyncio.wait_for(batch.get(), 2) for _ in range(3)]
        assert [m.data for m in got[:2]] == [b"2", b"3"]
        assert got[2].headers is not None and got[2].headers["Status"] == "204"
        assert got[2].headers["Nats-UpTo-Sequence"] == "3"
        await nc.publish("$JS.API.DIRECT.GET.D", b'{"seq":1,"batch":2}', reply=inbox)
        got = [await asyncio.wait_for(batch.get(), 2) for _ in range(3)]
        assert [m.headers["Nats-Num-Pending"] for m in got[:2] if m.headers] == ["2", "1"]
        assert got[2].headers is not None and got[2].headers["Nats-Last-Sequence"] == "2"

    run_with(js_server.url, scenario)


def test_per_message_ttl(js_server: InProcessServer) -> None:
    async def scenario(nc: Client, js: JetStreamContext) -> None:
        await api(
            nc, "$JS.API.STREAM.CREATE.TTL", b'{"name":"TTL","subjects":["ttl.>"],"allow_msg_ttl":true}'
        )
        await js.publish("ttl.short", b"x", headers={"Nats-TTL": "1s"})
        await js.publish("ttl.kept", b"y", headers={"Nats-TTL": "never"})
        bad = json.loads((await nc.request("ttl.bad", b"z", headers={"Nats-TTL": "soon"}, timeout=5)).data)
        assert bad["error"]["err_code"] == 10165

        async def expired() -> bool:
            return (await js.stream_info("TTL")).state.messages == 1

        await _until(expired)
        await api(nc, "$JS.API.STREAM.CREATE.OFF", b'{"name":"OFF","subjects":["off"]}')
        off = json.loads((await nc.request("off", b"z", headers={"Nats-TTL": "1s"}, timeout=5)).data)
        assert off["error"]["err_code"] == 10166

    run_with(js_server.url, scenario)
