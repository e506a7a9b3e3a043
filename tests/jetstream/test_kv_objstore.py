"""nats-py's KV and object store run unchanged on appliance JetStream."""

from __future__ import annotations

import asyncio

import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError

from appliance.testing.inproc import InProcessServer

from .conftest import run_with


def test_kv_put_get_update_create_delete_purge(js_server: InProcessServer) -> None:
    async def scenario(nc: Client, js: JetStreamContext) -> None:
        kv = await js.create_key_value(bucket="cfg", history=5)
        assert await kv.put("a", b"1") == 1
        assert await kv.put("a", b"2") == 2
        entry = await kv.get("a")
        assert (entry.value, entry.revision) == (b"2", 2)
        assert await kv.update("a", b"3", last=2) == 3
        with pytest.raises(KeyWrongLastSequenceError):
            await kv.update("a", b"x", last=1)
        with pytest.raises(KeyWrongLastSequenceError):
            await kv.create("a", b"x")
        assert await kv.create("b", b"new") == 4
        await kv.delete("b")
        with pytest.raises(KeyNotFoundError):
            await kv.get("b")
        assert await kv.create("b", b"again") == 6  # create over a delete marker is allowed
        await kv.purge("a")
        with pytest.raises(KeyNotFoundError):
            await kv.get("a")
        history = await kv.history("b")
        assert [e.operation for e in history] == [None, "DEL", None]
        status = await kv.status()
        assert status.bucket == "cfg" and status.history == 5

    run_with(js_server.url, scenario)


def test_kv_keys_history_and_watch(js_server: InProcessServer) -> None:
    async def scenario(nc: Client, js: JetStreamContext) -> None:
        kv = await js.create_key_value(bucket="w", history=3)
        for key, value in (("x", b"1"), ("y", b"2"), ("x", b"3")):
            await kv.put(key, value)
        assert sorted(await kv.keys()) == ["x", "y"]
        assert [e.value for e in await kv.history("x")] == [b"1", b"3"]
        watcher = await kv.watchall()
        initial = []
        async for entry in watcher:
            if entry is None:
                break
            initial.append((entry.key, entry.value))
        assert initial == [("y", b"2"), ("x", b"3")]
        await kv.put("z", b"4")
        update = await asyncio.wait_for(watcher.updates(timeout=5), 6)
        assert update is not None and (update.key, update.value) == ("z", b"4")
        await watcher.stop()

    run_with(js_server.url, scenario)


def test_object_store_put_get_list_delete(js_server: InProcessServer) -> None:
    async def scenario(nc: Client, js: JetStreamContext) -> None:
        store = await js.create_object_store("files")
        blob = bytes(range(256)) * 2000  # several chunks
        info = await store.put("blob.bin", blob)
        assert info.size == len(blob)
        await store.put("small.txt", b"hello")
        fetched = await store.get("blob.bin")
        assert fetched.data == blob
        assert sorted(i.name for i in await store.list()) == ["blob.bin", "small.txt"]
        await store.delete("small.txt")
        names = [i.name for i in await store.list(ignore_deletes=True)]
        assert names == ["blob.bin"]

    run_with(js_server.url, scenario)
