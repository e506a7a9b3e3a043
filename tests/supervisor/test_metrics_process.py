"""/metrics of a real `appliance run` (2 workers, JetStream), scraped and parsed with prometheus-client's parser:
one scrape sums every worker."""

from __future__ import annotations

import asyncio
import re
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client as NATS
from prometheus_client.parser import text_string_to_metric_families

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
Start = Callable[..., Any]
MESSAGES = 50
Samples = dict[str, dict[tuple[tuple[str, str], ...], float]]


def scrape(http_port: int) -> tuple[str, list[str], Samples]:
    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=10) as response:
        content_type = response.headers["Content-Type"]
        text = response.read().decode()
    samples: Samples = {}
    families = []
    for family in text_string_to_metric_families(text):
        families.append(family.name)
        for sample in family.samples:
            samples.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return content_type, families, samples


async def on_worker(port: int, worker_index: int, workers: int = 2) -> NATS:
    """A client the kernel handed to this worker (worker k hands out client ids k+1, k+1+n, ...)."""
    for _ in range(100):
        client = await nats.connect(f"nats://127.0.0.1:{port}", connect_timeout=5, allow_reconnect=False)
        if client.client_id is not None and (client.client_id - 1) % workers == worker_index:
            return client
        await client.close()
    raise AssertionError(f"no connection landed on worker {worker_index}")


def test_one_scrape_sums_every_worker_and_names_follow_prometheus_conventions(
    start_supervisor: Start, tmp_path: Path
) -> None:
    config = tmp_path / "server.conf"
    config.write_text(f'host: 127.0.0.1\nport: -1\nhttp: "127.0.0.1:-1"\njetstream {{ store_dir: "{tmp_path}", sync_interval: always }}\n'
                      "appliance { workers: 2, cpu_pinning: false }\n")
    server = start_supervisor(command=[sys.executable, "-m", "appliance", "run", "-c", str(config)])
    server.wait_ready()
    found = re.search(r"Starting http monitor on 127\.0\.0\.1:(\d+)", server.wait_log("Starting http monitor"))
    assert found is not None
    http_port = int(found.group(1))

    async def traffic() -> tuple[str, list[str], Samples]:
        clients = [await on_worker(server.port, 0), await on_worker(server.port, 1), await on_worker(server.port, 1)]
        try:
            js = clients[1].jetstream()  # from worker 1: JetStream runs on worker 0, the request crosses
            await js.add_stream(name="ORDERS", subjects=["orders.>"])
            for index in range(MESSAGES):
                await js.publish(f"orders.{index}", b"x" * 10)
            await clients[0].subscribe("plain.>")
            await clients[0].flush()
            return scrape(http_port)
        finally:
            for client in clients:
                await client.close()

    content_type, families, samples = asyncio.run(traffic())
    assert content_type.startswith("text/plain; version=")  # the exposition format prometheus-client writes
    assert families and all(name.startswith("appliance_") for name in families)
    assert samples["appliance_client_connections"][()] == 3  # both workers' clients in one number
    assert samples["appliance_messages_received_total"][()] >= MESSAGES
    assert samples["appliance_subscriptions"][()] >= 1
    assert samples["appliance_jetstream_enabled"][()] == 1
    account = (("account", "$G"),)
    assert samples["appliance_jetstream_account_streams"][account] == 1
    assert samples["appliance_jetstream_account_messages"][account] == MESSAGES
    assert samples["appliance_jetstream_account_bytes"][account] > 0
    assert samples["appliance_jetstream_fsync_seconds_count"][()] > 0  # sync_interval: always fsyncs each batch
    # every message is made durable by exactly one group-commit fsync
    assert samples["appliance_jetstream_group_commit_messages_sum"][()] == MESSAGES
    assert samples["appliance_jetstream_fsync_seconds_bucket"][(("le", "+Inf"),)] == \
        samples["appliance_jetstream_fsync_seconds_count"][()]
    # RAFT groups held here (worker 0's JetStream): the meta group and the stream's, each its own leader
    groups = samples["appliance_raft_groups"]
    assert groups[(("kind", "meta"), ("state", "leader"))] == 1
    assert groups[(("kind", "stream"), ("state", "leader"))] == 1
    assert groups[(("kind", "stream"), ("state", "follower"))] == 0
    assert groups[(("kind", "stream"), ("state", "candidate"))] == 0
    assert samples["appliance_raft_leader_changes_total"][(("kind", "meta"),)] >= 1  # it elected itself
    assert samples["appliance_raft_leader_changes_total"][(("kind", "stream"),)] >= 1
    states = samples["appliance_worker_state"]
    assert states == {(("state", "ready"), ("worker", "0")): 1, (("state", "ready"), ("worker", "1")): 1}
    assert set(samples["appliance_worker_restarts_total"]) == {(("worker", "0"),), (("worker", "1"),)}
    assert all(0 <= value <= 1 for value in samples["appliance_worker_ring_occupancy_ratio"].values())
    assert sum(samples["appliance_worker_client_connections"].values()) >= 0
