"""Consumer pause beyond the differential scenario (test_advisories.py): a pause survives a
restart, push deliveries are held until the pause ends, resuming early delivers what waited."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime, timedelta

from nats.aio.client import Client
from nats.js import JetStreamContext

from appliance.jetstream.wire import parse_rfc3339
from appliance.testing.inproc import InProcessServer

from .conftest import api, run_with

NS = 1_000_000_000


def _in(seconds: float) -> str:
    return (datetime.now(UTC) + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


async def _create(nc: Client, stream: str, name: str, **config: object) -> dict:
    body = {"stream_name": stream, "config": {"durable_name": name, **config}}
    return await api(nc, f"$JS.API.CONSUMER.CREATE.{stream}.{name}", json.dumps(body).encode())


def test_pause_survives_restart_and_resume_delivers(store_dir: str) -> None:
    until = _in(3600)

    async def before(nc: Client, js: JetStreamContext) -> None:
        await js.add_stream(name="P", subjects=["p.>"])
        await _create(nc, "P", "D", ack_policy="explicit")
        paused = await api(nc, "$JS.API.CONSUMER.PAUSE.P.D", json.dumps({"pause_until": until}).encode())
        assert paused["paused"] is True and 3500 * NS < paused["pause_remaining"] <= 3600 * NS
        await js.publish("p.a", b"held")

    async def after(nc: Client, js: JetStreamContext) -> None:
        info = await api(nc, "$JS.API.CONSUMER.INFO.P.D")
        assert info["paused"] is True and parse_rfc3339(info["config"]["pause_until"]) == parse_rfc3339(until)
        assert info["config"]["metadata"]["_nats.req.level"] == "1"
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        await nc.publish("$JS.API.CONSUMER.MSG.NEXT.P.D", b'{"batch":1,"no_wait":true}', reply=inbox)
        status = await sub.next_msg(timeout=5)
        assert status.headers and status.headers.get("Status") == "404"
        await nc.publish("$JS.API.CONSUMER.MSG.NEXT.P.D", b'{"batch":1,"expires":5000000000}', reply=inbox)
        resumed = await api(nc, "$JS.API.CONSUMER.PAUSE.P.D")
        assert resumed == {
            "type": "io.nats.jetstream.api.v1.consumer_pause_response",
            "paused": False,
            "pause_until": "0001-01-01T00:00:00Z",
        }
        delivered = await sub.next_msg(timeout=5)
        assert delivered.data == b"held"
        info = await api(nc, "$JS.API.CONSUMER.INFO.P.D")
        assert "paused" not in info and "pause_until" not in info["config"]
        assert info["config"]["metadata"]["_nats.req.level"] == "0"

    with InProcessServer(jetstream_dir=store_dir) as server:
        run_with(server.url, before)
    with InProcessServer(jetstream_dir=store_dir) as server:
        run_with(server.url, after)


def test_push_delivery_is_held_until_the_pause_ends(js_server: InProcessServer) -> None:
    async def scenario(nc: Client, js: JetStreamContext) -> None:
        await js.add_stream(name="Q", subjects=["q.>"])
        received: asyncio.Queue[float] = asyncio.Queue()

        async def on_msg(msg: object) -> None:
            received.put_nowait(time.time())

        await nc.subscribe("deliver.q", cb=on_msg)
        until = _in(0.6)
        created = await _create(nc, "Q", "PUSH", deliver_subject="deliver.q", pause_until=until)
        assert created["paused"] is True
        await js.publish("q.a", b"one")
        arrived = await asyncio.wait_for(received.get(), 5)
        assert arrived * NS >= parse_rfc3339(until)  # not before the pause ended
        info = await api(nc, "$JS.API.CONSUMER.INFO.Q.PUSH")
        assert "paused" not in info and info["delivered"]["stream_seq"] == 1

    run_with(js_server.url, scenario)
