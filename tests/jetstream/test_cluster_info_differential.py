"""The `cluster` block of stream and consumer answers, appliance vs the real nats-server 2.15.1:
standalone (both S1) and clustered R1 (a 3-node nats-server cluster C1 vs an appliance node of
cluster C1; an R1 asset has no RAFT group: {"name", "leader"}). Which answers carry the block,
where it sits among the keys, and its content (the leader's name masked: nats-server places an R1
stream on any of its three servers)."""

from __future__ import annotations

import asyncio
import json
import socket
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import nats
import pytest

from appliance.config.options import ServerOptions
from appliance.server.monitor_view import start_monitoring
from appliance.testing.inproc import InProcessServer
from appliance.testing.natsserver import NatsServer
from appliance.testing.process import free_port

NAMES = ["n1-c1", "n2-c1", "n3-c1"]
READY_TIMEOUT_S = 60.0
STREAM = b'{"name":"A","subjects":["a"],"num_replicas":1}'
CONSUMER = b'{"stream_name":"A","config":{"durable_name":"D","ack_policy":"explicit"}}'
REQUESTS = [
    ("$JS.API.STREAM.CREATE.A", STREAM),
    ("$JS.API.STREAM.INFO.A", b""),
    ("$JS.API.STREAM.UPDATE.A", STREAM.replace(b'"a"]', b'"a","b"]')),
    ("$JS.API.STREAM.LIST", b""),
    ("$JS.API.CONSUMER.CREATE.A.D", CONSUMER),
    ("$JS.API.CONSUMER.INFO.A.D", b""),
    ("$JS.API.CONSUMER.LIST.A", b""),
]


def node_config(name: str, store: Path, route_ports: list[int], own_route_port: int, http_port: int) -> str:
    routes = ", ".join(f"nats-route://127.0.0.1:{port}" for port in route_ports)
    return f"""
server_name: {name}
http: 127.0.0.1:{http_port}
jetstream {{ store_dir: "{store}" }}
cluster {{ name: C1, listen: 127.0.0.1:{own_route_port}, routes: [{routes}] }}
"""


def shapes(answers: list[dict[str, object]]) -> list[object]:
    """Per answer: its keys in order and its cluster block (in lists: of the first item)."""
    out: list[object] = []
    for answer in answers:
        assert "error" not in answer, answer
        items = answer.get("streams") or answer.get("consumers")
        item = items[0] if isinstance(items, list) else answer
        assert isinstance(item, dict)
        cluster = item.get("cluster")
        if isinstance(cluster, dict) and "leader" in cluster:
            assert cluster["leader"] in (*NAMES, "S1")
            cluster = {**cluster, "leader": "<server>"}
        out.append((list(item), cluster))
    return out


async def ask_all(url: str) -> list[dict[str, object]]:
    nc = await nats.connect(url, allow_reconnect=False)
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:  # a cluster answers once its meta group has a leader
            try:
                first = json.loads((await nc.request(REQUESTS[0][0], REQUESTS[0][1], timeout=2)).data)
                if "error" not in first:
                    break
            except nats.errors.TimeoutError:
                pass
            assert time.monotonic() < deadline, "JetStream never became ready"
            await asyncio.sleep(0.25)
        answers = [first]
        for subject, body in REQUESTS[1:]:
            answers.append(json.loads((await nc.request(subject, body, timeout=5)).data))
        return answers
    finally:
        await nc.close()


def answers_of(url: str) -> list[dict[str, object]]:
    return asyncio.run(asyncio.wait_for(ask_all(url), READY_TIMEOUT_S + 30))


def test_standalone_answers_carry_the_block_where_nats_server_does(tmp_path: Path) -> None:
    options = ServerOptions()
    options.server_name = "S1"
    with (
        NatsServer(["-js", "-sd", str(tmp_path / "ns"), "-n", "S1"]) as real,
        InProcessServer(options, jetstream_dir=str(tmp_path / "ours")) as ours,
    ):
        theirs = shapes(answers_of(real.url))
        assert theirs[1][1] == {"leader": "<server>"}  # only STREAM.INFO has it on a standalone server
        assert shapes(answers_of(ours.url)) == theirs


@pytest.fixture
def real_cluster(tmp_path: Path) -> Iterator[tuple[str, int]]:
    """(n1-c1's client URL, its monitoring port)."""
    route_ports = [free_port() for _ in NAMES]
    http_ports = [free_port() for _ in NAMES]
    with ExitStack() as stack:
        urls = []
        for name, route_port, http_port in zip(NAMES, route_ports, http_ports, strict=True):
            config = tmp_path / f"{name}.conf"
            config.write_text(node_config(name, tmp_path / name, route_ports, route_port, http_port))
            urls.append(stack.enter_context(NatsServer(["-c", str(config)], log_path=tmp_path / f"{name}.log")).url)
        yield urls[0], http_ports[0]


def jsz(port: int) -> dict[str, Any]:
    answer = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/jsz", timeout=5).read())
    assert isinstance(answer, dict)
    return answer


@pytest.mark.integration
@pytest.mark.slow
def test_clustered_r1_answers_carry_name_and_leader_as_nats_server(
    real_cluster: tuple[str, int], tmp_path: Path
) -> None:
    url, http_port = real_cluster
    theirs = shapes(answers_of(url))
    assert all(cluster == {"name": "C1", "leader": "<server>"} for _, cluster in theirs)
    their_meta = jsz(http_port)["meta_cluster"]
    options = ServerOptions()
    options.server_name = "n1-c1"
    options.cluster.name = "C1"
    options.cluster.host = "127.0.0.1"
    options.cluster.port = free_port()
    with InProcessServer(options, jetstream_dir=str(tmp_path / "ours")) as ours:
        assert shapes(answers_of(ours.url)) == theirs
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        listener.setblocking(False)
        core = ours.server
        assert core is not None
        monitor = ours.call_async(lambda: start_monitoring(core, listener))
        try:
            our_meta = jsz(listener.getsockname()[1])["meta_cluster"]
        finally:
            ours.call_async(monitor.close)
            listener.close()
    # /jsz meta_cluster: the same keys in the same order (ours is a meta group of one voter so far:
    # no replicas), the cluster's name, the leader and its peer id
    assert [key for key in their_meta if key != "replicas"] == list(our_meta)
    assert (our_meta["name"], our_meta["leader"], our_meta["cluster_size"], our_meta["quorum_needed"]) == (
        "C1", "n1-c1", 1, 1)
    assert isinstance(our_meta["peer"], str) and our_meta["peer"]  # (this server's peer id)
