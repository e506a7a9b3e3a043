"""The API audit advisory with two workers: JetStream answers on worker 0; a request from a client
on worker 0 carries that connection's details in `client`, one relayed from a client on worker 1
carries what worker 0 knows of it — the account, the server, kind and client type — and no
connection details (the link does not carry the sibling's connection)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import nats

from appliance.config.options import ServerOptions
from appliance.jetstream.service import start_jetstream, start_relay
from appliance.testing.clients import flush_after_subs
from appliance.testing.inproc_mesh import InProcessMesh


async def audits(url0: str, url1: str) -> list[dict[str, object]]:
    watcher = await nats.connect(url0, allow_reconnect=False)
    near = await nats.connect(url0, name="near", allow_reconnect=False)
    far = await nats.connect(url1, name="far", allow_reconnect=False)
    try:
        sub = await watcher.subscribe("$JS.EVENT.ADVISORY.API")
        await flush_after_subs(watcher)  # SUB on the wire before the PING (the others publish)
        await near.request("$JS.API.INFO", b"", timeout=5)
        first = json.loads((await sub.next_msg(timeout=5)).data)
        await far.request("$JS.API.INFO", b"", timeout=5)
        second = json.loads((await sub.next_msg(timeout=5)).data)
        return [first["client"], second["client"]]
    finally:
        for nc in (watcher, near, far):
            await nc.close()


def test_audit_client_of_a_local_and_of_a_sibling_workers_client(tmp_path: Path) -> None:
    options = ServerOptions()
    options.server_name = "S1"
    options.jetstream.enabled = True
    options.jetstream.store_dir = str(tmp_path / "store")
    with InProcessMesh(2, options=options) as mesh:
        service = mesh.call(start_jetstream, mesh.servers[0])
        relay = mesh.call(start_relay, mesh.servers[1])
        try:
            near, far = asyncio.run(asyncio.wait_for(audits(mesh.url(0), mesh.url(1)), 30))
        finally:
            mesh.call(service.stop)
            mesh.call(relay.close)
    measured_later = {"rtt"}  # known once the server's first PING is answered (seconds after connect)
    assert [key for key in near if key not in measured_later] == [
        "start", "host", "id", "acc", "name", "lang", "ver", "server", "kind", "client_type"
    ]
    assert near["name"] == "near" and near["acc"] == "$G"
    assert far == {"acc": "$G", "server": "S1", "kind": "Client", "client_type": "nats"}
