"""/jsz and /healthz with JetStream running, and /jsz's shape next to the real nats-server's."""

from __future__ import annotations

import asyncio
import json
import socket
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest

from appliance.server.monitor_view import start_monitoring
from appliance.testing.inproc import InProcessServer
from appliance.testing.natsserver import NatsServer


def _get(port: int, path: str) -> tuple[int, dict[str, object]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.fixture
def monitored(store_dir: str) -> Iterator[tuple[InProcessServer, int]]:
    with InProcessServer(jetstream_dir=store_dir) as server:
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        listener.setblocking(False)
        core = server.server
        assert core is not None
        monitor = server.call_async(lambda: start_monitoring(core, listener))
        try:
            yield server, listener.getsockname()[1]
        finally:
            server.call_async(monitor.close)
            listener.close()


async def _fill(url: str) -> None:
    nc = await nats.connect(url, allow_reconnect=False)
    js = nc.jetstream()
    await js.add_stream(name="A", subjects=["a.>"])
    await js.publish("a.x", b"hello")
    await js.pull_subscribe("a.>", "DUR")
    await nc.close()


def test_jsz_reports_streams_consumers_and_config(monitored: tuple[InProcessServer, int]) -> None:
    server, port = monitored
    asyncio.run(asyncio.wait_for(_fill(server.url), 20))
    status, jsz = _get(port, "/jsz")
    assert status == 200
    assert (jsz["streams"], jsz["consumers"], jsz["messages"]) == (1, 1, 1)
    assert "account_details" not in jsz and jsz["total"] == 1
    _, detailed = _get(port, "/jsz?accounts=true&streams=true&consumers=true&config=true")
    (account,) = detailed["account_details"]  # type: ignore[misc]
    (stream,) = account["stream_detail"]
    assert stream["name"] == "A" and stream["config"]["subjects"] == ["a.>"]
    assert stream["state"]["messages"] == 1
    assert [c["name"] for c in stream["consumer_detail"]] == ["DUR"]
    _, varz = _get(port, "/varz")
    assert varz["jetstream"]["stats"]["api"]["level"] == 5  # type: ignore[index]


def test_healthz_with_jetstream(monitored: tuple[InProcessServer, int]) -> None:
    _, port = monitored
    for path in ("/healthz", "/healthz?js-enabled-only=true", "/healthz?js-server-only=true"):
        assert _get(port, path) == (200, {"status": "ok"})
    status, body = _get(port, "/healthz?account=$G&stream=NOPE")
    assert status == 404 or body["status"] != "ok"


@pytest.mark.integration
def test_jsz_has_the_keys_of_nats_server(tmp_path: Path, monitored: tuple[InProcessServer, int]) -> None:
    server, port = monitored
    asyncio.run(asyncio.wait_for(_fill(server.url), 20))
    http = _free_port()
    with NatsServer(["-js", "-sd", str(tmp_path / "ns"), "-m", str(http)]) as real:
        asyncio.run(asyncio.wait_for(_fill(real.url), 20))
        path = "/jsz?accounts=true&streams=true&consumers=true&config=true"
        _, theirs = _get(http, path)
    _, ours = _get(port, path)
    assert list(ours) == list(theirs)
    ours_stream = ours["account_details"][0]["stream_detail"][0]  # type: ignore[index]
    theirs_stream = theirs["account_details"][0]["stream_detail"][0]  # type: ignore[index]
    assert list(ours_stream) == list(theirs_stream)
    assert ours_stream["config"] == theirs_stream["config"]
    assert set(ours_stream["consumer_detail"][0]) == set(theirs_stream["consumer_detail"][0])


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
