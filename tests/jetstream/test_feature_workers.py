"""Advisories, pause and sources with two workers: JetStream on worker 0, the client on worker 1
(advisories reach subscribers on the other worker; its interest is seen from worker 0)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import nats

from appliance.config.options import ServerOptions
from appliance.jetstream.service import start_jetstream, start_relay
from appliance.testing.inproc_mesh import InProcessMesh


def test_advisories_pause_and_sources_for_a_client_on_the_other_worker(tmp_path: Path) -> None:
    options = ServerOptions()
    options.jetstream.enabled = True
    options.jetstream.store_dir = str(tmp_path / "store")
    with InProcessMesh(2, options=options) as mesh:
        service = mesh.call(start_jetstream, mesh.servers[0])
        relay = mesh.call(start_relay, mesh.servers[1])
        try:
            asyncio.run(asyncio.wait_for(_scenario(mesh.url(1)), 30))
        finally:
            mesh.call(service.stop)
            mesh.call(relay.close)


async def _scenario(url: str) -> None:
    nc = await nats.connect(url, allow_reconnect=False)
    try:
        events = await nc.subscribe("$JS.EVENT.ADVISORY.>")
        await nc.flush()

        async def api(subject: str, body: dict[str, object] | None = None) -> dict[str, object]:
            data = json.dumps(body).encode() if body is not None else b""
            return json.loads((await nc.request(subject, data, timeout=5)).data)

        await api("$JS.API.STREAM.CREATE.O", {"name": "O", "subjects": ["o.>"], "storage": "memory"})
        subjects = set()
        while "$JS.EVENT.ADVISORY.STREAM.CREATED.O" not in subjects:
            subjects.add((await events.next_msg(timeout=5)).subject)
        await api("$JS.API.STREAM.CREATE.S", {"name": "S", "sources": [{"name": "O"}], "storage": "memory"})
        await api("$JS.API.CONSUMER.CREATE.S.D", {"stream_name": "S", "config": {
            "durable_name": "D", "ack_policy": "explicit", "pause_until": "2099-01-01T00:00:00Z"}})
        await nc.request("o.x", b"copied", timeout=5)
        inbox = nc.new_inbox()
        pulled = await nc.subscribe(inbox)
        await nc.publish("$JS.API.CONSUMER.MSG.NEXT.S.D", b'{"batch":1,"no_wait":true}', reply=inbox)
        held = await pulled.next_msg(timeout=5)
        assert held.headers and held.headers.get("Status") == "404"  # paused
        resumed = await api("$JS.API.CONSUMER.PAUSE.S.D")
        assert resumed["paused"] is False
        await nc.publish("$JS.API.CONSUMER.MSG.NEXT.S.D", b'{"batch":1,"expires":5000000000}', reply=inbox)
        msg = await pulled.next_msg(timeout=5)
        assert msg.data == b"copied" and msg.headers and msg.headers["Nats-Stream-Source"].startswith("O 1 > > o.x ")
        while "$JS.EVENT.ADVISORY.CONSUMER.PAUSE.S.D" not in subjects:
            subjects.add((await events.next_msg(timeout=5)).subject)
    finally:
        await nc.close()
