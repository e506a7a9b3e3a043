"""Monitoring of clustered JetStream on real `appliance run` processes (issue 15 item 7): /raftz,
/jsz?raft=true, /healthz with nats-server's checks and texts, and `appliance status` with its
cluster summary and exit codes — on a healthy cluster, with a lagging replica, and with two of
three servers killed."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request

import nats
import pytest

from appliance.testing.process import ApplianceProcess
from tests.routes.conftest import Node, wait_until

pytestmark = pytest.mark.timeout(240)

NO_META_LEADER = "JetStream has not established contact with a meta leader"


def get(node: Node, path: str) -> tuple[int, str, str]:
    """(status, content type, body) of a monitoring GET, errors included."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{node.http_port}{path}", timeout=10) as response:
            return response.status, response.headers.get("Content-Type", ""), response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers.get("Content-Type", ""), error.read().decode()


def status(node: Node) -> tuple[int, str]:
    """`appliance status -c <node's config>`: (exit code, output)."""
    done = subprocess.run([sys.executable, "-m", "appliance", "status", "-c", str(node.config)],
                          capture_output=True, text=True, timeout=60)
    return done.returncode, done.stdout + done.stderr


def status_json(node: Node) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-m", "appliance", "status", "--json", "-c", str(node.config)],
                          capture_output=True, text=True, timeout=60)
    return json.loads(done.stdout)  # type: ignore[no-any-return]


async def make_assets(node: Node) -> None:
    nc = await nats.connect(node.url)
    try:
        js = nc.jetstream()
        await js.add_stream(name="R3", subjects=["r3.>"], num_replicas=3)
        await js.add_stream(name="R1", subjects=["r1.>"], num_replicas=1)
        for _ in range(5):
            await js.publish("r3.x", b"hi", timeout=10)
            await js.publish("r1.x", b"hi", timeout=10)
        await js.pull_subscribe("r3.>", durable="C3", stream="R3")
    finally:
        await nc.close()


def raftz_meta(node: Node) -> dict[str, object]:
    code, _, body = get(node, "/raftz")
    assert code == 200, body
    doc = json.loads(body)
    return doc["$SYS"]["_meta_"]  # type: ignore[no-any-return]


def test_healthy_cluster_then_two_servers_killed(js_cluster: list[Node]) -> None:
    n1 = js_cluster[0]
    asyncio.run(make_assets(n1))
    # every server is healthy once the assets' groups have leaders and have committed
    for node in js_cluster:
        wait_until(lambda node=node: get(node, "/healthz")[0] == 200, f"{node.name} healthy", 30)
        assert get(node, "/healthz") == (200, "application/json", '{"status":"ok"}')
        assert get(node, "/healthz?details=true")[2] == '{"status":"ok"}'
    # /raftz: the meta group under the system account, the R3 stream's and consumer's groups under $G
    code, kind, body = get(n1, "/raftz")
    assert code == 200 and kind == "application/json"
    assert body.startswith('{\n   "$SYS": {\n      "_meta_": {')  # three-space indent, as nats-server
    metas = [raftz_meta(node) for node in js_cluster]
    assert sorted(m["state"] for m in metas) == ["FOLLOWER", "FOLLOWER", "LEADER"]
    leader = next(m for m in metas if m["state"] == "LEADER")
    assert leader["size"] == 3 and leader["quorum_needed"] == 2
    assert {p["name"] for p in leader["peers"].values()} == {n.name for n in js_cluster} - {
        n.name for n, m in zip(js_cluster, metas) if m is leader}
    assert all("last_seen" in p and p["last_replicated_index"] > 0 for p in leader["peers"].values())
    code, _, body = get(n1, "/raftz?acc=$G")
    groups = json.loads(body)["$G"]
    assert sorted(name[0] for name in groups) == ["C", "S"]  # R3 stream + its consumer; R1 has no RAFT node
    for group in groups.values():
        assert group["committed"] >= 1 and group["applied"] == group["committed"] and group["ever_had_leader"]
    assert get(n1, "/raftz?acc=$G&group=nope")[:2] == (200, "application/json")
    assert json.loads(get(n1, "/raftz?acc=nope")[2]) == {}
    # /jsz?raft=true: leader counts and the groups of each stream
    jsz = json.loads(get(n1, "/jsz?raft=true&streams=true&consumers=true")[2])
    detail = {s["name"]: s for s in jsz["account_details"][0]["stream_detail"]}
    assert detail["R3"]["stream_raft_group"] in groups
    assert detail["R3"]["consumer_raft_groups"] == [{"name": "C3", "raft_group": next(g for g in groups if g[0] == "C")}]
    # appliance status: healthy, with the cluster summary
    answers: list[tuple[int, str]] = []
    wait_until(lambda: answers.append(status(n1)) or answers[-1][0] == 0, "appliance status ok", 30)
    code, out = answers[-1]
    assert "JetStream cluster:" in out and "Meta leader: " in out and "without quorum: 0" in out
    # kill two servers: the survivor loses its meta leader -> 503 with nats-server's text, status down
    for node in js_cluster[1:]:
        node.kill9()
    wait_until(lambda: get(n1, "/healthz")[0] == 503 and NO_META_LEADER in get(n1, "/healthz")[2],
               "healthz 503 without a meta leader", 60)
    assert get(n1, "/healthz") == (503, "application/json",
                                   '{"status":"unavailable","error":"%s"}' % NO_META_LEADER)
    assert get(n1, "/healthz?details=true")[2] == (
        '{"status":"error","errors":[{"type":"JETSTREAM","error":"%s"}]}' % NO_META_LEADER)
    assert get(n1, "/healthz?js-enabled-only=true")[0] == 200
    assert get(n1, "/healthz?js-server-only=true")[0] == 200
    meta = raftz_meta(n1)
    assert meta["state"] in ("CANDIDATE", "FOLLOWER") and "leader" not in meta
    # its report is rewritten every second
    wait_until(lambda: answers.append(status(n1)) or answers[-1][0] == 2, "appliance status down", 30)
    code, out = answers[-1]
    assert "Meta leader: none (no quorum)" in out and "JetStream meta group has no leader" in out


def test_a_lagging_replica_is_reported(js_cluster: list[Node]) -> None:
    """A replica stopped with SIGSTOP falls behind: the stream leader's /raftz shows its replicated
    index behind, /jsz shows it not current with a lag, `appliance status` says degraded (exit 1)
    naming the lagging server."""
    n1 = js_cluster[0]
    asyncio.run(make_assets(n1))
    for node in js_cluster:
        wait_until(lambda node=node: get(node, "/healthz")[0] == 200, f"{node.name} healthy", 30)

    def stream_leader() -> Node | None:
        for node in js_cluster:
            info = json.loads(get(node, "/jsz?streams=true")[2])
            for stream in info.get("account_details", [{}])[0].get("stream_detail", []):
                if stream["name"] == "R3" and stream["cluster"].get("leader") == node.name:
                    return node
        return None

    wait_until(stream_leader, "an R3 leader", 30)
    leader = stream_leader()
    assert leader is not None
    meta_leader = json.loads(get(leader, "/jsz")[2])["meta_cluster"]["leader"]
    laggard = next(n for n in js_cluster if n is not leader and n.name != meta_leader)
    process = laggard.process
    assert isinstance(process, ApplianceProcess) and process.process is not None
    # the workers run in process groups of their own: pause the supervisor and each of them
    paused = [process.process.pid, *(int(w["pid"]) for w in status_json(laggard)["workers"] if w["pid"])]
    for pid in paused:
        os.kill(pid, signal.SIGSTOP)
    try:
        async def publish() -> None:
            nc = await nats.connect(leader.url)
            js = nc.jetstream()
            for _ in range(20):
                await js.publish("r3.y", b"more", timeout=10)
            await nc.close()

        asyncio.run(publish())
        group = json.loads(get(leader, "/jsz?raft=true&streams=true")[2])["account_details"][0]
        name = next(s["stream_raft_group"] for s in group["stream_detail"] if s["name"] == "R3")

        def behind() -> bool:
            raft = json.loads(get(leader, f"/raftz?acc=$G&group={name}")[2])["$G"][name]
            peers = {p["name"]: p for p in raft["peers"].values()}
            return peers[laggard.name].get("last_replicated_index", 0) < raft["committed"]

        wait_until(behind, "the stopped replica behind in /raftz", 20)

        def lagging_status() -> bool:
            answer = status_json(leader)
            lagging = (answer.get("jetstream") or {}).get("lagging") or []  # type: ignore[union-attr]
            return answer["health"] == "degraded" and any(f"$G > R3: {laggard.name}" in item for item in lagging)

        wait_until(lagging_status, "status degraded naming the lagging replica", 30)
        answers: list[tuple[int, str]] = []
        wait_until(lambda: answers.append(status(leader)) or answers[-1][0] == 1, "appliance status exit 1", 30)
        assert f"Lagging: stream $G > R3: {laggard.name}" in answers[-1][1]
        info = json.loads(get(leader, "/jsz?streams=true")[2])["account_details"][0]["stream_detail"]
        replica = next(r for s in info if s["name"] == "R3" for r in s["cluster"]["replicas"]
                       if r["name"] == laggard.name)
        assert replica["current"] is False and replica["lag"] >= 20
    finally:
        for pid in paused:
            os.kill(pid, signal.SIGCONT)
