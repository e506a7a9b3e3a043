"""A three-node cluster with a system account user and a JetStream account, for the step-down tests:
the same config for appliance nodes and for real nats-server 2.15.1 nodes (differential tests)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import nats
from nats.aio.client import Client as NATS

from appliance.testing.process import free_port
from tests.routes.conftest import Node, wait_until

NAMES = ("n1-c1", "n2-c1", "n3-c1")
TAGS = {"n1-c1": "az:1", "n2-c1": "az:2", "n3-c1": "az:3"}
APP = {"user": "app", "password": "app"}
SYS = {"user": "sys", "password": "sys"}
READY_TIMEOUT_S = 60.0
T = TypeVar("T")


def node_config(name: str, *, client: int, http: int, store: Path, cluster_ports: dict[str, int],
                appliance: bool) -> str:
    routes = ", ".join(f"nats-route://127.0.0.1:{port}" for other, port in cluster_ports.items() if other != name)
    extra = "appliance { workers: 2 }\n" if appliance else ""
    return f"""server_name: {name}
listen: 127.0.0.1:{client}
http: 127.0.0.1:{http}
server_tags: ["{TAGS[name]}"]
jetstream {{ store_dir: "{store}" }}
accounts {{
  SYS: {{ users: [{{user: sys, password: sys}}] }}
  APP: {{ jetstream: enabled, users: [{{user: app, password: app}}] }}
}}
system_account: SYS
cluster {{ name: C1, listen: 127.0.0.1:{cluster_ports[name]}, routes: [{routes}] }}
{extra}"""


def make_cluster(tmp_path: Path, kind: str) -> list[Node]:
    """Three nodes of `kind` ("appliance" or "go"), not started."""
    cluster_ports = {name: free_port() for name in NAMES}
    nodes = []
    for name in NAMES:
        client, http = free_port(), free_port()
        path = tmp_path / f"{name}.conf"
        path.write_text(node_config(name, client=client, http=http, store=tmp_path / f"store-{name}",
                                    cluster_ports=cluster_ports, appliance=kind == "appliance"))
        nodes.append(Node(name, client, cluster_ports[name], path, kind=kind, log_dir=tmp_path, http_port=http))
    return nodes


async def connect(node: Node, who: dict[str, str]) -> NATS:
    return await nats.connect(node.url, max_reconnect_attempts=-1, **who)


async def api(nc: NATS, subject: str, body: object = None, *, timeout_s: float = 5.0) -> dict[str, object]:
    data = b"" if body is None else body if isinstance(body, bytes) else json.dumps(body).encode()
    msg = await nc.request(subject, data, timeout=timeout_s)
    return json.loads(msg.data)  # type: ignore[no-any-return]


async def api_until_ok(nc: NATS, subject: str, body: object = None, *,
                       timeout_s: float = READY_TIMEOUT_S) -> dict[str, object]:
    """Repeat a request until it answers without an error (the cluster settles)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            answer = await api(nc, subject, body, timeout_s=2.0)
            if "error" not in answer:
                return answer
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError) as exc:
            answer = {"exception": repr(exc)}
        assert time.monotonic() < deadline, f"{subject}: {answer}"
        await asyncio.sleep(0.2)


async def settled_leader(nc: NATS, subject: str, *, timeout_s: float = READY_TIMEOUT_S) -> dict[str, object]:
    """An INFO answer whose group has a leader and every replica current."""
    deadline = time.monotonic() + timeout_s
    while True:
        info = await api_until_ok(nc, subject, timeout_s=timeout_s)
        cluster = info.get("cluster") or {}
        assert isinstance(cluster, dict)
        replicas = cluster.get("replicas") or []
        if cluster.get("leader") and replicas and all(r.get("current") for r in replicas):  # type: ignore[union-attr]
            return info
        assert time.monotonic() < deadline, info
        await asyncio.sleep(0.1)


async def leader_of(nc: NATS, subject: str) -> str:
    try:
        info = await api(nc, subject, timeout_s=1.0)
    except (nats.errors.TimeoutError, nats.errors.NoRespondersError):
        return ""
    cluster = info.get("cluster") or {}
    return str(cluster.get("leader", "")) if isinstance(cluster, dict) else ""


async def meta_leader(sys_nc: NATS, *, timeout_s: float = 2.0) -> str:
    """The meta leader's name, as the meta leader answers `$SYS.REQ.SERVER.PING.JSZ` ("" if none
    answers within `timeout_s`: a server answers only while it leads)."""
    try:
        msg = await sys_nc.request("$SYS.REQ.SERVER.PING.JSZ", b'{"leader_only":true}', timeout=timeout_s)
    except (nats.errors.TimeoutError, nats.errors.NoRespondersError):
        return ""
    data = json.loads(msg.data).get("data") or {}
    return str((data.get("meta_cluster") or {}).get("leader", ""))


def start(nodes: list[Node]) -> None:
    for node in nodes:
        node.start()


def stop(nodes: list[Node]) -> None:
    for node in nodes:
        node.stop()


def wait_for_meta(nodes: list[Node]) -> None:
    async def known() -> str:
        nc = await connect(nodes[0], SYS)
        try:
            return await meta_leader(nc)
        finally:
            await nc.close()

    wait_until(lambda: asyncio.run(known()), "a meta leader", READY_TIMEOUT_S)


def run_started(nodes: list[Node], scenario: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Start the nodes, wait for a meta leader, run scenario; the nodes are stopped however it ends."""
    try:
        start(nodes)
        wait_for_meta(nodes)
        return asyncio.run(scenario())
    finally:
        stop(nodes)


def run_app_script(nodes: list[Node], script: Callable[[NATS], Awaitable[T]]) -> T:
    """run_started with script given a connection of the JetStream account's user to the first node."""

    async def scenario() -> T:
        nc = await connect(nodes[0], APP)
        try:
            return await script(nc)
        finally:
            await nc.close()

    return run_started(nodes, scenario)
