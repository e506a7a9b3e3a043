"""The system account across routes: `$SYS.REQ.SERVER.PING` is answered by every server of the
cluster, so `appliance server ls` lists them all — appliance nodes of the seed-cluster-sys configs,
and a real nats-server node in a mixed cluster."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import nats
import pytest

from appliance.testing.process import free_port
from tests.routes.conftest import Node, make_node, mesh_ready, run, seed_cluster

pytestmark = pytest.mark.integration

ADMIN = ("admin", "a very long s3cr3t! password")
SYS_ACCOUNTS = """
accounts {
  $SYS { users = [ { user: "admin", pass: "$2a$11$tMb1WXkiklsjKKWXZJI0rOoUCYMV2Mm9SsWFfRbXhxfQFgncVfkR6" } ] }
  APP { users = [ { user: "app", pass: "app" } ] }
}
"""


def server_ls_answers(node: Node, expect: int) -> list[dict[str, dict[str, object]]]:
    done = subprocess.run([sys.executable, "-m", "appliance", "server", "ls", str(expect), "--json", "-s", node.url,
                           "--user", ADMIN[0], "--password", ADMIN[1], "--timeout", "10"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def server_ls(node: Node, expect: int) -> list[str]:
    return sorted(str(answer["server"]["name"]) for answer in server_ls_answers(node, expect))


def ready(nodes: list[Node]) -> None:
    async def scenario() -> None:
        clients = [await nats.connect(node.url, user=ADMIN[0], password=ADMIN[1]) for node in nodes]
        await mesh_ready(clients)
        for nc in clients:
            await nc.close()

    run(scenario)


def test_server_ls_lists_the_seed_cluster(tmp_path: Path, cluster_nodes: list[Node]) -> None:
    nodes = seed_cluster(tmp_path, variant="seed-cluster-sys", workers=2)
    for node in nodes:
        cluster_nodes.append(node.start())
    ready(nodes)
    for node in nodes:
        assert server_ls(node, 3) == ["n1-c1", "n2-c1", "n3-c1"]


def test_server_ls_lists_a_go_node_and_go_asks_us(tmp_path: Path, cluster_nodes: list[Node]) -> None:
    ports = {"a1": free_port(), "a2": free_port(), "g1": free_port()}
    nodes = [make_node(tmp_path, "a1", "appliance", ports, routes=["a2"], extra=SYS_ACCOUNTS),
             make_node(tmp_path, "a2", "appliance", ports, routes=[], extra=SYS_ACCOUNTS),
             make_node(tmp_path, "g1", "go", ports, routes=["a1", "a2"], extra=SYS_ACCOUNTS)]
    for node in nodes:
        cluster_nodes.append(node.start())
    ready(nodes)
    for node in nodes:
        assert server_ls(node, 3) == ["a1", "a2", "g1"]
    answers = {answer["server"]["name"]: answer for answer in server_ls_answers(nodes[0], 3)}
    # our statsz has nats-server's fields, in its order; and the same route picture
    assert list(answers["a1"]["statsz"]) == list(answers["g1"]["statsz"])
    assert list(answers["a1"]["server"]) == [k for k in answers["g1"]["server"] if k != "feature_flags"]
    # (nats-server counts active_servers from the $SYS.SERVER.<id>.STATSZ events servers send; we
    # send none yet, so g1 counts only itself; we count the servers we have routes to)
    assert answers["a1"]["statsz"]["active_servers"] == 3
    for name in ("a1", "g1"):
        assert sorted(r["name"] for r in answers[name]["statsz"]["routes"]) == sorted({"a1", "a2", "g1"} - {name})
