"""The system account across routes: `$SYS.REQ.SERVER.PING` is answered by every server of the
cluster, so `appliance server ls` lists them all — appliance nodes of the seed-cluster-sys configs,
and a real nats-server node in a mixed cluster."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
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
    # we count the servers we have routes to; nats-server counts those whose $SYS.SERVER.<id>.STATSZ
    # events it heard (we send them as it does: 0.25 s after start, then doubling up to 10 s)
    assert answers["a1"]["statsz"]["active_servers"] == 3
    deadline = time.monotonic() + 20
    while True:
        go = next(a for a in server_ls_answers(nodes[0], 3) if a["server"]["name"] == "g1")
        if go["statsz"]["active_servers"] == 3:
            break
        assert time.monotonic() < deadline, f"g1 counts {go['statsz']['active_servers']} active servers"
        time.sleep(0.5)
    for name in ("a1", "g1"):
        assert sorted(r["name"] for r in answers[name]["statsz"]["routes"]) == sorted({"a1", "a2", "g1"} - {name})


def test_jsz_is_answered_by_every_node(tmp_path: Path, cluster_nodes: list[Node]) -> None:
    """`$SYS.REQ.SERVER.PING.JSZ` (what `nats server report jetstream` sends) reaches every server
    over the routes; each answers `{"server":{...},"data":{<its /jsz>}}`, Go nodes too."""
    ports = {"a1": free_port(), "a2": free_port(), "g1": free_port()}
    nodes = [make_node(tmp_path, "a1", "appliance", ports, routes=["a2"], extra=SYS_ACCOUNTS + "jetstream: enabled\n"),
             make_node(tmp_path, "a2", "appliance", ports, routes=[], extra=SYS_ACCOUNTS),
             make_node(tmp_path, "g1", "go", ports, routes=["a1", "a2"], extra=SYS_ACCOUNTS)]
    for node in nodes:
        node.config.write_text(node.config.read_text().replace("jetstream: enabled",
                                                                 f'jetstream {{ store_dir: "{tmp_path / node.name}" }}'))
        cluster_nodes.append(node.start())
    ready(nodes)

    async def ask(body: bytes) -> dict[str, dict[str, object]]:
        nc = await nats.connect(nodes[0].url, user=ADMIN[0], password=ADMIN[1])
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        await nc.publish("$SYS.REQ.SERVER.PING.JSZ", body, reply=inbox)
        answers: dict[str, dict[str, object]] = {}
        try:
            while len(answers) < 3:
                msg = await sub.next_msg(timeout=10)
                answer = json.loads(msg.data)
                answers[answer["server"]["name"]] = answer
        finally:
            await nc.close()
        return answers

    answers = asyncio.run(ask(b'{"accounts":true}'))
    assert sorted(answers) == ["a1", "a2", "g1"]
    for name, answer in answers.items():
        assert answer["data"]["server_id"] == answer["server"]["id"], name
    assert "config" in answers["a1"]["data"] and "config" not in answers["a2"]["data"]  # only a1 runs JetStream
    assert set(answers["a1"]["data"]) - {"config", "limits", "account_details", "meta_cluster"} <= \
        set(answers["g1"]["data"]) | {"streams", "consumers", "messages", "bytes", "total"}
    mistyped = asyncio.run(ask(b'{"streams":"yes"}'))
    for name in ("a1", "g1"):
        assert mistyped[name]["error"] == {
            "code": 400, "description": "json: cannot unmarshal string into Go struct field "
                                        "JszEventOptions.streams of type bool"}, (name, mistyped[name])
