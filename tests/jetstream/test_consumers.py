"""Consumers through nats-py and raw requests: create forms, pull statuses, acks, redelivery, push."""

from __future__ import annotations

import asyncio
import json

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from appliance.testing.inproc import InProcessServer

from .conftest import api, run_with


async def _orders(js: JetStreamContext, count: int = 5) -> None:
    await js.add_stream(name="ORDERS", subjects=["orders.>"])
    for index in range(count):
        await js.publish("orders.a" if index % 2 else "orders.b", f"m{index}".encode())


def test_create_forms_and_errors(js_server: InProcessServer) -> None:
    async def scenario(nc: Client, js: JetStreamContext) -> None:
        await _orders(js)
        created = await api(
            nc,
            "$JS.API.CONSUMER.CREATE.ORDERS.DUR1",
            b'{"stream_name":"ORDERS","config":{"durable_name":"DUR1","ack_policy":"explicit"}}',
        )
        assert created["config"]["max_waiting"] == 512 and created["config"]["ack_wait"] == 30_000_000_000
        assert created["num_pending"] == 5 and created["delivered"] == {"consumer_seq": 0, "stream_seq": 0}
        filtered = await api(
            nc,
            "$JS.API.CONSUMER.CREATE.ORDERS.DUR2.orders.a",
            b'{"stream_name":"ORDERS",'
            b'"config":{"durable_name":"DUR2","filter_subject":"orders.a","ack_policy":"explicit"}}',
        )
        assert filtered["num_pending"] == 2
        legacy = await api(
            nc,
            "$JS.API.CONSUMER.DURABLE.CREATE.ORDERS.LEG1",
            b'{"stream_name":"ORDERS","config":{"durable_name":"LEG1","ack_policy":"explicit"}}',
        )
        assert legacy["name"] == "LEG1"
        ephemeral = await api(
            nc,
            "$JS.API.CONSUMER.CREATE.ORDERS",
            b'{"stream_name":"ORDERS","config":{"ack_policy":"none","deliver_subject":"push.eph"}}',
        )
        assert len(ephemeral["name"]) == 8 and ephemeral["config"]["inactive_threshold"] == 5_000_000_000
        errors = [
            (
                "$JS.API.CONSUMER.CREATE.ORDERS.DUR3.orders.a",
                {"durable_name": "DUR3", "filter_subject": "orders.b"},
                10131,
            ),
            ("$JS.API.CONSUMER.CREATE.ORDERS", {"durable_name": "X"}, 10020),
            ("$JS.API.CONSUMER.CREATE.ORDERS.E1", {"name": "E1", "durable_name": "E2"}, 10017),
            (
                "$JS.API.CONSUMER.CREATE.ORDERS.E4",
                {"name": "E4", "deliver_policy": "by_start_sequence"},
                10094,
            ),
            (
                "$JS.API.CONSUMER.CREATE.ORDERS.P",
                {"durable_name": "P", "deliver_subject": "x.y", "max_waiting": 5},
                10080,
            ),
            (
                "$JS.API.CONSUMER.CREATE.ORDERS.H",
                {"durable_name": "H", "idle_heartbeat": 50_000_000, "deliver_subject": "x.h"},
                10083,
            ),
            (
                "$JS.API.CONSUMER.CREATE.ORDERS.F",
                {"durable_name": "F", "flow_control": True, "deliver_subject": "x.f"},
                10108,
            ),
            ("$JS.API.CONSUMER.CREATE.NOSTREAM.C", {"durable_name": "C"}, 10059),
        ]
        for subject, config, err_code in errors:
            stream = subject.split(".")[4]
            body = json.dumps({"stream_name": stream, "config": config}).encode()
            assert (await api(nc, subject, body))["error"]["err_code"] == err_code, subject
        exists = await api(
            nc,
            "$JS.API.CONSUMER.CREATE.ORDERS.DUR1",
            b'{"stream_name":"ORDERS","action":"create",'
            b'"config":{"durable_name":"DUR1","ack_policy":"explicit","max_deliver":3}}',
        )
        assert exists["error"]["err_code"] == 10148
        missing = await api(
            nc,
            "$JS.API.CONSUMER.CREATE.ORDERS.NEWC",
            b'{"stream_name":"ORDERS","action":"update",'
            b'"config":{"durable_name":"NEWC","ack_policy":"explicit"}}',
        )
        assert missing["error"]["err_code"] == 10149
        names = await api(nc, "$JS.API.CONSUMER.NAMES.ORDERS")
        assert names["consumers"] == sorted(["DUR1", "DUR2", "LEG1", ephemeral["name"]])
        nostream = await api(nc, "$JS.API.CONSUMER.NAMES.NOPE")
        assert nostream["consumers"] == [] and nostream["error"]["err_code"] == 10059
        assert (await api(nc, "$JS.API.CONSUMER.DELETE.ORDERS.LEG1"))["success"] is True
        assert (await api(nc, "$JS.API.CONSUMER.DELETE.ORDERS.LEG1"))["error"]["err_code"] == 10014

    run_with(js_server.url, scenario)


def test_workqueue_rules_and_removal_on_ack(js_server: InProcessServer) -> None:
    async def scenario(nc: Client, js: JetStreamContext) -> None:
        await api(
            nc, "$JS.API.STREAM.CREATE.WQ", b'{"name":"WQ","subjects":["wq.>"],"retention":"workqueue"}'
        )
        first = await api(
            nc,
            "$JS.API.CONSUMER.CREATE.WQ.A",
            b'{"stream_name":"WQ","config":{"durable_name":"A","ack_policy":"explicit"}}',
        )
        assert "error" not in first
        second = await api(
            nc,
            "$JS.API.CONSUMER.CREATE.WQ.B",
            b'{"stream_name":"WQ","config":{"durable_name":"B","ack_policy":"explicit"}}',
        )
        assert second["error"]["err_code"] == 10099
        none = await api(
            nc,
            "$JS.API.CONSUMER.CREATE.WQ.C",
            b'{"stream_name":"WQ","config":{"durable_name":"C","ack_policy":"none"}}',
        )
        assert none["error"]["err_code"] == 10084
        for index in range(3):
            await js.publish("wq.x", str(index).encode())
        sub = await js.pull_subscribe_bind("A", "WQ")
        for msg in await sub.fetch(3, timeout=2):
            await msg.ack_sync()
        assert (await js.stream_info("WQ")).state.messages == 0

    run_with(js_server.url, scenario)


def test_pull_statuses(js_server: InProcessServer) -> None:
    async def scenario(nc: Client, js: JetStreamContext) -> None:
        await _orders(js, 2)
        await js.add_consumer("ORDERS", ConsumerConfig(durable_name="D", ack_policy=AckPolicy.EXPLICIT))
        inbox = nc.new_inbox()
        received: asyncio.Queue[Msg] = asyncio.Queue()
        await nc.subscribe(inbox, cb=received.put)
        subject = "$JS.API.CONSUMER.MSG.NEXT.ORDERS.D"
        await nc.publish(subject, b'{"batch":5,"no_wait":true}', reply=inbox)
        first, second, status = [await asyncio.wait_for(received.get(), 5) for _ in range(3)]
        assert (first.subject, first.data) == ("orders.b", b"m0")
        assert first.reply.startswith("$JS.ACK.ORDERS.D.1.1.1.") and first.reply.endswith(".1")
        assert second.reply.split(".")[4:7] == ["1", "2", "2"]
        assert (
            status.headers is not None and status.headers["Status"] == "404"
        )  # no_wait ends with 404 even after some messages
        await nc.publish(subject, b'{"batch":1,"no_wait":true}', reply=inbox)
        empty = await asyncio.wait_for(received.get(), 5)
        assert empty.headers is not None and (empty.headers["Status"], empty.headers["Description"]) == (
            "404",
            "No Messages",
        )
        await nc.publish(subject, b'{"batch":10,"expires":400000000,"idle_heartbeat":150000000}', reply=inbox)
        beat = await asyncio.wait_for(received.get(), 5)
        assert beat.headers is not None and beat.headers["Status"] == "100"
        assert beat.headers["Nats-Last-Consumer"] == "2" and beat.headers["Nats-Last-Stream"] == "2"
        while True:
            timeout = await asyncio.wait_for(received.get(), 5)
            assert timeout.headers is not None
            if timeout.headers["Status"] != "100":
                break
        assert timeout.headers["Status"] == "408" and timeout.headers["Nats-Pending-Messages"] == "10"
        await js.publish("orders.big", b"x" * 100)
        await nc.publish(subject, b'{"batch":10,"max_bytes":10,"expires":1000000000}', reply=inbox)
        too_big = await asyncio.wait_for(received.get(), 5)
        assert too_big.headers is not None and too_big.headers["Status"] == "409"
        assert too_big.headers["Description"] == "Message Size Exceeds MaxBytes"
        hb = await nc.request(
            subject, b'{"batch":1,"expires":100000000,"idle_heartbeat":90000000}', timeout=5
        )
        assert hb.headers is not None and hb.headers["Status"] == "400"
        import nats.errors

        with pytest.raises(nats.errors.NoRespondersError):
            await nc.request("$JS.API.CONSUMER.MSG.NEXT.ORDERS.NOPE", b"", timeout=2)

    run_with(js_server.url, scenario)


def test_acks_nak_term_progress_and_redelivery(js_server: InProcessServer) -> None:
    async def scenario(nc: Client, js: JetStreamContext) -> None:
        await _orders(js, 4)
        await js.add_consumer(
            "ORDERS",
            ConsumerConfig(durable_name="D", ack_policy=AckPolicy.EXPLICIT, ack_wait=0.5, max_deliver=3),
        )
        sub = await js.pull_subscribe_bind("D", "ORDERS")
        msgs = await sub.fetch(4, timeout=2)
        await msgs[0].ack_sync()
        await msgs[1].nak()
        await msgs[2].term()
        await msgs[3].in_progress()
        info = await js.consumer_info("ORDERS", "D")
        assert info.ack_floor.stream_seq == 1 and info.num_ack_pending >= 2
        again = await sub.fetch(1, timeout=2)
        assert again[0].metadata.sequence.stream == 2 and again[0].metadata.num_delivered == 2
        assert again[0].metadata.sequence.consumer == 5
        await again[0].ack_sync()
        later = await sub.fetch(1, timeout=3)
        assert later[0].metadata.sequence.stream == 4 and later[0].metadata.num_delivered == 2
        await later[0].ack_sync()
        info = await js.consumer_info("ORDERS", "D")
        assert info.num_ack_pending == 0 and info.ack_floor.stream_seq == 4
        assert info.delivered.consumer_seq == 6

    run_with(js_server.url, scenario)


def test_nak_with_delay_and_ack_all(js_server: InProcessServer) -> None:
    async def scenario(nc: Client, js: JetStreamContext) -> None:
        await _orders(js, 3)
        await js.add_consumer("ORDERS", ConsumerConfig(durable_name="ALL", ack_policy=AckPolicy.ALL))
        sub = await js.pull_subscribe_bind("ALL", "ORDERS")
        msgs = await sub.fetch(3, timeout=2)
        await msgs[1].ack_sync()
        info = await js.consumer_info("ORDERS", "ALL")
        assert info.ack_floor.stream_seq == 2 and info.num_ack_pending == 1
        await msgs[2].nak(delay=0.3)
        redelivered = await sub.fetch(1, timeout=3)
        assert redelivered[0].metadata.sequence.stream == 3

    run_with(js_server.url, scenario)


def test_deliver_policies(js_server: InProcessServer) -> None:
    async def scenario(nc: Client, js: JetStreamContext) -> None:
        await _orders(js, 5)
        expected = {DeliverPolicy.ALL: 1, DeliverPolicy.LAST: 5, DeliverPolicy.NEW: 6}
        for policy, first in expected.items():
            name = f"P{policy.name}"
            await js.add_consumer(
                "ORDERS",
                ConsumerConfig(durable_name=name, deliver_policy=policy, ack_policy=AckPolicy.EXPLICIT),
            )
            if policy == DeliverPolicy.NEW:
                await js.publish("orders.z", b"new")
            sub = await js.pull_subscribe_bind(name, "ORDERS")
            assert (await sub.fetch(1, timeout=2))[0].metadata.sequence.stream == first
        await js.add_consumer(
            "ORDERS",
            ConsumerConfig(
                durable_name="SEQ",
                deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
                opt_start_seq=3,
                ack_policy=AckPolicy.EXPLICIT,
            ),
        )
        sub = await js.pull_subscribe_bind("SEQ", "ORDERS")
        assert (await sub.fetch(1, timeout=2))[0].metadata.sequence.stream == 3
        await js.add_consumer(
            "ORDERS",
            ConsumerConfig(
                durable_name="LPS",
                deliver_policy=DeliverPolicy.LAST_PER_SUBJECT,
                filter_subject="orders.*",
                ack_policy=AckPolicy.EXPLICIT,
            ),
        )
        sub = await js.pull_subscribe_bind("LPS", "ORDERS")
        seqs = [m.metadata.sequence.stream for m in await sub.fetch(3, timeout=2)]
        assert seqs == [4, 5, 6]

    run_with(js_server.url, scenario)


def test_push_consumers_queue_groups_and_heartbeats(js_server: InProcessServer) -> None:
    async def scenario(nc: Client, js: JetStreamContext) -> None:
        await _orders(js, 4)
        sub = await js.subscribe("orders.>", durable="PUSH", manual_ack=True)
        for index in range(4):
            msg = await sub.next_msg(timeout=2)
            assert msg.data == f"m{index}".encode()
            await msg.ack()
        group_a = await js.subscribe("orders.>", queue="workers")
        group_b = await js.subscribe("orders.>", queue="workers")
        got = 0
        for _ in range(4):
            for candidate in (group_a, group_b):
                try:
                    await candidate.next_msg(timeout=0.2)
                    got += 1
                except Exception:
                    pass
            if got == 4:
                break
        assert got == 4
        beats: asyncio.Queue[Msg] = asyncio.Queue()
        inbox = nc.new_inbox()
        await nc.subscribe(inbox, cb=beats.put)
        await api(
            nc,
            "$JS.API.CONSUMER.CREATE.ORDERS.HB",
            json.dumps(
                {
                    "stream_name": "ORDERS",
                    "config": {
                        "durable_name": "HB",
                        "deliver_subject": inbox,
                        "ack_policy": "none",
                        "deliver_policy": "new",
                        "idle_heartbeat": 150_000_000,
                        "flow_control": True,
                    },
                }
            ).encode(),
        )
        beat = await asyncio.wait_for(beats.get(), 5)
        assert beat.headers is not None and beat.headers["Status"] == "100"
        assert beat.headers["Description"] == "Idle Heartbeat"

    run_with(js_server.url, scenario)


def test_ephemeral_consumer_goes_after_inactive_threshold(js_server: InProcessServer) -> None:
    async def scenario(nc: Client, js: JetStreamContext) -> None:
        await _orders(js, 1)
        created = await api(
            nc,
            "$JS.API.CONSUMER.CREATE.ORDERS.EPH",
            json.dumps(
                {
                    "stream_name": "ORDERS",
                    "config": {"name": "EPH", "ack_policy": "explicit", "inactive_threshold": 200_000_000},
                }
            ).encode(),
        )
        assert created["config"]["inactive_threshold"] == 200_000_000
        deadline = asyncio.get_running_loop().time() + 5
        while asyncio.get_running_loop().time() < deadline:
            names = await api(nc, "$JS.API.CONSUMER.NAMES.ORDERS")
            if names["consumers"] == []:
                return
            await asyncio.sleep(0.05)
        raise AssertionError("ephemeral consumer was not removed")

    run_with(js_server.url, scenario)
