"""RAFT's internal subjects over real routes: every clustered JetStream appliance node subscribes
$ARAFT.<its peer id>.> in the system account, the interest reaches every other node (appliance and
nats-server 2.15.1 alike), and a plain Go node takes it like any interest without harm."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.cluster.route_transport import peer_token
from appliance.testing.process import free_port
from tests.routes.conftest import Node, connect_all, make_node, mesh_ready, run, wait_until

pytestmark = pytest.mark.integration


def route_interest(node: Node) -> dict[str, list[str]]:
    """remote server name -> the subjects its route told `node` it wants."""
    routez = node.monitor("/routez?subs=1")
    routes = routez["routes"]
    assert isinstance(routes, list)
    return {str(r["remote_name"]): [str(s) for s in r.get("subscriptions_list", [])] for r in routes}


def test_raft_interest_crosses_routes_to_appliance_and_go_nodes(tmp_path: Path, cluster_nodes: list[Node]) -> None:
    names = ("a1", "a2", "g1")
    ports = {name: free_port() for name in names}
    nodes = []
    for name, kind, routes in (("a1", "appliance", ["a2", "g1"]), ("a2", "appliance", ["g1"]), ("g1", "go", [])):
        http = free_port()
        extra = f"http: 127.0.0.1:{http}\n"
        if kind == "appliance":
            extra += f"jetstream {{ store_dir: {tmp_path / name} }}\n"
        node = make_node(tmp_path, name, kind, ports, routes=routes, extra=extra)
        node.http_port = http
        nodes.append(node)
    for node in nodes:
        cluster_nodes.append(node.start())
    a1, a2, g1 = nodes
    wanted = {name: f"$ARAFT.{peer_token(name)}.>" for name in ("a1", "a2")}

    def raft_interest_everywhere() -> bool:
        here = {node.name: route_interest(node) for node in nodes}
        return (wanted["a2"] in here["a1"].get("a2", []) and wanted["a1"] in here["a2"].get("a1", [])
                and all(wanted[a] in here["g1"].get(a, []) for a in ("a1", "a2")))

    wait_until(raft_interest_everywhere, "every node to hold the $ARAFT interest of the appliance nodes", 20)
    assert not any("$ARAFT" in s for s in route_interest(a1).get("g1", []))  # a Go node has no RAFT here

    async def scenario() -> None:  # the Go node still routes ordinary traffic both ways
        clients = await connect_all(nodes)
        await mesh_ready(clients)
        for nc in clients:
            await nc.close()

    run(scenario)
    # nothing the Go node objected to, but its own pinned $SYS route it tries and drops (spec §1.2, §2)
    errors = [line for line in g1.log().splitlines() if "[ERR]" in line and "dedicated route" not in line]
    assert errors == []
