"""A stream's `compression` decides how its sealed segments are stored: `s2` compresses them
(zstd, appliance's block codec), `none` (nats-server's default) keeps them uncompressed; an update
applies to segments sealed afterwards, and a restart keeps the choice."""

from __future__ import annotations

import json

from nats.aio.client import Client
from nats.js import JetStreamContext

from appliance.config.options import ServerOptions
from appliance.jetstream.service import JetStreamService
from appliance.store.filestore import FileStreamStore
from appliance.testing.inproc import InProcessServer

from .conftest import api, run_with


def _compressing(server: InProcessServer, name: str) -> bool:
    def look() -> bool:
        service = server.server.jetstream_monitor.service  # type: ignore[attr-defined]
        assert isinstance(service, JetStreamService)
        store = service.accounts["$G"].streams[name].store
        assert isinstance(store, FileStreamStore)
        return store.compressing

    return server.call(look)


def _body(name: str, **fields: object) -> bytes:
    return json.dumps({"name": name, "subjects": [name.lower()], **fields}).encode()


def test_compression_setting_decides_how_segments_are_sealed(store_dir: str) -> None:
    options = ServerOptions()
    options.jetstream.enabled = True
    with InProcessServer(options, jetstream_dir=store_dir) as server:

        async def create(nc: Client, _js: JetStreamContext) -> None:
            assert (await api(nc, "$JS.API.STREAM.CREATE.Z", _body("Z", compression="s2")))["config"]["compression"] == "s2"
            assert (await api(nc, "$JS.API.STREAM.CREATE.N", _body("N")))["config"]["compression"] == "none"
            memory = await api(nc, "$JS.API.STREAM.CREATE.M", _body("M", storage="memory", compression="s2"))
            assert memory["config"]["compression"] == "s2"  # accepted as nats-server does; nothing is sealed

        run_with(server.url, create)
        assert _compressing(server, "Z") and not _compressing(server, "N")

        async def update(nc: Client, _js: JetStreamContext) -> None:
            assert (await api(nc, "$JS.API.STREAM.UPDATE.Z", _body("Z", compression="none")))["config"]["compression"] == "none"
            assert (await api(nc, "$JS.API.STREAM.UPDATE.N", _body("N", compression="s2")))["config"]["compression"] == "s2"

        run_with(server.url, update)
        assert not _compressing(server, "Z") and _compressing(server, "N")
    with InProcessServer(options, jetstream_dir=store_dir) as server:  # the choice outlives a restart
        assert not _compressing(server, "Z") and _compressing(server, "N")
