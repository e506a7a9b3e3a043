"""Republish with two workers: JetStream on worker 0, core subscribers on both workers get the
copies (and a KV watcher-style subscriber on the other worker sees every change in order)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import nats

from appliance.config.options import ServerOptions
from appliance.jetstream.service import start_jetstream, start_relay
from appliance.testing.inproc_mesh import InProcessMesh


def test_copies_reach_core_subscribers_on_every_worker(tmp_path: Path) -> None:
    options = ServerOptions()
    options.jetstream.enabled = True
    options.jetstream.store_dir = str(tmp_path / "store")
    with InProcessMesh(2, options=options) as mesh:
        service = mesh.call(start_jetstream, mesh.servers[0])
        relay = mesh.call(start_relay, mesh.servers[1])
        try:
            asyncio.run(asyncio.wait_for(_scenario(mesh.url(0), mesh.url(1)), 30))
        finally:
            mesh.call(service.stop)
            mesh.call(relay.close)


async def _scenario(url0: str, url1: str) -> None:
    near = await nats.connect(url0, allow_reconnect=False)
    far = await nats.connect(url1, allow_reconnect=False)
    try:
        near_sub = await near.subscribe("rp.>")
        far_sub = await far.subscribe("rp.>")
        await near.flush()
        await far.flush()
        body = {"name": "S", "subjects": ["s.>"], "storage": "memory", "republish": {"dest": "rp.>"}}
        answer = json.loads((await far.request("$JS.API.STREAM.CREATE.S", json.dumps(body).encode(), timeout=5)).data)
        assert answer["config"]["republish"] == {"src": ">", "dest": "rp.>"}
        for index in range(5):
            ack = await far.request(f"s.k{index % 2}", b"v%d" % index, timeout=5)
            assert json.loads(ack.data)["seq"] == index + 1
        for sub in (near_sub, far_sub):
            got = [await sub.next_msg(timeout=5) for _ in range(5)]
            assert [m.subject for m in got] == ["rp.s.k0", "rp.s.k1", "rp.s.k0", "rp.s.k1", "rp.s.k0"]
            assert [m.data for m in got] == [b"v%d" % i for i in range(5)]
            assert [m.headers["Nats-Last-Sequence"] for m in got if m.headers] == ["0", "0", "1", "2", "3"]
    finally:
        await near.close()
        await far.close()
