"""Direct get by subject (`$JS.API.DIRECT.GET.<stream>.<subject>`, how KV clients get a key):
the last message on the subject with its stored headers first, a body naming a message (seq, ...)
is 408 Bad Request as nats-server 2.15.1 answers it, and a subject with nothing stored is 404
Message Not Found."""

from __future__ import annotations

import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.errors import KeyNotFoundError

from appliance.testing.inproc import InProcessServer
from .conftest import run_with


def test_a_kv_get_sees_the_latest_value_a_delete_marker_and_a_missing_key(js_server: InProcessServer) -> None:
    async def scenario(nc: Client, js: JetStreamContext) -> None:
        kv = await js.create_key_value(bucket="cfg", history=3)
        await kv.put("a", b"1")
        await kv.put("a", b"2")
        await kv.put("b", b"x")
        entry = await kv.get("a")
        assert (entry.value, entry.revision) == (b"2", 2)
        await kv.delete("b")
        with pytest.raises(KeyNotFoundError) as deleted:  # nats-py: a delete marker reads as not found
            await kv.get("b")
        assert deleted.value.op == "DEL" and deleted.value.entry.revision == 4  # the marker itself
        with pytest.raises(KeyNotFoundError) as missing:  # a 404 from the server
            await kv.get("never")
        assert missing.value.op is None

    run_with(js_server.url, scenario)


def test_the_reply_carries_stored_headers_then_the_stream_headers(
    js_server: InProcessServer,
) -> None:
    async def scenario(nc: Client, js: JetStreamContext) -> None:
        await js.add_stream(name="D", subjects=["d.>"], allow_direct=True)
        await js.publish("d.k", b"v1", headers={"X-App": "one"})
        await js.publish("d.k", b"v2", headers={"X-App": "two"})
        refused = await nc.request("$JS.API.DIRECT.GET.D.d.k", b'{"seq":1}', timeout=5)
        assert refused.headers is not None
        assert (refused.headers["Status"], refused.headers.get("Description")) == ("408", "Bad Request")
        reply = await nc.request("$JS.API.DIRECT.GET.D.d.k", b'{"other":1}', timeout=5)  # unknown: ignored
        assert reply.data == b"v2" and reply.headers is not None
        assert reply.headers["X-App"] == "two"
        assert (reply.headers["Nats-Stream"], reply.headers["Nats-Subject"]) == ("D", "d.k")
        assert reply.headers["Nats-Sequence"] == "2"
        assert reply.headers["Nats-Time-Stamp"].endswith("Z")
        missing = await nc.request("$JS.API.DIRECT.GET.D.d.none", b"", timeout=5)
        assert missing.headers is not None
        assert (missing.headers["Status"], missing.headers.get("Description")) == ("404", "Message Not Found")

    run_with(js_server.url, scenario)
