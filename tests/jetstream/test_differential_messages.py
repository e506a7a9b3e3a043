"""Differential tests at message level: pull deliveries and their statuses, ack subjects, and
Direct Get answers from nats-server 2.15.1 and from appliance, compared with times masked."""

from __future__ import annotations

import asyncio

import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg


pytestmark = pytest.mark.integration

SETUP = [
    ("$JS.API.STREAM.CREATE.O", b'{"name":"O","subjects":["o.>"],"allow_direct":true}'),
    ("o.a", b"m0"),
    ("o.b", b"m1"),
    ("o.a", b"m2"),
    ("o.c", b"0123456789"),
    (
        "$JS.API.CONSUMER.CREATE.O.D",
        b'{"stream_name":"O","config":{"durable_name":"D","ack_policy":"explicit"}}',
    ),
    (
        "$JS.API.CONSUMER.CREATE.O.F.o.a",
        b'{"stream_name":"O","config":{"durable_name":"F","filter_subject":"o.a","ack_policy":"explicit"}}',
    ),
]

# (subject, body, how many messages to collect)
PROBES = [
    ("$JS.API.CONSUMER.MSG.NEXT.O.D", b'{"batch":2,"no_wait":true}', 2),
    ("$JS.API.CONSUMER.MSG.NEXT.O.F", b'{"batch":5,"no_wait":true}', 3),
    ("$JS.API.CONSUMER.MSG.NEXT.O.F", b'{"batch":1,"no_wait":true}', 1),
    ("$JS.API.CONSUMER.MSG.NEXT.O.D", b'{"batch":5,"max_bytes":60,"expires":500000000}', 2),
    ("$JS.API.CONSUMER.MSG.NEXT.O.D", b'{"batch":2,"expires":200000000}', 2),
    ("$JS.API.DIRECT.GET.O", b'{"seq":2}', 1),
    ("$JS.API.DIRECT.GET.O.o.a", b"", 1),
    ("$JS.API.DIRECT.GET.O", b'{"next_by_subj":"o.a","seq":2}', 1),
    ("$JS.API.DIRECT.GET.O", b'{"seq":99}', 1),
    ("$JS.API.DIRECT.GET.O", b"", 1),
    ("$JS.API.DIRECT.GET.O", b"{bad", 1),
    ("$JS.API.DIRECT.GET.O", b'{"multi_last":["o.>"],"batch":10}', 4),
    ("$JS.API.DIRECT.GET.O", b'{"seq":1,"batch":2}', 3),
    ("$JS.API.DIRECT.GET.O", b'{"seq":3,"batch":1}', 2),  # Nats-Num-Pending counted from a later seq
    ("$JS.API.DIRECT.GET.O", b'{"start_time":"2000-01-01T00:00:00Z","batch":2}', 3),
    ("$JS.API.DIRECT.GET.O", b'{"start_time":"2000-01-01T00:00:00Z","next_by_subj":"o.a","batch":5}', 3),
    ("$JS.API.DIRECT.GET.O", b'{"start_time":"2000-01-01T00:00:00Z"}', 1),
    ("$JS.API.DIRECT.GET.O", b'{"start_time":"2100-01-01T00:00:00Z","batch":2}', 1),
    ("$JS.API.DIRECT.GET.O", b"{}", 1),
    ("$JS.API.DIRECT.GET.O", b'{"batch":3}', 1),
    ("$JS.API.DIRECT.GET.O", b'{"seq":1,"last_by_subj":"o.a"}', 1),
    ("$JS.API.DIRECT.GET.O", b'{"seq":1,"start_time":"2000-01-01T00:00:00Z"}', 1),
    ("$JS.API.DIRECT.GET.O", b'{"last_by_subj":"o.a","batch":2}', 1),
    ("$JS.API.DIRECT.GET.O", b'{"next_by_subj":"o.a","multi_last":["o.a"]}', 1),
    ("$JS.API.DIRECT.GET.O", b'{"multi_last":["o.>"],"up_to_seq":2,"up_to_time":"2100-01-01T00:00:00Z"}', 1),
    ("$JS.API.DIRECT.GET.O", b'{"multi_last":["o.>"],"up_to_time":"2100-01-01T00:00:00Z"}', 4),
    ("$JS.API.DIRECT.GET.O", b'{"multi_last":["o.>"],"up_to_time":"2000-01-01T00:00:00Z"}', 1),
    ("$JS.API.DIRECT.GET.O", b'{"seq":1,"batch":2,"no_hdr":true}', 3),
    ("$JS.API.DIRECT.GET.O", b'{"seq":2,"no_hdr":true}', 1),
    ("$JS.API.DIRECT.GET.O", b'{"seq":1,"batch":5,"max_bytes":10}', 3),
]


def shape(msg: Msg, inbox: str) -> tuple[object, ...]:
    headers = {k: v for k, v in (msg.headers or {}).items() if k != "Nats-Time-Stamp"}
    reply = msg.reply
    if reply.startswith("$JS.ACK."):
        tokens = reply.split(".")
        tokens[7] = "<ts>"
        reply = ".".join(tokens)
    return (msg.subject if msg.subject != inbox else "<inbox>", reply, headers, msg.data)


async def observe(url: str) -> list[list[tuple[object, ...]]]:
    nc: Client = await nats.connect(url, allow_reconnect=False)
    seen: list[list[tuple[object, ...]]] = []
    try:
        for subject, body in SETUP:
            await nc.request(subject, body, timeout=5)
        for subject, body, count in PROBES:
            inbox = nc.new_inbox()
            queue: asyncio.Queue[Msg] = asyncio.Queue()
            sub = await nc.subscribe(inbox, cb=queue.put)
            await nc.publish(subject, body, reply=inbox)
            seen.append([shape(await asyncio.wait_for(queue.get(), 5), inbox) for _ in range(count)])
            await sub.unsubscribe()
    finally:
        await nc.close()
    return seen


def test_pull_and_direct_get_messages_match_nats_server(servers: tuple[str, str]) -> None:
    real_url, our_url = servers
    expected = asyncio.run(asyncio.wait_for(observe(real_url), 60))
    got = asyncio.run(asyncio.wait_for(observe(our_url), 60))
    for probe, want, have in zip(PROBES, expected, got, strict=True):
        assert have == want, probe


PUSH_CONFIG = (
    b'{"stream_name":"O","config":{"durable_name":"P","deliver_subject":"%s","ack_policy":"explicit",'
    b'"idle_heartbeat":200000000,"flow_control":true}}'
)


async def observe_push(url: str) -> list[tuple[object, ...]]:
    """Push deliveries of a consumer, then its first idle heartbeat."""
    nc: Client = await nats.connect(url, allow_reconnect=False)
    try:
        for subject, body in SETUP[:5]:
            await nc.request(subject, body, timeout=5)
        inbox = nc.new_inbox()
        queue: asyncio.Queue[Msg] = asyncio.Queue()
        await nc.subscribe(inbox, cb=queue.put)
        await nc.request("$JS.API.CONSUMER.CREATE.O.P", PUSH_CONFIG % inbox.encode(), timeout=5)
        return [shape(await asyncio.wait_for(queue.get(), 5), inbox) for _ in range(5)]
    finally:
        await nc.close()


def test_push_deliveries_and_heartbeat_match_nats_server(servers: tuple[str, str]) -> None:
    real_url, our_url = servers
    expected = asyncio.run(asyncio.wait_for(observe_push(real_url), 30))
    got = asyncio.run(asyncio.wait_for(observe_push(our_url), 30))
    assert got == expected
