"""Pull consumer priority groups, differential against nats-server 2.15.1: the priority_groups /
priority_policy / priority_timeout checks of CONSUMER.CREATE, the pull request checks (group,
min_pending, min_ack_pending, priority, id), the overflow policy (a request with min_pending or
min_ack_pending waits until the consumer's num_pending or num_ack_pending reaches it), the
prioritized policy (the lowest priority number is served first) and the `priority_groups` state
in consumer info. pinned_client is refused by appliance (see the last test)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client

from appliance.testing.inproc import InProcessServer

pytestmark = pytest.mark.integration

TIME_KEYS = {"created", "ts", "last_active"}
WAIT_S = 5.0

CREATES: list[dict[str, object]] = [
    {"priority_groups": ["A"], "priority_policy": "overflow"},
    {"priority_groups": ["A", "B"], "priority_policy": "prioritized"},
    {"priority_groups": ["A"]},  # 10196
    {"priority_policy": "overflow"},  # 10159
    {"priority_groups": [""], "priority_policy": "overflow"},  # 10161
    {"priority_groups": ["bad group"], "priority_policy": "overflow"},  # 10162
    {"priority_groups": ["A" * 17], "priority_policy": "overflow"},  # 10162
    {"priority_groups": ["A"], "priority_policy": "overflow", "deliver_subject": "x"},  # 10178
    {"priority_timeout": 5},  # 10197
    {"priority_policy": "none"},
    {"priority_policy": "bogus", "priority_groups": ["A"]},  # 10025
    {"priority_groups": ["A"], "priority_policy": "overflow", "priority_timeout": -5},
]


def mask(value: object) -> object:
    if isinstance(value, dict):
        return {k: ("<time>" if k in TIME_KEYS else mask(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [mask(v) for v in value]
    return value


async def request(nc: Client, subject: str, body: object = b"") -> dict[str, object]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return json.loads((await nc.request(subject, data, timeout=5)).data)


async def create(nc: Client, name: str, **config: object) -> object:
    body = {"stream_name": "S", "config": {"durable_name": name, "ack_policy": "explicit", **config}}
    return mask(await request(nc, f"$JS.API.CONSUMER.CREATE.S.{name}", body))


def seen(msg: nats.aio.msg.Msg) -> tuple[object, ...]:
    headers = msg.headers or {}
    if headers.get("Status"):
        return ("status", headers.get("Status"), headers.get("Description"),
                headers.get("Nats-Pending-Messages"), headers.get("Nats-Pending-Bytes"))
    return ("msg", msg.subject, msg.data.decode())


async def pull(nc: Client, consumer: str, body: object) -> list[tuple[object, ...]]:
    """What one pull request gets: messages until its batch is full or a status ends it."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    batch = json.loads(data).get("batch", 1) if data.startswith(b"{") else int(data or b"1")
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    await nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.S.{consumer}", data, reply=inbox)
    got: list[tuple[object, ...]] = []
    try:
        while len([g for g in got if g[0] == "msg"]) < batch:
            got.append(seen(await sub.next_msg(timeout=WAIT_S)))
            if got[-1][0] == "status":
                break
    finally:
        await sub.unsubscribe()
    return got


async def ack_all(nc: Client, consumer: str, count: int) -> None:
    """Fetch and ack `count` messages with a plain request (no priority group needed), each
    ack confirmed (AckSync) so the info that follows sees them all."""
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    await nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.S.{consumer}", str(count).encode(), reply=inbox)
    for _ in range(count):
        msg = await sub.next_msg(timeout=WAIT_S)
        await nc.request(msg.reply, b"+ACK", timeout=5)
    await sub.unsubscribe()


async def scenario(url: str) -> list[object]:
    nc = await nats.connect(url, allow_reconnect=False)
    answers: list[object] = []
    try:
        await request(nc, "$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"]})
        for index, config in enumerate(CREATES):
            answers.append(await create(nc, f"C{index}", **config))
        answers.append(await create(nc, "O", priority_groups=["A", "B"], priority_policy="overflow"))
        answers.append(await create(nc, "N"))
        for body in ({"batch": 1, "group": "Z"}, {"batch": 1}, {"batch": 1, "group": "A", "id": "x"},
                     {"batch": 1, "group": "A", "priority": 10}, {"batch": 1, "group": "A", "priority": -1}):
            answers.append(await pull(nc, "O", body))
        answers.append(await pull(nc, "N", {"batch": 1, "min_pending": 3, "expires": 100_000_000}))
        answers.append(await pull(nc, "N", {"batch": 1, "group": "A", "expires": 100_000_000}))
        for index in range(3):
            await request(nc, f"s.{index}", f"m{index}".encode())
        waits = {"batch": 2, "group": "A", "min_pending": 5, "expires": 300_000_000}
        answers.append(await pull(nc, "O", waits))  # 3 pending < 5: ends with 408
        for index in range(3, 6):
            await request(nc, f"s.{index}", f"m{index}".encode())
        answers.append(await pull(nc, "O", {**waits, "group": "B"}))  # 6 pending: served
        acked = {"batch": 1, "group": "A", "min_ack_pending": 3, "expires": 300_000_000}
        answers.append(await pull(nc, "O", acked))  # 2 awaiting an ack < 3: 408
        answers.append(await pull(nc, "O", {**acked, "min_ack_pending": 2}))  # 2 >= 2: served
        answers.append(await pull(nc, "O", b"1"))  # a plain request has no priority group
        answers.append(mask(await request(nc, "$JS.API.CONSUMER.INFO.S.O")))
        await ack_all(nc, "N", 6)
        answers.append(mask(await request(nc, "$JS.API.CONSUMER.INFO.S.N")))
        answers.extend(await unpins(nc))
    finally:
        await nc.close()
    return answers


UNPINS: list[tuple[str, bytes]] = [
    ("S.O", b'{"group":"A"}'),
    ("S.O", b'{"group":"Z"}'),  # 10160
    ("S.O", b"{}"),  # 10025: group not specified
    ("S.O", b""),  # 10025: unexpected end of JSON input
    ("S.O", b'{"group":"bad group"}'),  # 10162
    ("S.O", b'{"group":"A","x":1}'),  # 10025: unknown field
    ("S.NOPE", b'{"group":"A"}'),  # 10014
    ("NOPE.O", b'{"group":"A"}'),  # 10059
    ("S.N", b'{"group":"A"}'),  # 10160: no priority groups at all
]


async def unpins(nc: Client) -> list[object]:
    """CONSUMER.UNPIN answers, and the UNPINNED advisory a valid one sends (nobody is pinned)."""
    events = await nc.subscribe("$JS.EVENT.ADVISORY.CONSUMER.UNPINNED.>")
    await nc.flush()
    out: list[object] = []
    for target, body in UNPINS:
        out.append(await request(nc, f"$JS.API.CONSUMER.UNPIN.{target}", body))
    event = json.loads((await events.next_msg(timeout=WAIT_S)).data)
    out.append({k: v for k, v in event.items() if k not in ("id", "timestamp")})
    await events.unsubscribe()
    return out


async def prioritized(url: str) -> list[object]:
    """Requests waiting before any message: the lower priority number gets the first message."""
    nc = await nats.connect(url, allow_reconnect=False)
    try:
        await request(nc, "$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"]})
        await create(nc, "P", priority_groups=["A"], priority_policy="prioritized", deliver_policy="new")
        subs = {}
        for priority in (5, 1, 3):
            inbox = nc.new_inbox()
            subs[priority] = await nc.subscribe(inbox)
            body = {"batch": 1, "group": "A", "priority": priority, "expires": 3_000_000_000}
            await nc.publish("$JS.API.CONSUMER.MSG.NEXT.S.P", json.dumps(body).encode(), reply=inbox)
        await nc.flush()
        order: list[int] = []
        for index in range(3):
            await request(nc, f"s.{index}", b"x")
            tasks = {p: asyncio.ensure_future(sub.next_msg(timeout=WAIT_S)) for p, sub in subs.items()}
            done, waiting = await asyncio.wait(tasks.values(), return_when=asyncio.FIRST_COMPLETED)
            for task in waiting:
                task.cancel()
            await asyncio.gather(*waiting, return_exceptions=True)
            winner = next(p for p, task in tasks.items() if task in done)
            tasks[winner].result()
            order.append(winner)
            del subs[winner]
        return order
    finally:
        await nc.close()


def test_priority_groups_as_nats_server(servers: tuple[str, str]) -> None:
    real_url, our_url = servers
    expected = asyncio.run(asyncio.wait_for(scenario(real_url), 60))
    got = asyncio.run(asyncio.wait_for(scenario(our_url), 60))
    for index, (want, have) in enumerate(zip(expected, got, strict=True)):
        assert have == want, f"answer {index}"


def test_prioritized_serves_the_lowest_priority_first_as_nats_server(servers: tuple[str, str]) -> None:
    real_url, our_url = servers
    expected = asyncio.run(asyncio.wait_for(prioritized(real_url), 30))
    got = asyncio.run(asyncio.wait_for(prioritized(our_url), 30))
    assert got == expected == [1, 3, 5]


def test_pinned_client_is_refused_not_run_as_another_policy(tmp_path: Path) -> None:
    async def main(url: str) -> object:
        nc = await nats.connect(url, allow_reconnect=False)
        try:
            await request(nc, "$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"]})
            return (await request(nc, "$JS.API.CONSUMER.CREATE.S.P", {"stream_name": "S", "config": {
                "durable_name": "P", "priority_groups": ["A"], "priority_policy": "pinned_client"}}))["error"]
        finally:
            await nc.close()

    with InProcessServer(jetstream_dir=str(tmp_path / "s")) as server:
        error = asyncio.run(asyncio.wait_for(main(server.url), 30))
    assert error == {"code": 500, "err_code": 10052,
                     "description": "consumer priority policy pinned_client is not supported by this server"}
