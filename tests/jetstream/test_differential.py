"""Differential tests: the same JetStream API requests to the real nats-server 2.15.1 and to
appliance; the JSON answers must be equal once times are masked."""

from __future__ import annotations

import asyncio
import json

import nats
import pytest


pytestmark = pytest.mark.integration

TIME_KEYS = {"created", "ts", "first_ts", "last_ts", "last_active", "time"}
Json = dict[str, object] | list[object] | str | int | float | bool | None

# (subject, body, headers): every request of one script, run in order on both servers
Step = tuple[str, bytes, dict[str, str]]

STREAMS_SCRIPT: list[Step] = [
    ("$JS.API.INFO", b"", {}),
    ("$JS.API.STREAM.CREATE.ORDERS", b'{"name":"ORDERS","subjects":["orders.>"]}', {}),
    ("$JS.API.STREAM.CREATE.ORDERS", b'{"name":"ORDERS","subjects":["orders.>"]}', {}),
    ("$JS.API.STREAM.CREATE.ORDERS", b'{"name":"ORDERS","subjects":["orders.x"]}', {}),
    ("$JS.API.STREAM.CREATE.BAD", b'{"name":"OTHER"}', {}),
    ("$JS.API.STREAM.CREATE.X1", b'{"name":"X1","subjects":["orders.a"]}', {}),
    ("$JS.API.STREAM.CREATE.X2", b"{not json", {}),
    ("$JS.API.STREAM.CREATE.X3", b'{"name":"X3","subjects":["x3"],"bogus_field":1}', {}),
    ("$JS.API.STREAM.CREATE.R3X", b'{"name":"R3X","num_replicas":3}', {}),
    ("orders.new", b"hello 0", {}),
    ("orders.new", b"hello 1", {}),
    ("orders.new", b"x", {"Nats-Msg-Id": "abc"}),
    ("orders.new", b"x", {"Nats-Msg-Id": "abc"}),
    ("orders.new", b"x", {"Nats-Expected-Stream": "NOPE"}),
    ("orders.new", b"x", {"Nats-Expected-Last-Sequence": "1"}),
    ("orders.new", b"x", {"Nats-Expected-Last-Subject-Sequence": "1"}),
    ("orders.new", b"x", {"Nats-Expected-Last-Msg-Id": "zzz"}),
    ("orders.new", b"ok", {"Nats-Expected-Last-Msg-Id": "abc"}),
    ("orders.new", b"id", {"Nats-Msg-Id": "def"}),
    ("orders.new", b"plain", {}),  # no headers: the last message id is empty again
    ("orders.new", b"x", {"Nats-Expected-Last-Msg-Id": "def"}),
    ("orders.other", b"o", {"Nats-Rollup": "sub"}),
    ("$JS.API.STREAM.INFO.ORDERS", b"", {}),
    ("$JS.API.STREAM.INFO.NOPE", b"", {}),
    ("$JS.API.STREAM.NAMES", b"", {}),
    ("$JS.API.STREAM.NAMES", b'{"subject":"orders.new"}', {}),
    ("$JS.API.STREAM.LIST", b"", {}),
    ("$JS.API.STREAM.MSG.GET.ORDERS", b'{"seq":1}', {}),
    ("$JS.API.STREAM.MSG.GET.ORDERS", b'{"last_by_subj":"orders.new"}', {}),
    ("$JS.API.STREAM.MSG.GET.ORDERS", b'{"next_by_subj":"orders.new","seq":2}', {}),
    ("$JS.API.STREAM.MSG.GET.ORDERS", b'{"seq":999}', {}),
    ("$JS.API.STREAM.MSG.DELETE.ORDERS", b'{"seq":2}', {}),
    ("$JS.API.STREAM.MSG.DELETE.ORDERS", b'{"seq":2}', {}),
    ("$JS.API.STREAM.MSG.DELETE.ORDERS", b'{"seq":3,"no_erase":true}', {}),
    ("$JS.API.STREAM.INFO.ORDERS", b'{"deleted_details":true,"subjects_filter":">"}', {}),
    ("$JS.API.STREAM.UPDATE.ORDERS", b'{"name":"ORDERS","subjects":["orders.>"],"max_msgs":100}', {}),
    ("$JS.API.STREAM.UPDATE.ORDERS", b'{"name":"ORDERS","subjects":["orders.>"],"storage":"memory"}', {}),
    ("$JS.API.STREAM.UPDATE.NOPE", b'{"name":"NOPE"}', {}),
    ("$JS.API.STREAM.LEADER.STEPDOWN.ORDERS", b"", {}),
    ("$JS.API.STREAM.PURGE.ORDERS", b'{"filter":"orders.zzz"}', {}),
    ("$JS.API.STREAM.PURGE.ORDERS", b'{"keep":1}', {}),
    ("$JS.API.STREAM.PURGE.ORDERS", b"", {}),
    ("$JS.API.STREAM.INFO.ORDERS", b"", {}),
    (
        "$JS.API.STREAM.CREATE.LIM",
        b'{"name":"LIM","subjects":["lim.>"],"max_msgs":2,"discard":"new",'
        b'"max_msg_size":10,"deny_delete":true,"deny_purge":true}',
        {},
    ),
    ("lim.a", b"1", {}),
    ("lim.a", b"2", {}),
    ("lim.a", b"3", {}),
    ("lim.b", b"01234567890123", {}),
    ("$JS.API.STREAM.MSG.DELETE.LIM", b'{"seq":1}', {}),
    ("$JS.API.STREAM.PURGE.LIM", b"", {}),
    (
        "$JS.API.STREAM.CREATE.KV_d",
        b'{"name":"KV_d","subjects":["$KV.d.>"],"max_msgs_per_subject":5,'
        b'"discard":"new","deny_delete":true,"allow_rollup_hdrs":true,"allow_direct":true}',
        {},
    ),
    ("$KV.d.a", b"v1", {}),
    ("$KV.d.a", b"v2", {}),
    ("$KV.d.b", b"", {"KV-Operation": "DEL"}),
    ("$KV.d.a", b"x", {"Nats-Expected-Last-Subject-Sequence": "0"}),
    ("$KV.d.c", b"bad", {"Nats-Rollup": "bad"}),
    ("$JS.API.INFO", b"", {}),
    ("$JS.API.STREAM.DELETE.LIM", b"", {}),
    ("$JS.API.STREAM.DELETE.LIM", b"", {}),
]

CONSUMERS_SCRIPT: list[Step] = [
    ("$JS.API.STREAM.CREATE.ORDERS", b'{"name":"ORDERS","subjects":["orders.>"]}', {}),
    *[(f"orders.{'a' if i % 2 else 'b'}", f"m{i}".encode(), {}) for i in range(5)],
    (
        "$JS.API.CONSUMER.CREATE.ORDERS.DUR1",
        b'{"stream_name":"ORDERS","config":{"durable_name":"DUR1","ack_policy":"explicit"}}',
        {},
    ),
    (
        "$JS.API.CONSUMER.CREATE.ORDERS.DUR2.orders.a",
        b'{"stream_name":"ORDERS","config":{"durable_name":"DUR2",'
        b'"filter_subject":"orders.a","ack_policy":"explicit"}}',
        {},
    ),
    (
        "$JS.API.CONSUMER.CREATE.ORDERS.DUR3.orders.a",
        b'{"stream_name":"ORDERS","config":{"durable_name":"DUR3","filter_subject":"orders.b"}}',
        {},
    ),
    (
        "$JS.API.CONSUMER.DURABLE.CREATE.ORDERS.LEG1",
        b'{"stream_name":"ORDERS","config":{"durable_name":"LEG1","ack_policy":"explicit"}}',
        {},
    ),
    (
        "$JS.API.CONSUMER.CREATE.ORDERS",
        b'{"stream_name":"ORDERS","config":{"durable_name":"X","ack_policy":"none"}}',
        {},
    ),
    (
        "$JS.API.CONSUMER.CREATE.ORDERS.DUR1",
        b'{"stream_name":"ORDERS","config":{"durable_name":"DUR1","ack_policy":"explicit","max_deliver":5}}',
        {},
    ),
    (
        "$JS.API.CONSUMER.CREATE.ORDERS.DUR1",
        b'{"stream_name":"ORDERS","action":"create","config":'
        b'{"durable_name":"DUR1","ack_policy":"explicit","max_deliver":3}}',
        {},
    ),
    (
        "$JS.API.CONSUMER.CREATE.ORDERS.NEWC",
        b'{"stream_name":"ORDERS","action":"update","config":'
        b'{"durable_name":"NEWC","ack_policy":"explicit"}}',
        {},
    ),
    ("$JS.API.CONSUMER.CREATE.NOSTREAM.C", b'{"stream_name":"NOSTREAM","config":{"durable_name":"C"}}', {}),
    (
        "$JS.API.CONSUMER.CREATE.ORDERS.P",
        b'{"stream_name":"ORDERS","config":{"durable_name":"P","deliver_subject":"x.y","max_waiting":5}}',
        {},
    ),
    (
        "$JS.API.CONSUMER.CREATE.ORDERS.H",
        b'{"stream_name":"ORDERS","config":{"durable_name":"H",'
        b'"idle_heartbeat":50000000,"deliver_subject":"x.h"}}',
        {},
    ),
    (
        "$JS.API.CONSUMER.CREATE.ORDERS.F",
        b'{"stream_name":"ORDERS","config":{"durable_name":"F","flow_control":true,"deliver_subject":"x.f"}}',
        {},
    ),
    ("$JS.API.CONSUMER.CREATE.ORDERS.bad.name", b'{"stream_name":"ORDERS","config":{"name":"bad.name"}}', {}),
    (
        "$JS.API.CONSUMER.CREATE.ORDERS.E1",
        b'{"stream_name":"ORDERS","config":{"name":"E1","durable_name":"E2"}}',
        {},
    ),
    (
        "$JS.API.CONSUMER.CREATE.ORDERS.E3",
        b'{"stream_name":"ORDERS","config":{"name":"E3","filter_subject":"nomatch.>"}}',
        {},
    ),
    (
        "$JS.API.CONSUMER.CREATE.ORDERS.E4",
        b'{"stream_name":"ORDERS","config":{"name":"E4","deliver_policy":"by_start_sequence"}}',
        {},
    ),
    (
        "$JS.API.CONSUMER.CREATE.ORDERS.E5",
        b'{"stream_name":"ORDERS","config":{"name":"E5","ack_policy":"bogus"}}',
        {},
    ),
    (
        "$JS.API.CONSUMER.CREATE.ORDERS.PUSH",
        b'{"stream_name":"ORDERS","config":{"durable_name":"PUSH",'
        b'"deliver_subject":"push.x","deliver_group":"g","ack_policy":"explicit","flow_control":true,'
        b'"idle_heartbeat":5000000000,"headers_only":true,"filter_subjects":["orders.a","orders.b"]}}',
        {},
    ),
    ("$JS.API.CONSUMER.INFO.ORDERS.DUR1", b"", {}),
    ("$JS.API.CONSUMER.INFO.ORDERS.NOPE", b"", {}),
    ("$JS.API.CONSUMER.NAMES.ORDERS", b"", {}),
    ("$JS.API.CONSUMER.LIST.ORDERS", b"", {}),
    ("$JS.API.CONSUMER.NAMES.NOPE", b"", {}),
    ("$JS.API.CONSUMER.LEADER.STEPDOWN.ORDERS.DUR1", b"", {}),
    ("$JS.API.CONSUMER.DELETE.ORDERS.E3", b"", {}),
    ("$JS.API.CONSUMER.DELETE.ORDERS.E3", b"", {}),
    ("$JS.API.CONSUMER.MSG.NEXT.ORDERS.DUR2", b'{"batch":1}', {}),
    ("$JS.API.CONSUMER.INFO.ORDERS.DUR2", b"", {}),
    ("$JS.API.CONSUMER.MSG.NEXT.ORDERS.DUR2", b'{"batch":1}', {}),
    ("$JS.API.CONSUMER.MSG.NEXT.ORDERS.DUR2", b'{"batch":1,"no_wait":true}', {}),
    ("$JS.API.CONSUMER.INFO.ORDERS.DUR2", b"", {}),
    ("$JS.API.STREAM.CREATE.WQ", b'{"name":"WQ","subjects":["wq.>"],"retention":"workqueue"}', {}),
    (
        "$JS.API.CONSUMER.CREATE.WQ.A",
        b'{"stream_name":"WQ","config":{"durable_name":"A","ack_policy":"explicit"}}',
        {},
    ),
    (
        "$JS.API.CONSUMER.CREATE.WQ.B",
        b'{"stream_name":"WQ","config":{"durable_name":"B","ack_policy":"explicit"}}',
        {},
    ),
    (
        "$JS.API.CONSUMER.CREATE.WQ.C",
        b'{"stream_name":"WQ","config":{"durable_name":"C","ack_policy":"none"}}',
        {},
    ),
    ("$JS.API.STREAM.INFO.ORDERS", b"", {}),
]


def mask(value: Json) -> Json:
    if isinstance(value, dict):
        return {k: ("<time>" if k in TIME_KEYS else mask(v)) for k, v in value.items()}  # type: ignore[misc]
    if isinstance(value, list):
        return [mask(v) for v in value]
    return value


async def replay(url: str, script: list[Step]) -> list[object]:
    nc = await nats.connect(url, allow_reconnect=False)
    answers: list[object] = []
    try:
        for subject, body, headers in script:
            if ".MSG.NEXT." in subject:  # deliveries keep the stream subject: no request muxing
                inbox = nc.new_inbox()
                sub = await nc.subscribe(inbox, max_msgs=1)
                await nc.publish(subject, body, reply=inbox)
                pulled = await sub.next_msg(timeout=5)
                seen = "<inbox>" if pulled.subject == inbox else pulled.subject
                answers.append((None, [seen, (pulled.headers or {}).get("Status"), pulled.data.decode()]))
                continue
            msg = await nc.request(subject, body, timeout=5, headers=headers or None)
            text = msg.data
            parsed = json.loads(text) if text.startswith(b"{") else text.decode()
            answers.append((list(parsed) if isinstance(parsed, dict) else None, mask(parsed)))
    finally:
        await nc.close()
    return answers


@pytest.mark.parametrize("script", [STREAMS_SCRIPT, CONSUMERS_SCRIPT], ids=["streams", "consumers"])
def test_same_answers_as_nats_server(servers: tuple[str, str], script: list[Step]) -> None:
    real_url, our_url = servers
    expected = asyncio.run(asyncio.wait_for(replay(real_url, script), 60))
    got = asyncio.run(asyncio.wait_for(replay(our_url, script), 60))
    for step, want, have in zip(script, expected, got, strict=True):
        assert have == want, f"{step[0]} {step[1]!r} {step[2]}"
