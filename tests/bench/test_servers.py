"""How the harness starts each server: nats-server config files, appliance's nats-server flags."""

from pathlib import Path

import pytest

from appliance.bench import servers
from appliance.bench.servers import APPLIANCE, NATS_DEFAULT, NATS_SYNC_ALWAYS, NodeLayout, command_for


def test_a_single_nats_server_with_jetstream(tmp_path: Path) -> None:
    cmd = command_for(NATS_DEFAULT, NodeLayout(0, (4222,), (), tmp_path / "s"), workdir=tmp_path)
    assert cmd[1:] == ["-c", str(tmp_path / "n1.conf")]
    conf = (tmp_path / "n1.conf").read_text()
    assert 'listen: "127.0.0.1:4222"' in conf and f'store_dir: "{tmp_path / "s"}"' in conf
    assert "sync_interval" not in conf and "cluster" not in conf


def test_nats_server_durable_like_appliance_syncs_always(tmp_path: Path) -> None:
    command_for(NATS_SYNC_ALWAYS, NodeLayout(0, (4222,), (), tmp_path / "s"), workdir=tmp_path)
    assert "  sync_interval: always\n" in (tmp_path / "n1.conf").read_text()


def test_a_cluster_node_routes_to_the_others(tmp_path: Path) -> None:
    layout = NodeLayout(1, (1001, 1002, 1003), (2001, 2002, 2003), tmp_path / "s2")
    command_for(NATS_DEFAULT, layout, workdir=tmp_path)
    conf = (tmp_path / "n2.conf").read_text()
    assert "server_name: n2" in conf and 'listen: "127.0.0.1:2002"' in conf
    assert 'routes: ["nats-route://127.0.0.1:2001", "nats-route://127.0.0.1:2003"]' in conf


def test_a_wired_cluster_node_dials_its_proxies_and_advertises_where_it_is_told(tmp_path: Path) -> None:
    wiring = servers.RouteWiring((2001, 2002, 2003), {(1, 0): 3010, (1, 2): 3012}, {1: 4001})
    layout = NodeLayout(1, (1001, 1002, 1003), (2001, 2002, 2003), tmp_path / "s2", wiring)
    command_for(NATS_DEFAULT, layout, workdir=tmp_path)
    conf = (tmp_path / "n2.conf").read_text()
    assert 'listen: "127.0.0.1:2002"' in conf
    assert 'routes: ["nats-route://127.0.0.1:3010", "nats-route://127.0.0.1:3012"]' in conf
    assert '  advertise: "127.0.0.1:4001"\n}' in conf


def test_a_single_appliance_gets_the_flags_of_nats_server(tmp_path: Path) -> None:
    if servers.appliance_binary() is None:
        pytest.skip("the appliance console script is not installed")
    single = command_for(APPLIANCE, NodeLayout(0, (4222,), (), tmp_path / "s"), workdir=tmp_path)
    assert single[1:] == ["run", "-a", "127.0.0.1", "-p", "4222", "-js", "-sd", str(tmp_path / "s")]


def test_cluster_nodes_of_both_servers_read_the_same_config_file(tmp_path: Path) -> None:
    if servers.appliance_binary() is None:
        pytest.skip("the appliance console script is not installed")
    layout = NodeLayout(2, (1, 2, 3), (11, 12, 13), tmp_path / "s3")
    texts = {}
    for kind in (NATS_DEFAULT, APPLIANCE):
        (tmp_path / kind.program).mkdir()
        cmd = command_for(kind, layout, workdir=tmp_path / kind.program)
        conf = tmp_path / kind.program / "n3.conf"
        assert cmd[1:] == (["-c", str(conf)] if kind.program == "nats-server" else ["run", "-c", str(conf)])
        texts[kind.program] = conf.read_text()
    assert texts["appliance"] == texts["nats-server"] + "appliance { cpu_pinning: false }\n"
    assert texts["nats-server"] == (
        "server_name: n3\n"
        'listen: "127.0.0.1:3"\n'
        "jetstream {\n"
        f'  store_dir: "{tmp_path / "s3"}"\n'
        "}\n"
        "cluster {\n"
        f"  name: {servers.CLUSTER_NAME}\n"
        '  listen: "127.0.0.1:13"\n'
        '  routes: ["nats-route://127.0.0.1:11", "nats-route://127.0.0.1:12"]\n'
        "}\n")


def test_the_durable_variant_and_appliance_workers_in_the_cluster_config(tmp_path: Path) -> None:
    layout = NodeLayout(0, (1, 2, 3), (11, 12, 13), tmp_path / "s1")
    assert "jetstream {\n" f'  store_dir: "{tmp_path / "s1"}"\n  sync_interval: always\n}}\n' in (
        servers.cluster_conf(NATS_SYNC_ALWAYS, layout))
    conf = servers.cluster_conf(servers.APPLIANCE_ONE_WORKER, layout)
    assert conf.endswith("}\nappliance { workers: 1, cpu_pinning: false }\n") and "sync_interval" not in conf


def test_appliance_cluster_nodes_sharing_the_machine_run_unpinned(tmp_path: Path) -> None:
    # pinned, every node's worker 0 (routes, RAFT, fsyncs) would share core 0 (SHARED_MACHINE_UNPINNED)
    layout = NodeLayout(0, (1, 2, 3), (11, 12, 13), tmp_path / "s1")
    assert servers.cluster_conf(APPLIANCE, layout).endswith("}\nappliance { cpu_pinning: false }\n")
    assert "appliance {" not in servers.cluster_conf(NATS_SYNC_ALWAYS, layout)


def test_an_appliance_with_one_worker_reads_it_from_a_config_file(tmp_path: Path) -> None:
    if servers.appliance_binary() is None:
        pytest.skip("the appliance console script is not installed")
    cmd = command_for(servers.APPLIANCE_ONE_WORKER, NodeLayout(0, (4222,), (), tmp_path / "s"), workdir=tmp_path)
    assert cmd[-2:] == ["-c", str(tmp_path / "n1.conf")] and "-p" in cmd
    assert (tmp_path / "n1.conf").read_text() == "appliance { workers: 1 }\n"


def test_free_ports_are_bindable() -> None:
    port = servers.free_port()
    assert 1024 <= port <= 65535
