"""STREAM.PEER.REMOVE replies, byte for byte (JSON compared), against a nats-server 2.15.1
cluster: the seed's three-node configuration run by appliance and by nats-server side by side,
an R3 stream on each, the same requests to both. Where appliance goes beyond nats-server (a
removal without a spare server succeeds, nats-server answers 10075) the difference is asserted."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest
from nats.errors import TimeoutError as NatsTimeout

from tests.jscluster.conftest import META_TIMEOUT_S, meta_leader
from tests.routes.conftest import Node, seed_cluster, wait_until

pytestmark = pytest.mark.timeout(240)

REQUESTS = [
    ("R3", b""),
    ("R3", b"{"),
    ("R3", b'{"peer": ""}'),
    ("R3", b'{"peer": "nope"}'),
    ("R3", b'{"peer": 5}'),
    ("NOSUCH", b'{"peer": "n2-c1"}'),
]


@pytest.fixture
def go_cluster(tmp_path: Path) -> Iterator[list[Node]]:
    go_dir = tmp_path / "go"
    go_dir.mkdir()
    nodes = seed_cluster(go_dir, workers=1)
    for node in nodes:
        node.kind = "go"
        text = node.config.read_text()
        node.config.write_text(text[: text.index("\nappliance {")] + "\n")  # nats-server knows no such block
    try:
        for node in nodes:
            node.start()
        yield nodes
    finally:
        for node in nodes:
            node.stop()


async def ask(url: str, requests: list[tuple[str, bytes]], *, expect_leader: bool) -> list[dict[str, object]]:
    nc = await nats.connect(url)
    try:
        config = {"name": "R3", "subjects": ["r3.>"], "num_replicas": 3}
        reply: dict[str, object] = {}
        for _ in range(100):  # a Go cluster needs a moment for its meta leader (silent until then)
            try:
                reply = json.loads((await nc.request("$JS.API.STREAM.CREATE.R3", json.dumps(config).encode(),
                                                     timeout=2)).data)
            except NatsTimeout:
                continue
            if "error" not in reply or reply["error"]["err_code"] == 10058:  # type: ignore[index]  # 10058: exists
                break
            await asyncio.sleep(0.2)
        assert "error" not in reply, reply
        out = []
        for stream, body in requests:
            msg = await nc.request(f"$JS.API.STREAM.PEER.REMOVE.{stream}", body, timeout=5)
            out.append(json.loads(msg.data))
        return out
    finally:
        await nc.close()


def test_peer_remove_errors_match_nats_server(js_cluster: list[Node], go_cluster: list[Node]) -> None:
    ours = asyncio.run(ask(js_cluster[0].url, REQUESTS, expect_leader=True))
    theirs = asyncio.run(ask(go_cluster[0].url, REQUESTS, expect_leader=True))
    assert ours == theirs
    # beyond nats-server: without a spare server it answers 10075, appliance removes the peer
    ours_remove = asyncio.run(ask(js_cluster[0].url, [("R3", b'{"peer": "n3-c1"}')], expect_leader=True))
    theirs_remove = asyncio.run(ask(go_cluster[0].url, [("R3", b'{"peer": "n3-c1"}')], expect_leader=True))
    assert theirs_remove == [{"type": "io.nats.jetstream.api.v1.stream_remove_peer_response",
                              "error": {"code": 503, "err_code": 10075, "description": "peer remap failed"}}]
    assert ours_remove == [{"type": "io.nats.jetstream.api.v1.stream_remove_peer_response", "success": True}]
    wait_until(lambda: meta_leader(js_cluster), "a meta leader", META_TIMEOUT_S)
