"""The seed's three servers (config/seed-cluster*, ports rewritten) form one cluster over routes.

Each node runs two workers, and the clients of each test sit on both workers of each node, so a
message crosses ring links and routes in every combination."""

from __future__ import annotations

import asyncio
import collections
import signal
from pathlib import Path

import nats
import pytest
from nats.aio.msg import Msg
from nats.errors import NoRespondersError

from appliance.testing.clients import connect_on, flush_after_subs
from tests.routes.conftest import Node, interest_everywhere, mesh_ready, routed, run, seed_cluster, wait_until

pytestmark = pytest.mark.integration

MESSAGES = 10_000


@pytest.fixture
def seed(tmp_path: Path, cluster_nodes: list[Node]) -> list[Node]:
    nodes = seed_cluster(tmp_path)
    for node in nodes:
        cluster_nodes.append(node.start())
    return nodes


def test_pub_on_n1_reaches_sub_on_n3_with_headers_and_request_reply(seed: list[Node]) -> None:
    n1, n2, n3 = seed

    async def scenario() -> None:
        pubs = [await connect_on(n1.url, w, 2) for w in (0, 1)]
        subs = [await connect_on(n3.url, w, 2) for w in (0, 1)]
        for p in pubs:
            for s in subs:
                await routed(p, s)
        got: dict[int, list[Msg]] = {0: [], 1: []}
        for index, nc in enumerate(subs):
            async def on_msg(msg: Msg, index: int = index) -> None:
                got[index].append(msg)
            await nc.subscribe("orders.>", cb=on_msg)
            await flush_after_subs(nc)
        await interest_everywhere(pubs, "orders.probe", 2, lambda: len(got[0]) + len(got[1]))
        for msgs in got.values():
            msgs.clear()
        for p in pubs:
            await p.publish("orders.new", b"with headers", headers={"Nats-Msg-Id": "1", "X-Trace": "a b"})
            await p.publish("orders.plain", b"plain", reply="reply.to")
            await p.flush()
        wait = asyncio.get_running_loop().time() + 10
        while sum(len(m) for m in got.values()) < 8 and asyncio.get_running_loop().time() < wait:
            await asyncio.sleep(0.05)
        for msgs in got.values():
            assert len(msgs) == 4
            headed = [m for m in msgs if m.subject == "orders.new"]
            assert [m.headers for m in headed] == [{"Nats-Msg-Id": "1", "X-Trace": "a b"}] * 2
            assert all(m.data == b"with headers" for m in headed)
            assert [m.reply for m in msgs if m.subject == "orders.plain"] == ["reply.to"] * 2

        async def responder(msg: Msg) -> None:
            await msg.respond(b"answer from n3: " + msg.data)

        await subs[1].subscribe("svc.echo", cb=responder)
        await flush_after_subs(subs[1])
        for p in pubs:
            deadline = asyncio.get_running_loop().time() + 30
            while True:
                try:
                    answer = await p.request("svc.echo", b"hi", timeout=1)
                    break
                except (NoRespondersError, nats.errors.TimeoutError):
                    assert asyncio.get_running_loop().time() < deadline
            assert answer.data == b"answer from n3: hi"
        # no-responders only when nobody anywhere listens
        n2c = await nats.connect(n2.url)
        await routed(n2c, subs[0])
        with pytest.raises(NoRespondersError):
            await n2c.request("nobody.home", b"x", timeout=5)
        answer = await n2c.request("svc.echo", b"from n2", timeout=5)
        assert answer.data == b"answer from n3: from n2"
        for nc in [*pubs, *subs, n2c]:
            await nc.close()

    run(scenario)


def test_wildcard_and_queue_subscribers_on_all_three_exactly_once(seed: list[Node]) -> None:
    async def scenario() -> None:
        clients = [await connect_on(node.url, w, 2) for node in seed for w in (0, 1)]
        await mesh_ready(clients[::2])
        plain: collections.Counter[int] = collections.Counter()
        per_group: dict[str, collections.Counter[bytes]] = {"workers": collections.Counter(),
                                                            "auditors": collections.Counter()}
        taken: collections.Counter[tuple[str, int]] = collections.Counter()
        runs: collections.Counter[tuple[int, bytes]] = collections.Counter()
        for index, nc in enumerate(clients):
            async def on_plain(msg: Msg, index: int = index) -> None:
                plain[index] += 1
                if msg.subject == "jobs.run":
                    runs[(index, msg.data)] += 1

            await nc.subscribe("jobs.*", cb=on_plain)
            for group in per_group:
                async def on_queue(msg: Msg, index: int = index, group: str = group) -> None:
                    if msg.subject != "jobs.run":
                        return
                    per_group[group][msg.data] += 1
                    taken[(group, index)] += 1

                await nc.subscribe("jobs.>", queue=group, cb=on_queue)
            await flush_after_subs(nc)
        # every wildcard subscriber (6) sees a probe from every node
        await interest_everywhere(clients[::2], "jobs.probe", 6, lambda: sum(plain.values()))
        await asyncio.sleep(0.5)
        runs.clear()
        for counter in per_group.values():
            counter.clear()
        taken.clear()
        publishers = clients  # both workers of each node: sibling links and routes in every combination
        for i in range(MESSAGES):
            await publishers[i % len(publishers)].publish("jobs.run", b"%d" % i)
        for p in publishers:
            await p.flush()
        deadline = asyncio.get_running_loop().time() + 60
        while (len(runs) < 6 * MESSAGES or any(sum(c.values()) < MESSAGES for c in per_group.values())) \
                and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.5)  # anything extra would show now
        assert len(runs) == 6 * MESSAGES, len(runs)  # every wildcard subscriber got every message
        assert set(runs.values()) == {1}, [k for k, v in runs.items() if v != 1][:5]  # once
        for group, counter in per_group.items():
            assert len(counter) == MESSAGES, group
            assert set(counter.values()) == {1}, (group, [k for k, v in counter.items() if v != 1][:5])
            # the group was served on every server (weights spread it), not pinned to one
            assert sum(1 for (g, _), n in taken.items() if g == group and n > 0) >= 3
        for nc in clients:
            await nc.close()

    run(scenario)


def test_seed_cluster_sys_variant_forms_one_cluster(tmp_path: Path, cluster_nodes: list[Node]) -> None:
    """config/seed-cluster-sys (nats:// route URLs, a $SYS account with a bcrypt user) clusters too; the
    admin user's messages travel in the $SYS account."""
    nodes = seed_cluster(tmp_path, variant="seed-cluster-sys", workers=1)
    for node in nodes:
        cluster_nodes.append(node.start())

    async def scenario() -> None:
        clients = [await nats.connect(node.url, user="admin", password="a very long s3cr3t! password")
                   for node in nodes]
        await mesh_ready(clients)
        for nc in clients:
            await nc.close()

    run(scenario)
    for node in nodes:
        assert "it is this server; ignoring it" not in node.log()  # no node lists itself in this seed


# the fields of a route in nats-server 2.15.1's /routez, in its order (spec/captures/n1_routez.json)
GO_ROUTE_FIELDS = ['rid', 'remote_id', 'remote_name', 'did_solicit', 'is_configured', 'ip', 'port', 'start', 'last_activity', 'rtt', 'uptime', 'idle', 'pending_size', 'in_msgs', 'out_msgs', 'in_bytes', 'out_bytes', 'subscriptions', 'compression']


def test_routez_varz_and_client_connect_urls(seed: list[Node]) -> None:
    n1, n2, n3 = seed

    async def scenario() -> None:
        clients = [await nats.connect(node.url) for node in seed]
        await mesh_ready(clients)
        await clients[2].subscribe("seen.on.n3", queue="grp")
        await flush_after_subs(clients[2])

        def n3_interest_on_n1() -> bool:
            routes = n1.monitor("/routez?subs=1")["routes"]
            return any("seen.on.n3 grp" in r.get("subscriptions_list", []) for r in routes)  # type: ignore[union-attr]

        wait_until(n3_interest_on_n1, "n3's queue interest in n1's /routez")
        # host-local internal interest (the workers' cluster URL feed) stays off the routes; the
        # JetStream API of a clustered JetStream crosses them (every server hears each request)
        for route in n1.monitor("/routez?subs=1")["routes"]:  # type: ignore[union-attr]
            listed = route.get("subscriptions_list", [])
            assert not [s for s in listed if "_APPLIANCE_" in s]
            assert "$JS.API.STREAM.>" in listed
        # a client of n1 learns n2 and n3 from INFO (at connect, or the async INFO when routes came up)
        others = {n2.client_port, n3.client_port}
        deadline = asyncio.get_running_loop().time() + 30
        while not others <= {url.port for url in clients[0].servers}:
            assert asyncio.get_running_loop().time() < deadline, clients[0].servers
            await asyncio.sleep(0.05)
        for nc in clients:
            await nc.close()

    run(scenario)
    routez = n1.monitor("/routez")
    assert routez["num_routes"] == 2
    assert sorted(r["remote_name"] for r in routez["routes"]) == ["n2-c1", "n3-c1"]  # type: ignore[union-attr]
    row = routez["routes"][0]  # type: ignore[index]
    assert list(row) == GO_ROUTE_FIELDS
    assert set(routez) == {"server_id", "server_name", "now", "num_routes", "routes"}
    varz = n1.monitor("/varz")
    assert varz["routes"] == 2
    assert varz["cluster"]["name"] == "C1" and varz["cluster"]["cluster_port"] == n1.cluster_port  # type: ignore[index]
    assert sorted(varz["connect_urls"]) == sorted(f"127.0.0.1:{n.client_port}" for n in (n2, n3))  # type: ignore[arg-type]


def test_a_client_of_n1_fails_over_when_n1_is_killed(seed: list[Node]) -> None:
    """nats-py learns the cluster from connect_urls (INFO, async INFO) and reconnects elsewhere."""
    n1, n2, n3 = seed

    async def scenario() -> None:
        reconnected = asyncio.Event()

        async def on_reconnect() -> None:
            reconnected.set()

        client = await nats.connect(n1.url, reconnected_cb=on_reconnect, max_reconnect_attempts=-1,
                                    reconnect_time_wait=0.2)
        c3 = await nats.connect(n3.url)
        await routed(client, c3)
        await routed(c3, client)
        others = {n2.client_port, n3.client_port}
        deadline = asyncio.get_running_loop().time() + 30
        while not others <= {url.port for url in client.servers}:
            assert asyncio.get_running_loop().time() < deadline, client.servers
            await asyncio.sleep(0.05)
        n1.kill9()
        await asyncio.wait_for(reconnected.wait(), 30)
        assert client.connected_url is not None and client.connected_url.port in others
        await routed(c3, client)  # its subscriptions followed it; messages reach it on the new server
        await client.close()
        await c3.close()

    run(scenario)


def test_lame_duck_is_announced_to_peers(seed: list[Node]) -> None:
    """A server entering lame duck mode tells its routes (INFO ldm): peers stop offering its client URL."""
    n1, n2, n3 = seed

    async def scenario() -> None:
        clients = [await nats.connect(node.url) for node in seed]
        await mesh_ready(clients)
        for nc in clients:
            await nc.close()

    run(scenario)
    url = f"127.0.0.1:{n2.client_port}"
    wait_until(lambda: url in n1.monitor("/varz").get("connect_urls", []), "n2 in n1's connect_urls")  # type: ignore[operator]
    n2.process.signal(signal.SIGUSR2)  # type: ignore[union-attr]
    wait_until(lambda: url not in n1.monitor("/varz").get("connect_urls", []), "n2 dropped after its lame duck INFO")  # type: ignore[operator]
    assert url not in n3.monitor("/varz").get("connect_urls", [])  # type: ignore[operator]
