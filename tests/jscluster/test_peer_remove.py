"""Peer remove on the seed's three-node cluster (no spare server): publishes keep succeeding,
nothing acknowledged is lost, the stream goes on under-replicated on two peers, the removed
server deletes its copy, and the stream regains its third replica by itself when that server
restarts (its copy catches up from the leader)."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
from pathlib import Path

import nats
import pytest
from nats.errors import NoRespondersError, TimeoutError as NatsTimeout
from nats.js.errors import APIError, NoStreamResponseError

from appliance import limits
from tests.jscluster.conftest import META_TIMEOUT_S, meta_leader
from tests.routes.conftest import Node, wait_until

pytestmark = pytest.mark.timeout(240)


def replica_states(nodes: list[Node], stream: str) -> dict[str, dict[str, object]]:
    """Each server's own view of its replica (its /jsz stream detail), by server name."""
    out = {}
    for node in nodes:
        try:
            detail = node.monitor("/jsz?streams=true")
        except OSError:
            continue
        for account in detail.get("account_details") or []:
            for entry in account.get("stream_detail") or []:
                if entry["name"] == stream:
                    out[node.name] = entry
    return out


async def info(nc: nats.NATS, stream: str) -> dict[str, object]:
    msg = await nc.request(f"$JS.API.STREAM.INFO.{stream}", b"", timeout=3)
    return json.loads(msg.data)  # type: ignore[no-any-return]


async def peers(nc: nats.NATS, stream: str) -> set[str]:
    cluster = (await info(nc, stream)).get("cluster") or {}
    assert isinstance(cluster, dict)
    return {str(cluster.get("leader", ""))} | {str(r["name"]) for r in cluster.get("replicas") or []} - {""}


class Publisher:
    """Synchronous publishes with Nats-Msg-Id, retried until acknowledged, in the background."""

    def __init__(self, js: object, subject: str) -> None:
        self.js, self.subject = js, subject
        self.acked: dict[str, int] = {}
        self.failures = 0
        self.stop = False
        self.task: asyncio.Task[None] | None = None

    async def one(self, i: int, deadline_s: float) -> None:
        msg_id = f"id-{i}"
        while True:
            try:
                ack = await self.js.publish(self.subject, b"%d" % i, timeout=1,  # type: ignore[attr-defined]
                                            headers={"Nats-Msg-Id": msg_id})
                self.acked[msg_id] = int(ack.seq)
                return
            except (NatsTimeout, NoRespondersError, NoStreamResponseError, APIError):
                self.failures += 1
                assert time.monotonic() < deadline_s, f"{msg_id} never acknowledged"
                await asyncio.sleep(0.05)

    async def run(self) -> None:
        deadline = time.monotonic() + 120
        i = len(self.acked)
        while not self.stop:
            await self.one(i, deadline)
            i += 1

    def start(self) -> None:
        self.task = asyncio.ensure_future(self.run())

    async def finish(self) -> None:
        self.stop = True
        assert self.task is not None
        await self.task


async def until(predicate: object, what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if await predicate():  # type: ignore[operator]
                return
        except (NatsTimeout, NoRespondersError):
            pass
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.2)


def identical(states: dict[str, dict[str, object]], names: set[str], messages: int) -> bool:
    if set(states) != names:
        return False
    views = {json.dumps({k: v for k, v in dict(s["state"]).items()  # type: ignore[arg-type]
                         if k in ("messages", "bytes", "first_seq", "last_seq")}, sort_keys=True)
             for s in states.values()}
    return len(views) == 1 and dict(next(iter(states.values()))["state"])["messages"] == messages  # type: ignore[arg-type]


def test_peer_remove_without_spare_server_keeps_serving_and_regains_replicas(js_cluster: list[Node],
                                                                             tmp_path: Path) -> None:
    by_name = {node.name: node for node in js_cluster}

    async def scenario() -> None:
        nc = await nats.connect(js_cluster[0].url, max_reconnect_attempts=-1)
        config = {"name": "PR", "subjects": ["pr.>"], "storage": "file", "num_replicas": 3}
        reply = json.loads((await nc.request("$JS.API.STREAM.CREATE.PR", json.dumps(config).encode(), timeout=10)).data)
        assert "error" not in reply, reply
        cons = {"stream_name": "PR", "config": {"durable_name": "D", "ack_policy": "explicit"}}
        reply = json.loads((await nc.request("$JS.API.CONSUMER.CREATE.PR.D", json.dumps(cons).encode(), timeout=10)).data)
        assert "error" not in reply, reply
        publisher = Publisher(nc.jetstream(), "pr.x")
        for i in range(20):
            await publisher.one(i, time.monotonic() + 60)
        publisher.start()
        await until(lambda: _ready(publisher, 40), "publishes under way")
        leader = str((await info(nc, "PR"))["cluster"]["leader"])  # type: ignore[index]
        victim = next(n for n in by_name if n != leader and n != js_cluster[0].name)
        # a restart before the peer-remove does not end its exclusion (it once did: the removed
        # server was placed back on the stream a second later)
        by_name[victim].stop()
        by_name[victim].start()
        await until(lambda: _all_current(nc, "PR", set(by_name)), "three current replicas after a restart",
                    60)
        wait_until(lambda: meta_leader(js_cluster), "a meta leader after the restart", META_TIMEOUT_S)

        started = time.monotonic()
        answer: dict[str, object] = {}
        while time.monotonic() - started < 30:  # 10008 while the meta group settles after the restart
            msg = await nc.request("$JS.API.STREAM.PEER.REMOVE.PR", json.dumps({"peer": victim}).encode(),
                                   timeout=10)
            answer = json.loads(msg.data)
            if (answer.get("error") or {}).get("err_code") != 10008:  # type: ignore[union-attr]
                break
            await asyncio.sleep(0.2)
        assert answer == {"type": "io.nats.jetstream.api.v1.stream_remove_peer_response", "success": True}
        await until(lambda: _peers_are(nc, "PR", set(by_name) - {victim}), "two peers")
        removal_s = time.monotonic() - started
        # the removed server deletes its copy; the others keep serving, under-replicated
        wait_until(lambda: victim not in replica_states(js_cluster, "PR"), "the removed copy deleted", 30)
        assert not list((tmp_path / f"store-{victim.split('-')[0]}").rglob("streams/PR")), "copy left on disk"
        jsz = by_name[leader].monitor("/jsz")
        assert jsz.get("under_replicated") == [{"account": "$G", "stream": "PR", "replicas": 2, "wanted": 3}], jsz
        status, health = healthz(by_name[leader], "/healthz?details=true")
        assert status == 503 and health["errors"] == [{  # type: ignore[index]
            "type": "STREAM", "account": "$G", "stream": "PR",
            "error": "JetStream stream '$G > PR' is under-replicated: 2 of 3 replicas "
                     "(waiting for a server to place the others on)"}], health
        target = len(publisher.acked) + 20
        await until(lambda: _ready(publisher, target), "publishes on two peers")
        stays_out_until = time.monotonic() + 3 * limits.JS_REPLACE_CHECK_S  # re-placement checks it survives
        while time.monotonic() < stays_out_until:
            assert await peers(nc, "PR") == set(by_name) - {victim}, "placed back without a restart"
            await asyncio.sleep(0.2)

        # the removed server restarts: the stream regains its third replica and it catches up
        by_name[victim].stop()
        by_name[victim].start()
        wait_until(lambda: meta_leader(js_cluster), "a meta leader after the restart", META_TIMEOUT_S)
        await until(lambda: _peers_are(nc, "PR", set(by_name)), "three peers again", 60)
        await publisher.finish()
        count = len(publisher.acked)
        assert sorted(publisher.acked.values()) == list(range(1, count + 1))  # nothing lost, nothing twice
        wait_until(lambda: identical(replica_states(js_cluster, "PR"), set(by_name), count),
                   "three identical replicas", 60)
        assert "under_replicated" not in by_name[leader].monitor("/jsz")
        wait_until(lambda: healthz(by_name[leader], "/healthz")[0] == 200, "healthy again", 30)
        consumer = json.loads((await nc.request("$JS.API.CONSUMER.INFO.PR.D", b"", timeout=5)).data)
        assert "error" not in consumer, consumer
        print(f"peer-remove: two peers after {removal_s:.2f}s; {count} acknowledged, "
              f"{publisher.failures} publish retries")
        await nc.close()

    asyncio.run(scenario())


def healthz(node: Node, path: str) -> tuple[int, dict[str, object]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{node.http_port}{path}", timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


async def _ready(publisher: Publisher, count: int) -> bool:
    return len(publisher.acked) >= count


async def _peers_are(nc: nats.NATS, stream: str, wanted: set[str]) -> bool:
    return await peers(nc, stream) == wanted


async def _all_current(nc: nats.NATS, stream: str, wanted: set[str]) -> bool:
    cluster = (await info(nc, stream)).get("cluster") or {}
    assert isinstance(cluster, dict)
    replicas = cluster.get("replicas") or []
    current = all(r.get("current") for r in replicas)  # type: ignore[union-attr]
    return current and await peers(nc, stream) == wanted
