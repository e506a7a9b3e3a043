"""Differential: the seed's three-node cluster as appliance and as real nats-server 2.15.1 nodes, the
same assets made on both; /raftz, /jsz?raft=true and /healthz compared with ids, times and counters
masked (shapes: keys in order, JSON types), then /healthz texts once two of the three servers are
killed."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.testing.json_shape import shape
from tests.jscluster.conftest import META_TIMEOUT_S, meta_leader
from tests.jscluster.test_health_monitoring import NO_META_LEADER, get, make_assets
from tests.routes.conftest import Node, seed_cluster, wait_until

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def go_cluster(tmp_path: Path) -> Iterator[list[Node]]:
    """The seed's configs run by nats-server (the appliance-only block left out)."""
    root = tmp_path / "go"
    root.mkdir()
    nodes = seed_cluster(root, workers=1)
    for node in nodes:
        node.kind = "go"
        node.config.write_text(node.config.read_text().split("\nappliance {")[0] + "\n")
    try:
        for node in nodes:
            node.start()
        wait_until(lambda: meta_leader(nodes), "a Go meta leader", META_TIMEOUT_S)
        yield nodes
    finally:
        for node in nodes:
            node.stop()


def scene(nodes: list[Node]) -> dict[str, object]:
    """What the meta leader and a follower show once the assets are made and every server is healthy."""
    asyncio.run(make_assets(nodes[0]))
    for node in nodes:
        wait_until(lambda node=node: get(node, "/healthz")[0] == 200, f"{node.name} healthy", 30)
    out: dict[str, object] = {}
    for node in nodes:
        meta = json.loads(get(node, "/raftz")[2])
        group = next(iter(next(iter(meta.values())).values()))
        role = "leader" if group["state"] == "LEADER" else "follower"
        out[f"meta {role}"] = group
        for name, asset in json.loads(get(node, "/raftz?acc=$G")[2])["$G"].items():
            asset_role = "leader" if asset["state"] == "LEADER" else "follower"
            out[f"{name[0]} {asset_role}"] = asset
    leader = next(n for n in nodes if json.loads(get(n, "/jsz")[2])["meta_cluster"].get("leader") == n.name)
    out["jsz"] = json.loads(get(leader, "/jsz?raft=true&streams=true&consumers=true")[2])
    out["raftz accounts"] = sorted(json.loads(get(leader, "/raftz")[2]))
    out["raftz groups of $G"] = sorted(n[0] for n in json.loads(get(leader, "/raftz?acc=$G")[2])["$G"])
    out["raftz nope"] = get(leader, "/raftz?acc=$G&group=nope")
    out["healthz"] = [get(n, "/healthz") for n in nodes]
    return out


# omitempty keys whose presence depends on the run, not the implementation: `voted_for` is empty on a
# replica that learned its term from the leader's appends without voting (a server started late)
OPTIONAL = frozenset({"voted_for"})


def group_shape(group: dict[str, object]) -> object:
    """A /raftz group's shape; its peers (a map keyed by peer id) as the set of their shapes."""
    peers = group["peers"]
    assert isinstance(peers, dict)
    return [[key for key in group if key not in OPTIONAL], shape(group, OPTIONAL | {"peers"}),
            sorted({json.dumps(shape(p)) for p in peers.values()})]


def test_raftz_jsz_and_healthz_match_nats_server(js_cluster: list[Node], go_cluster: list[Node]) -> None:
    ours, theirs = scene(js_cluster), scene(go_cluster)
    assert ours["raftz accounts"] == theirs["raftz accounts"] == ["$SYS"]
    assert ours["raftz groups of $G"] == theirs["raftz groups of $G"] == ["C", "S"]
    assert ours["raftz nope"] == theirs["raftz nope"]
    assert ours["healthz"] == theirs["healthz"]
    for key in ("meta leader", "meta follower", "S leader", "S follower"):
        assert group_shape(ours[key]) == group_shape(theirs[key]), key  # type: ignore[arg-type]
    jsz_ours, jsz_theirs = ours["jsz"], theirs["jsz"]
    assert isinstance(jsz_ours, dict) and isinstance(jsz_theirs, dict)
    leads = {"streams_leader", "consumers_leader"}  # omitempty: 0 when this server leads none, a matter of luck
    assert [k for k in jsz_ours if k not in leads] == [k for k in jsz_theirs if k not in leads]
    assert jsz_ours["ha_assets"] == jsz_theirs["ha_assets"] == 3  # meta + R3 stream + its consumer (R1: no group)
    streams_ours = {s["name"]: s for s in jsz_ours["account_details"][0]["stream_detail"]}
    streams_theirs = {s["name"]: s for s in jsz_theirs["account_details"][0]["stream_detail"]}
    assert "R3" in streams_ours and "R3" in streams_theirs
    for name in set(streams_ours) & set(streams_theirs):  # an R1 stream lives where placement put it
        assert list(streams_ours[name]) == list(streams_theirs[name]), name
        assert [g["name"] for g in streams_ours[name].get("consumer_raft_groups", [])] == [
            g["name"] for g in streams_theirs[name].get("consumer_raft_groups", [])]
    # two of three servers killed: the survivor's answers, once its meta leader is gone
    for nodes in (js_cluster, go_cluster):
        for node in nodes[1:]:
            node.kill9()
    answers = {}
    for label, node in (("ours", js_cluster[0]), ("theirs", go_cluster[0])):
        wait_until(lambda node=node: NO_META_LEADER in get(node, "/healthz")[2], f"{label}: no meta leader", 90)
        answers[label] = [get(node, path) for path in (
            "/healthz", "/healthz?details=true", "/healthz?js-enabled-only=true", "/healthz?js-meta-only=true",
            "/healthz?account=%24G&stream=R3&details=true")]
        meta = json.loads(get(node, "/raftz")[2])["$SYS"]["_meta_"]
        answers[label].append(("leader" in meta, meta["state"] == "LEADER"))
    assert answers["ours"] == answers["theirs"]
