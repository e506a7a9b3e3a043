"""Reloading a cluster's routes (SIGHUP), as nats-server's routesOption: a route added to the config is
solicited and the cluster forms; a removed one is closed and not redialled. Cluster host/port edits are
refused with nats-server's own text (differential against nats-server 2.15.1)."""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path

import pytest

from appliance.testing.natsserver import NatsServer
from appliance.testing.process import free_port
from tests.routes.conftest import Node, make_node, plain_config, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def _node(tmp_path: Path, name: str, ports: dict[str, int], routes: list[str]) -> Node:
    http = free_port()
    node = make_node(tmp_path, name, "appliance", ports, routes=routes, workers=1,
                     extra=f"http: 127.0.0.1:{http}")
    node.http_port = http
    return node


def _rewrite_routes(node: Node, ports: dict[str, int], routes: list[str]) -> None:
    text = node.config.read_text()
    urls = "\n".join(f"    nats-route://127.0.0.1:{ports[name]}" for name in routes)
    node.config.write_text(re.sub(r"routes: \[\n.*?\n  \]", f"routes: [\n{urls}\n  ]", text, flags=re.S))


def _routes(node: Node) -> int:
    return int(node.monitor("/routez")["num_routes"])  # type: ignore[call-overload]


def test_a_route_added_by_reload_forms_the_cluster_and_a_removed_one_is_closed(
    tmp_path: Path, cluster_nodes: list[Node]
) -> None:
    ports = {"a": free_port(), "b": free_port(), "c": free_port()}
    a, b, c = (_node(tmp_path, name, ports, []) for name in ("a", "b", "c"))
    for node in (a, b, c):
        cluster_nodes.append(node.start())
    assert [_routes(node) for node in (a, b, c)] == [0, 0, 0]

    _rewrite_routes(a, ports, ["b", "c"])
    a.process.signal(signal.SIGHUP)  # type: ignore[union-attr]
    wait_until(lambda: [_routes(node) for node in (a, b, c)] == [2, 2, 2], "the cluster formed by the reload")
    assert "Reloaded: cluster routes" in a.log()

    _rewrite_routes(a, ports, ["b"])
    a.process.signal(signal.SIGHUP)  # type: ignore[union-attr]
    wait_until(lambda: "route removed by a configuration reload" in a.log(), "the removed route closed")
    # a still reaches b (configured); c only learned of a through a's own route, now gone, but b
    # gossiped a to c, so c may dial a again as an implicit route: the configured dial of c is what ends
    routez = a.monitor("/routez")
    configured = [route for route in routez["routes"] if route["is_configured"]]  # type: ignore[union-attr]
    assert [route["port"] for route in configured] == [ports["b"]]

    _rewrite_routes(a, ports, [])
    a.process.signal(signal.SIGHUP)  # type: ignore[union-attr]
    wait_until(lambda: a.log().count("route removed by a configuration reload") == 2, "the last route closed")
    assert not [route for route in a.monitor("/routez")["routes"]  # type: ignore[union-attr]
                if route["is_configured"]]


def test_a_cluster_port_or_host_edit_is_refused_with_nats_server_text(tmp_path: Path,
                                                                       cluster_nodes: list[Node]) -> None:
    for field, before, after in (("port", "{port}", "{other}"), ("host", "127.0.0.1", "localhost")):
        texts = []
        for kind in ("nats-server", "appliance"):
            port, other = free_port(), free_port()
            ports = {"x": port}
            config = tmp_path / f"{kind}-{field}.conf"
            text = plain_config("x", client=free_port(), cluster_port=port, routes=[])
            text += "" if kind == "nats-server" else "\nappliance { workers: 1 }\n"
            config.write_text(text)
            edited = text.replace(f"listen: 127.0.0.1:{port}",
                                  f"listen: {after.format(other=other)}:{port}" if field == "host"
                                  else f"listen: 127.0.0.1:{other}")
            log_path = tmp_path / f"{kind}-{field}.log"
            if kind == "nats-server":
                with NatsServer(["-c", str(config)], log_path=log_path) as real:
                    assert real.process is not None
                    config.write_text(edited)
                    real.process.send_signal(signal.SIGHUP)
                    texts.append(_wait_error(log_path.read_text))
            else:
                node = Node("x", 0, port, config, log_dir=tmp_path)
                cluster_nodes.append(node.start())
                config.write_text(edited)
                node.process.signal(signal.SIGHUP)  # type: ignore[union-attr]
                texts.append(_wait_error(node.log))
            del ports
        expected = (f"config reload not supported for cluster port: old=" if field == "port"
                    else "config reload not supported for cluster host: old=127.0.0.1, new=localhost")
        assert texts[0].startswith("Failed to reload server configuration: " + expected), texts
        assert re.sub(r"\d{4,5}", "N", texts[0]) == re.sub(r"\d{4,5}", "N", texts[1]), texts


def test_reloaded_routes_log_the_nats_server_lines(tmp_path: Path, cluster_nodes: list[Node]) -> None:
    """A route added, then removed, on nats-server 2.15.1 and on appliance: the same `Reloaded:` lines."""
    unreachable = free_port()  # nothing listens: the added route is dialled and retried, never up
    lines: dict[str, list[list[str]]] = {}
    for kind in ("nats-server", "appliance"):
        port = free_port()
        config = tmp_path / f"{kind}-routes.conf"
        text = plain_config("x", client=free_port(), cluster_port=port, routes=[])
        text += "" if kind == "nats-server" else "\nappliance { workers: 1 }\n"
        config.write_text(text)
        with_route = plain_config("x", client=0, cluster_port=port, routes=[unreachable])
        with_route = text.replace(text[text.index("  routes: ["):], with_route[with_route.index("  routes: ["):])
        with_route += "" if kind == "nats-server" else "\nappliance { workers: 1 }\n"
        log_path = tmp_path / f"{kind}-routes.log"
        if kind == "nats-server":
            with NatsServer(["-c", str(config)], log_path=log_path) as real:
                assert real.process is not None
                lines[kind] = []
                for edit in (with_route, text):
                    config.write_text(edit)
                    real.process.send_signal(signal.SIGHUP)
                    lines[kind].append(_reloaded_lines(log_path.read_text, len(lines[kind]) + 1))
        else:
            node = Node("x", 0, port, config, log_dir=tmp_path)
            cluster_nodes.append(node.start())
            lines[kind] = []
            for edit in (with_route, text):
                config.write_text(edit)
                node.process.signal(signal.SIGHUP)  # type: ignore[union-attr]
                lines[kind].append(_reloaded_lines(node.log, len(lines[kind]) + 1))
    assert lines["nats-server"] == lines["appliance"], lines
    assert lines["appliance"][0][-1] == "Reloaded: cluster routes"


def _reloaded_lines(read: object, reloads: int) -> list[str]:
    """The `Reloaded:` lines of the reload number `reloads` (1-based)."""
    deadline = time.monotonic() + 30
    while read().count("Reloaded server configuration") < reloads:  # type: ignore[operator]
        assert time.monotonic() < deadline, read()  # type: ignore[operator]
        time.sleep(0.05)
    text: str = read()  # type: ignore[operator]
    start = 0
    for _ in range(reloads - 1):
        start = text.index("Reloaded server configuration", start) + 1
    end = text.index("Reloaded server configuration", start)
    return re.findall(r"\[INF\] (Reloaded: .*)", text[start:end])


def _wait_error(read: object) -> str:
    deadline = time.monotonic() + 30
    while True:
        found = re.search(r"\[ERR\] (Failed to reload server configuration: .*)", read())  # type: ignore[operator]
        if found:
            return found.group(1)
        assert time.monotonic() < deadline, read()  # type: ignore[operator]
        time.sleep(0.05)
