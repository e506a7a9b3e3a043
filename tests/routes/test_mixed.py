"""Mixed clusters: appliance nodes and real nats-server 2.15.1 nodes (plain, no JetStream) as members
of one cluster, whichever side dials; a partial routes list becomes a full mesh by gossip."""

from __future__ import annotations

import asyncio
import collections
from pathlib import Path

import pytest
from nats.aio.msg import Msg

from appliance.testing.clients import flush_after_subs
from appliance.testing.process import ApplianceProcess, free_port
from tests.routes.conftest import Node, connect_all, interest_everywhere, make_node, mesh_ready, run

pytestmark = pytest.mark.integration

MESSAGES = 2_000

# name -> (kind, routes it dials)
TOPOLOGIES = {
    "aaG-go-dials": {"a1": ("appliance", ["a2"]), "a2": ("appliance", []), "g1": ("go", ["a1", "a2"])},
    "aaG-appliance-dials": {"a1": ("appliance", ["a2", "g1"]), "a2": ("appliance", ["g1"]), "g1": ("go", [])},
    "aGG-go-dials": {"a1": ("appliance", []), "g1": ("go", ["a1"]), "g2": ("go", ["a1", "g1"])},
    "aGG-appliance-dials": {"a1": ("appliance", ["g1", "g2"]), "g1": ("go", []), "g2": ("go", ["g1"])},
    "aaG-gossip": {"a1": ("appliance", ["g1"]), "a2": ("appliance", ["g1"]), "g1": ("go", [])},
}


def start_topology(tmp_path: Path, cluster_nodes: list[Node], topology: str) -> list[Node]:
    spec = TOPOLOGIES[topology]
    ports = {name: free_port() for name in spec}
    nodes = [make_node(tmp_path, name, kind, ports, routes=routes) for name, (kind, routes) in spec.items()]
    for node in nodes:
        cluster_nodes.append(node.start())
    return nodes


@pytest.mark.parametrize("topology", list(TOPOLOGIES))
def test_mixed_cluster_carries_plain_queue_and_requests(tmp_path: Path, cluster_nodes: list[Node],
                                                        topology: str) -> None:
    nodes = start_topology(tmp_path, cluster_nodes, topology)

    async def scenario() -> None:
        clients = await connect_all(nodes)
        await mesh_ready(clients)
        plain: collections.Counter[int] = collections.Counter()
        probes: collections.Counter[int] = collections.Counter()
        seen: collections.Counter[tuple[int, bytes]] = collections.Counter()
        served: collections.Counter[bytes] = collections.Counter()
        by_node: collections.Counter[int] = collections.Counter()
        for index, nc in enumerate(clients):
            async def on_plain(msg: Msg, index: int = index) -> None:
                if msg.subject == "mix.probe":
                    probes[index] += 1
                else:
                    plain[index] += 1
                    seen[(index, msg.data)] += 1

            async def on_queue(msg: Msg, index: int = index) -> None:
                if msg.subject == "mix.probe":
                    return
                served[msg.data] += 1
                by_node[index] += 1

            async def on_request(msg: Msg, index: int = index) -> None:
                await msg.respond(f"{nodes[index].name}:{msg.data.decode()}".encode())

            await nc.subscribe("mix.*", cb=on_plain)
            await nc.subscribe("mix.>", queue="q", cb=on_queue)
            await nc.subscribe(f"ask.{nodes[index].name}", cb=on_request)
            await flush_after_subs(nc)
        await interest_everywhere(clients, "mix.probe", len(clients), lambda: sum(probes.values()))
        await asyncio.sleep(0.5)
        plain.clear()
        served.clear()
        by_node.clear()
        for i in range(MESSAGES):
            await clients[i % len(clients)].publish("mix.data", b"%d" % i, headers={"N": str(i)} if i % 2 else None)
        for nc in clients:
            await nc.flush()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while (sum(plain.values()) < len(clients) * MESSAGES or len(served) < MESSAGES) and loop.time() < deadline:
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.5)
        doubled = sorted((index, int(data)) for (index, data), n in seen.items() if n > 1)
        assert [plain[i] for i in range(len(clients))] == [MESSAGES] * len(clients), (
            f"doubled (subscriber, message): {doubled}")
        assert len(served) == MESSAGES and set(served.values()) == {1}
        assert len(by_node) == len(clients), by_node  # the group spans both kinds of server
        # requests from every node to a responder on every node, replies back across the route
        for asker in clients:
            for index, node in enumerate(nodes):
                answer = await asker.request(f"ask.{node.name}", b"hi", timeout=5)
                assert answer.data == f"{node.name}:hi".encode()
        for nc in clients:
            await nc.close()

    run(scenario)
    go_logs = "".join(node.log() for node in nodes if node.kind == "go")
    assert "Authorization Violation" not in go_logs and "duplicate name" not in go_logs


def test_cluster_from_command_line_flags(tmp_path: Path, cluster_nodes: list[Node]) -> None:
    """--cluster, --cluster_name and --routes as nats-server takes them (no config file), toward a Go node."""
    ports = {"g1": free_port()}
    go = make_node(tmp_path, "g1", "go", ports, routes=[])
    cluster_nodes.append(go.start())
    client_port, cluster_port = free_port(), free_port()
    process = ApplianceProcess(["-a", "127.0.0.1", "-p", str(client_port), "-n", "flags",
                                "--cluster", f"nats://127.0.0.1:{cluster_port}", "--cluster_name", "C1",
                                "--routes", f"nats-route://127.0.0.1:{go.cluster_port}"], log_dir=tmp_path)
    ours = Node("flags", client_port, cluster_port, tmp_path / "none", log_dir=tmp_path, process=process)
    process.start()
    cluster_nodes.append(ours)

    async def scenario() -> None:
        clients = await connect_all([ours, go])
        await mesh_ready(clients)
        for nc in clients:
            await nc.close()

    run(scenario)
    assert f"Listening for route connections on 127.0.0.1:{cluster_port}" in process.log()
