"""A deleted stream takes its consumers with it, as in nats-server 2.15.1 (differential): a push
consumer's idle heartbeats stop, a waiting pull request is released at once with `409 Consumer
Deleted` (the status line alone, as for a deleted consumer). Before, the stream's consumers were
left running when the stream closed: heartbeats went on to the deliver subject and the pull
waited for its expiry (408); in a cluster the consumer's RAFT group stayed registered."""

from __future__ import annotations

import asyncio
import json
import time

from nats.aio.client import Client
from nats.aio.msg import Msg

from tests.jetstream.conftest import api, observe_with

HEARTBEAT_NS = 200_000_000
PULL_EXPIRES_NS = 6_000_000_000
QUIET_S = 1.0  # five heartbeat intervals with none expected
DEADLINE_S = 4.0


async def until(predicate: object, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


async def scenario(nc: Client) -> dict[str, object]:
    heartbeats: list[Msg] = []
    pulls: list[Msg] = []

    async def on_heartbeat(msg: Msg) -> None:
        heartbeats.append(msg)

    async def on_pull(msg: Msg) -> None:
        pulls.append(msg)

    await nc.subscribe("dlv.s", cb=on_heartbeat)
    await nc.subscribe("pull.inbox", cb=on_pull)
    stream = {"name": "S", "subjects": ["s.>"]}
    created = await api(nc, "$JS.API.STREAM.CREATE.S", json.dumps(stream).encode())
    assert "error" not in created, created
    push = {"durable_name": "PUSH", "ack_policy": "explicit", "deliver_subject": "dlv.s",
            "idle_heartbeat": HEARTBEAT_NS, "flow_control": True}
    pull = {"durable_name": "PULL", "ack_policy": "explicit"}
    for name, config in (("PUSH", push), ("PULL", pull)):
        answer = await api(nc, f"$JS.API.CONSUMER.CREATE.S.{name}",
                           json.dumps({"stream_name": "S", "config": config}).encode())
        assert "error" not in answer, answer
    await nc.publish("$JS.API.CONSUMER.MSG.NEXT.S.PULL",
                     json.dumps({"batch": 1, "expires": PULL_EXPIRES_NS}).encode(), reply="pull.inbox")
    await nc.flush()
    await until(lambda: any(m.headers and m.headers.get("Status") == "100" for m in heartbeats),
                "a heartbeat")
    deleted = await api(nc, "$JS.API.STREAM.DELETE.S")
    await until(lambda: pulls, "the pull request's answer")
    seen = len(heartbeats)
    await asyncio.sleep(QUIET_S)  # an observation window: heartbeats would arrive in it
    return {
        "deleted": deleted,
        "heartbeats_after_delete": max(0, len(heartbeats) - seen - 1),  # one may have been under way
        "pull": [(m.headers, m.data) for m in pulls],
    }


def test_a_deleted_streams_consumers_stop_as_nats_servers_do(servers: tuple[str, str]) -> None:
    real_url, our_url = servers
    real = observe_with(real_url, scenario, 20)
    ours = observe_with(our_url, scenario, 20)
    assert real["heartbeats_after_delete"] == 0
    assert real["pull"] == [({"Status": "409", "Description": "Consumer Deleted"}, b"")]
    assert ours == real
