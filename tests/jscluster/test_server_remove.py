"""`$JS.API.SERVER.REMOVE` on a three-node cluster with a system account: nats-server's errors,
the evicted server leaves the meta group and every stream group (the stream goes on on the other
two, under-replicated), its copies are deleted, and when it comes back it is not added again —
until the peer-remove timeout has passed since its removal: then it is re-added and takes its
replicas back (nats-server re-adds a removed peer it hears from after peerRemoveTimeout)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest
from nats.errors import TimeoutError as NatsTimeout

from appliance.testing.process import free_port
from tests.jscluster.conftest import META_TIMEOUT_S, meta_leader
from tests.jscluster.test_peer_remove import Publisher, identical, info, peers, replica_states, until
from tests.routes.conftest import Node, wait_until

pytestmark = pytest.mark.timeout(240)
KIND = "io.nats.jetstream.api.v1.meta_server_remove_response"


def node_config(index: int, *, client: int, http: int, cluster: dict[int, int], store: Path,
                appliance: str = "workers: 1") -> str:
    routes = ", ".join(f"nats-route://127.0.0.1:{cluster[n]}" for n in cluster if n != index)
    return (f"server_name: n{index}-c1\nlisten: 127.0.0.1:{client}\nhttp: 127.0.0.1:{http}\n"
            f'jetstream {{ store_dir: "{store}" }}\n'
            "accounts {\n  SYS: { users: [{user: sys, password: sys}] }\n"
            "  APP: { jetstream: enabled, users: [{user: app, password: app}] }\n}\n"
            "system_account: SYS\n"
            f"cluster {{ name: C1, listen: 127.0.0.1:{cluster[index]}, routes: [{routes}] }}\n"
            f"appliance {{ {appliance} }}\n")


def start_cluster(tmp_path: Path, appliance: str) -> list[Node]:
    cluster = {n: free_port() for n in (1, 2, 3)}
    nodes = []
    for n in (1, 2, 3):
        client, http = free_port(), free_port()
        path = tmp_path / f"n{n}.conf"
        path.write_text(node_config(n, client=client, http=http, cluster=cluster, store=tmp_path / f"s{n}",
                                    appliance=appliance))
        nodes.append(Node(f"n{n}-c1", client, cluster[n], path, log_dir=tmp_path, http_port=http))
    return nodes


@pytest.fixture
def sys_cluster(tmp_path: Path) -> Iterator[list[Node]]:
    yield from _running(start_cluster(tmp_path, "workers: 1"))


@pytest.fixture
def quick_readd_cluster(tmp_path: Path) -> Iterator[list[Node]]:
    yield from _running(start_cluster(tmp_path, 'workers: 1, peer_remove_timeout: "4s"'))


def _running(nodes: list[Node]) -> Iterator[list[Node]]:
    try:
        for node in nodes:
            node.start()
        wait_until(lambda: meta_leader(nodes), "a meta leader", META_TIMEOUT_S)
        yield nodes
    finally:
        for node in nodes:
            node.stop()


async def remove(nc: nats.NATS, body: bytes) -> dict[str, object]:
    return json.loads((await nc.request("$JS.API.SERVER.REMOVE", body, timeout=5)).data)  # type: ignore[no-any-return]


async def stream_sr_published(nodes: list[Node], count: int) -> tuple[str, nats.NATS, nats.NATS, Publisher]:
    """Connect the app and system users to the meta leader, create the R3 stream SR and publish
    count messages to it: (the meta leader's name, app, system, the publisher)."""
    by_name = {node.name: node for node in nodes}
    leader = meta_leader(nodes)
    app = await nats.connect(by_name[leader].url, user="app", password="app", max_reconnect_attempts=-1)
    system = await nats.connect(by_name[leader].url, user="sys", password="sys", max_reconnect_attempts=-1)
    config = {"name": "SR", "subjects": ["sr.>"], "storage": "file", "num_replicas": 3}
    reply = json.loads((await app.request("$JS.API.STREAM.CREATE.SR", json.dumps(config).encode(), timeout=10)).data)
    assert "error" not in reply, reply
    publisher = Publisher(app.jetstream(), "sr.x")
    for i in range(count):
        await publisher.one(i, time.monotonic() + 60)
    return leader, app, system, publisher


async def evicted(app: nats.NATS, system: nats.NATS, leader: Node, victim: str, names: set[str]) -> None:
    """Remove victim with $JS.API.SERVER.REMOVE; wait until the meta group and SR are without it."""
    assert await remove(system, json.dumps({"peer": victim}).encode()) == {"type": KIND, "success": True}
    wait_until(lambda: leader.monitor("/jsz")["meta_cluster"]["cluster_size"] == 2,
               "the meta group without the evicted server", 30)
    await until(lambda: _peers_are(app, names - {victim}), "the stream on two peers")


def test_server_remove_evicts_a_server_for_good(sys_cluster: list[Node], tmp_path: Path) -> None:
    by_name = {node.name: node for node in sys_cluster}

    async def scenario() -> None:
        leader, app, system, publisher = await stream_sr_published(sys_cluster, 20)

        with pytest.raises(NatsTimeout):  # not the system account: nobody answers
            await app.request("$JS.API.SERVER.REMOVE", b'{"peer":"n2-c1"}', timeout=1)
        assert await remove(system, b"") == {
            "type": KIND, "error": {"code": 400, "err_code": 10003, "description": "bad request"}}
        assert await remove(system, b'{"server": "n3-c1"}') == {"type": KIND, "error": {
            "code": 400, "err_code": 10025, "description": 'invalid JSON: json: unknown field "server"'}}
        assert await remove(system, b'{"peer": "nope"}') == {"type": KIND, "error": {
            "code": 400, "err_code": 10044, "description": "server is not a member of the cluster"}}

        victim = next(name for name in by_name if name != leader)
        publisher.start()
        await evicted(app, system, by_name[leader], victim, set(by_name))
        wait_until(lambda: victim not in replica_states(sys_cluster, "SR"), "the evicted copy deleted", 30)
        assert await remove(system, json.dumps({"peer": victim}).encode()) == {"type": KIND, "error": {
            "code": 400, "err_code": 10044, "description": "server is not a member of the cluster"}}

        by_name[victim].stop()
        by_name[victim].start()
        wait_until(lambda: "is not added back to the meta group" in by_name[leader].log(),
                   "the refusal logged", 30)
        assert by_name[leader].monitor("/jsz")["meta_cluster"]["cluster_size"] == 2
        # (the stream's group re-elects while the victim's routes come back: ask until it answers)
        await until(lambda: _peers_are(app, set(by_name) - {victim}), "the stream still on two peers")
        await publisher.finish()
        count = len(publisher.acked)
        assert sorted(publisher.acked.values()) == list(range(1, count + 1))
        await until(lambda: _messages_are(app, count), f"{count} messages in the stream's info")
        await app.close()
        await system.close()

    asyncio.run(scenario())


def test_an_evicted_server_back_after_the_timeout_is_added_again(quick_readd_cluster: list[Node]) -> None:
    nodes = quick_readd_cluster
    by_name = {node.name: node for node in nodes}

    async def scenario() -> None:
        leader, app, system, publisher = await stream_sr_published(nodes, 10)
        victim = next(name for name in by_name if name != leader)
        await evicted(app, system, by_name[leader], victim, set(by_name))
        by_name[victim].stop()
        publisher.start()
        by_name[victim].start()  # back (within or after the 4 s: it is re-added once they have passed)
        wait_until(lambda: any("is back: adding it again" in node.log() for node in nodes), "the re-add logged", 60)
        wait_until(lambda: meta_size(nodes) == 3, "the meta group with the server again", 30)
        wait_until(lambda: "this server was added back to the cluster" in by_name[victim].log(),
                   "the server told it is back", 30)
        # an under-replicated stream takes a server that can hold it again: the re-added one
        await until(lambda: _peers_are(app, set(by_name)), "the stream on three peers again")
        await publisher.finish()
        count = len(publisher.acked)
        assert sorted(publisher.acked.values()) == list(range(1, count + 1))
        wait_until(lambda: identical(replica_states(nodes, "SR"), set(by_name), count),
                   f"three identical replicas of {count} messages, the re-added one among them", 60)
        await app.close()
        await system.close()

    asyncio.run(scenario())


def meta_size(nodes: list[Node]) -> int:
    """The meta group's size as its leader reports it (0 while there is none)."""
    leader = meta_leader(nodes)
    node = next((node for node in nodes if node.name == leader), None)
    return 0 if node is None else int(node.monitor("/jsz")["meta_cluster"]["cluster_size"])


async def _peers_are(nc: nats.NATS, wanted: set[str]) -> bool:
    return await peers(nc, "SR") == wanted


async def _messages_are(nc: nats.NATS, count: int) -> bool:
    """The stream's info counts `count` messages (an answer without state, during an election, is asked again)."""
    state = (await info(nc, "SR")).get("state")
    return isinstance(state, dict) and state.get("messages") == count
