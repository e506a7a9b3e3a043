"""Placement by free storage, differential: three servers, one with `max_file_store: 1MB`; a
stream whose max_bytes only two of them can reserve is placed on those two, and one that needs
three is refused as nats-server 2.15.1 refuses it (10005 "no suitable peers for placement,
insufficient storage"). Each appliance server announces its free JetStream storage in route INFO
(`js_free`), the meta leader's placement reads it."""

from __future__ import annotations

from pathlib import Path

import pytest
from nats.aio.client import Client as NATS

from tests.jscluster.stepdown_cluster import api, api_until_ok, make_cluster, run_app_script

pytestmark = [pytest.mark.timeout(300), pytest.mark.integration]
SMALL = "n3-c1"
MB = 1024 * 1024


async def script(nc: NATS) -> list[tuple[str, object]]:
    out: list[tuple[str, object]] = []
    await api_until_ok(nc, "$JS.API.STREAM.CREATE.ONE", {"name": "ONE", "subjects": ["one"], "num_replicas": 3})
    for name, replicas in (("BIG3", 3), ("BIG2", 2)):
        answer = await api(nc, f"$JS.API.STREAM.CREATE.{name}",
                           {"name": name, "subjects": [name.lower()], "num_replicas": replicas,
                            "max_bytes": 10 * MB})
        if "error" in answer:
            out.append((name, answer["error"]))
            continue
        cluster = answer.get("cluster") or {}
        assert isinstance(cluster, dict)
        servers = {str(cluster.get("leader", ""))} | {str(r["name"]) for r in cluster.get("replicas") or []}
        out.append((name, sorted(s for s in servers if s)))
    return out


def run_on(tmp_path: Path, kind: str) -> list[tuple[str, object]]:
    (tmp_path / kind).mkdir()
    nodes = make_cluster(tmp_path / kind, kind)
    for node in nodes:
        if node.name == SMALL:
            text = node.config.read_text()
            node.config.write_text(text.replace('jetstream { store_dir:', 'jetstream { max_file_store: 1MB, store_dir:'))
            assert "max_file_store" in node.config.read_text()
    return run_app_script(nodes, script)


def test_placement_refuses_servers_without_room_for_max_bytes_as_nats_server(tmp_path: Path) -> None:
    expected = run_on(tmp_path, "go")
    got = run_on(tmp_path, "appliance")
    assert got == expected
    assert expected == [
        ("BIG3", {"code": 400, "err_code": 10005, "description": "no suitable peers for placement, insufficient storage"}),
        ("BIG2", ["n1-c1", "n2-c1"]),
    ]
