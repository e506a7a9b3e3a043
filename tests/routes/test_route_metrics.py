"""/metrics of a 2-server appliance cluster: per route (peer) messages and bytes each way and the round trip,
parsed with prometheus-client's parser."""

from __future__ import annotations

import asyncio
import urllib.request
from pathlib import Path

import nats
import pytest
from prometheus_client.parser import text_string_to_metric_families

from appliance.testing.process import free_port
from tests.routes.conftest import Node, make_node, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
MESSAGES = 40
Samples = dict[str, dict[tuple[tuple[str, str], ...], float]]


def scrape(node: Node) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{node.http_port}/metrics", timeout=10) as response:
        text = response.read().decode()
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def per_peer(samples: Samples, name: str, peer: str) -> float | None:
    for labels, value in samples.get(name, {}).items():
        if dict(labels).get("peer") == peer:
            return value
    return None


def test_route_metrics_per_peer(tmp_path: Path, cluster_nodes: list[Node]) -> None:
    ports = {"a": free_port(), "b": free_port()}
    nodes = []
    for name, routes in (("a", ["b"]), ("b", [])):
        http = free_port()
        node = make_node(tmp_path, name, "appliance", ports, routes=routes, workers=1,
                         extra=f"http: 127.0.0.1:{http}", cluster_extra='  ping_interval: "1s"')
        node.http_port = http
        nodes.append(node)
    a, b = nodes
    for node in nodes:
        cluster_nodes.append(node.start())
    wait_until(lambda: a.monitor("/routez")["num_routes"] == 1 == b.monitor("/routez")["num_routes"], "the route")

    async def traffic() -> None:
        subscriber = await nats.connect(b.url, connect_timeout=5)
        publisher = await nats.connect(a.url, connect_timeout=5)
        try:
            got: list[bytes] = []
            done = asyncio.Event()

            async def on_msg(msg: nats.aio.msg.Msg) -> None:
                got.append(msg.data)
                if len(got) == MESSAGES:
                    done.set()

            await subscriber.subscribe("metrics.x", cb=on_msg)
            await subscriber.flush()
            await asyncio.to_thread(wait_until, lambda: "metrics.x" in str(a.monitor("/routez?subs=1")),
                                    "b's interest on a")
            for _ in range(MESSAGES):
                await publisher.publish("metrics.x", b"y" * 10)
            await publisher.flush()
            await asyncio.wait_for(done.wait(), 20)
        finally:
            await publisher.close()
            await subscriber.close()

    asyncio.run(traffic())
    wait_until(lambda: per_peer(scrape(a), "appliance_route_rtt_seconds", "b") is not None, "a route rtt")
    sent, received = scrape(a), scrape(b)
    assert (per_peer(sent, "appliance_route_messages_sent_total", "b") or 0) >= MESSAGES
    assert (per_peer(sent, "appliance_route_bytes_sent_total", "b") or 0) >= MESSAGES * 10
    assert (per_peer(received, "appliance_route_messages_received_total", "a") or 0) >= MESSAGES
    assert (per_peer(received, "appliance_route_bytes_received_total", "a") or 0) >= MESSAGES * 10
    rtt = per_peer(sent, "appliance_route_rtt_seconds", "b")
    # measured with the loop's clock: uvloop's has millisecond resolution, so 127.0.0.1 may read 0
    assert rtt is not None and 0 <= rtt < 5
