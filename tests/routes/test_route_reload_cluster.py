"""Cluster settings other than the listener and the routes, changed by SIGHUP, as nats-server's
clusterOption: the same edits on a nats-server 2.15.1 node and on an appliance node (two workers), each
with a nats-server peer that dials it with route credentials; what the peer and the logs show must match.

New route credentials: the route accepted with the old ones is closed ('Authorization Violation' on
the peer) and the peer's redials fail until the file lets its credentials in again; then it forms.
A new cluster name: `Cluster name updated to C2`, `Reloaded: cluster`, and the route up stays up."""

from __future__ import annotations

import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from appliance.testing.process import ApplianceProcess, free_port
from tests.routes.conftest import Node, make_node, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
AUTH = "  authorization { user: ru, password: rp }"
LINES = re.compile(r"\[INF\] ((?:Reloaded: |Cluster name updated to ).*)")


def _up(node: Node) -> bool:
    """Routed to its peer (nats-server counts a pool of routes per peer, appliance one)."""
    return int(node.monitor("/routez")["num_routes"]) > 0  # type: ignore[call-overload]


def _reload(node: Node, old: str, new: str) -> list[str]:
    """Edit the config, SIGHUP, wait for the reload: its `Reloaded:` (and cluster name) lines."""
    done = node.log().count("Reloaded server configuration")
    start = len(node.log())
    node.config.write_text(node.config.read_text().replace(old, new))
    process = node.process
    if isinstance(process, ApplianceProcess):
        process.signal(signal.SIGHUP)
    else:
        assert isinstance(process, subprocess.Popen)
        process.send_signal(signal.SIGHUP)
    wait_until(lambda: node.log().count("Reloaded server configuration") > done, "the reload")
    return LINES.findall(node.log()[start:])


def _stays(node: Node, up: bool, seconds: float) -> bool:
    """Routed (or not) for `seconds` on end (the peer redials every second)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if _up(node) != up:
            return False
        time.sleep(0.1)
    return True


def _scenario(tmp_path: Path, kind: str, cluster_nodes: list[Node]) -> dict[str, object]:
    ports = {f"{kind}-b": free_port(), f"{kind}-a": free_port()}
    http = free_port()
    b = make_node(tmp_path, f"{kind}-b", kind, ports, routes=[], extra=f"http: 127.0.0.1:{http}",
                  cluster_extra=AUTH)
    b.http_port = http
    a = make_node(tmp_path, f"{kind}-a", "nats-server", ports, routes=[f"{kind}-b"], route_userinfo="ru:rp@")
    cluster_nodes.append(b.start())
    cluster_nodes.append(a.start())
    wait_until(lambda: _up(b), "the route up")
    seen: dict[str, object] = {}
    seen["new password"] = _reload(b, "password: rp", "password: other")
    wait_until(lambda: not _up(b), "the route closed")
    wait_until(lambda: "'Authorization Violation'" in a.log(), "the peer told why")
    seen["peer kept out"] = _stays(b, False, 2.5)
    seen["password back"] = _reload(b, "password: other", "password: rp")
    wait_until(lambda: _up(b), "the route formed again")
    seen["new name"] = _reload(b, "name: C1", "name: C2")
    seen["route stays"] = _stays(b, True, 1.5)
    return seen


def test_route_credentials_and_cluster_name_reload_as_nats_server(tmp_path: Path,
                                                                  cluster_nodes: list[Node]) -> None:
    results = [_scenario(tmp_path, kind, cluster_nodes) for kind in ("nats-server", "appliance")]
    assert results[0] == results[1], results
    assert results[1]["new name"] == ["Reloaded: authorization users", "Reloaded: accounts",
                                      "Cluster name updated to C2", "Reloaded: cluster"]
    assert results[1]["peer kept out"] is True and results[1]["route stays"] is True
