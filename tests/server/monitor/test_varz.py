"""/varz: nats-server's keys, order, units and omitempty rules, from a fake server."""

from appliance.config.options import ClusterOptions, JetStreamOptions
from appliance.server.monitor.view import (
    ByKindCounts,
    JetStreamStats,
    JetStreamView,
    MetaClusterInfo,
    PeerInfo,
    ServerCounters,
)
from appliance.testing.fake_view import FakeServerView, MonitorProbe

BASE_KEYS = [
    "server_id", "server_name", "version", "proto", "go", "host", "port", "max_connections",
    "ping_interval", "ping_max", "http_host", "http_port", "http_base_path", "https_port", "auth_timeout",
    "max_control_line", "max_payload", "max_pending", "cluster", "gateway", "leaf", "mqtt", "websocket",
    "jetstream", "tls_timeout", "write_deadline", "start", "now", "uptime", "mem", "cores", "gomaxprocs",
    "cpu", "connections", "total_connections", "routes", "remotes", "leafnodes", "in_msgs", "in_bytes",
    "in_client_msgs", "in_client_bytes", "out_msgs", "out_bytes", "out_client_msgs", "out_client_bytes",
    "slow_consumers", "stale_connections", "stalled_clients", "subscriptions", "http_req_stats",
    "config_load_time", "config_digest", "system_account", "slow_consumer_stats", "stale_connection_stats",
]  # fmt: skip


def test_a_plain_server_shows_nats_server_keys_in_order(monitor: MonitorProbe) -> None:
    assert list(monitor.get("/varz").json) == BASE_KEYS


def test_durations_are_nanoseconds_and_uptime_is_text(monitor: MonitorProbe, view: FakeServerView) -> None:
    view.clock.advance(227.5)
    varz = monitor.get("/varz").json
    assert varz["ping_interval"] == 120_000_000_000
    assert varz["write_deadline"] == 10_000_000_000
    assert varz["auth_timeout"] == 2
    assert varz["start"] == "2026-11-21T23:53:41Z"
    assert varz["now"] == "2026-11-21T23:57:28.5Z"
    assert varz["uptime"] == "3m47s"
    assert varz["config_load_time"] == varz["start"]


def test_unused_features_are_empty_objects(monitor: MonitorProbe) -> None:
    varz = monitor.get("/varz").json
    for key in ("cluster", "gateway", "leaf", "mqtt", "websocket", "jetstream"):
        assert varz[key] == {}


def test_counters_come_from_the_view(monitor: MonitorProbe, view: FakeServerView) -> None:
    view.extra_counters = ServerCounters(
        in_msgs=966, in_bytes=136384, out_msgs=1021, slow_consumers=2, routes=4, remotes=1,
        slow_consumer_stats=ByKindCounts(clients=2), stale_connection_stats=ByKindCounts(routes=1),
    )  # fmt: skip
    view.connect(1)
    view.connect(2)
    view.close(2)
    varz = monitor.get("/varz").json
    assert (varz["in_msgs"], varz["in_bytes"], varz["out_msgs"]) == (966, 136384, 1021)
    assert (varz["routes"], varz["remotes"], varz["slow_consumers"]) == (4, 1, 2)
    assert (varz["connections"], varz["total_connections"]) == (1, 2)
    assert varz["slow_consumer_stats"] == {"clients": 2, "routes": 0, "gateways": 0, "leafs": 0}
    assert varz["stale_connection_stats"]["routes"] == 1
    assert varz["mem"] == view.usage.rss_bytes
    assert varz["cpu"] == 1.5


def test_omitempty_keys_appear_when_set(monitor: MonitorProbe, view: FakeServerView) -> None:
    view.git_commit = "b2fd3ef"
    view.auth_required = True
    view.connect_urls = ("127.0.0.1:5201", "127.0.0.1:5202")
    view.options.max_subscriptions = 100
    view.options.server_tags = ["az:1"]
    view.feature_flags = {"b": True, "a": False}
    varz = monitor.get("/varz").json
    assert varz["git_commit"] == "b2fd3ef"
    assert varz["auth_required"] is True
    assert varz["connect_urls"] == ["127.0.0.1:5201", "127.0.0.1:5202"]
    assert varz["max_subscriptions"] == 100
    assert varz["tags"] == ["az:1"]
    assert list(varz["feature_flags"].items()) == [("a", False), ("b", True)]
    assert list(varz)[4:6] == ["git_commit", "go"]


def test_no_system_account_omits_the_key(monitor: MonitorProbe, view: FakeServerView) -> None:
    view.system_account = ""
    assert "system_account" not in monitor.get("/varz").json


def test_cluster_block_lists_route_hosts_without_credentials(
    monitor: MonitorProbe, view: FakeServerView
) -> None:
    view.options.cluster = ClusterOptions(
        name="C3", host="127.0.0.1", port=6201,
        routes=["nats-route://ruser:secret@127.0.0.1:6202", "nats-route://127.0.0.1:6203"],
    )  # fmt: skip
    view.cluster_name = "C3"
    assert monitor.get("/varz").json["cluster"] == {
        "name": "C3",
        "addr": "127.0.0.1",
        "cluster_port": 6201,
        "auth_timeout": 2,
        "urls": ["127.0.0.1:6202", "127.0.0.1:6203"],
        "tls_timeout": 2,
        "pool_size": 3,
    }


def jetstream_view(**overrides: object) -> JetStreamView:
    values: dict[str, object] = {
        "enabled": True,
        "clustered": False,
        "max_memory": 18957385728,
        "max_storage": 62983170048,
        "store_dir": "/data/js1/jetstream",
        "sync_interval_s": 120.0,
        "stats": JetStreamStats(
            storage=342, accounts=1, ha_assets=3, api_level=5, api_total=31, api_errors=11
        ),
        "limits": {"default_max_consumers": 1000},
    }
    values.update(overrides)
    return JetStreamView(**values)  # type: ignore[arg-type]


def test_jetstream_block_matches_a_captured_single_server(
    monitor: MonitorProbe, view: FakeServerView
) -> None:
    view.options.jetstream = JetStreamOptions(enabled=True)
    view.jetstream_view = jetstream_view()
    assert monitor.get("/varz").json["jetstream"] == {
        "config": {
            "max_memory": 18957385728,
            "max_storage": 62983170048,
            "store_dir": "/data/js1/jetstream",
            "sync_interval": 120000000000,
            "strict": True,
        },
        "stats": {
            "memory": 0,
            "storage": 342,
            "reserved_memory": 0,
            "reserved_storage": 0,
            "accounts": 1,
            "ha_assets": 3,
            "api": {"level": 5, "total": 31, "errors": 11},
        },
        "limits": {"default_max_consumers": 1000},
    }


def test_clustered_jetstream_shows_the_meta_group(monitor: MonitorProbe, view: FakeServerView) -> None:
    meta = MetaClusterInfo(
        name="C3", cluster_size=2, quorum_needed=2, leader="N1", leader_peer="xZ93l5JM",
        replicas=(PeerInfo(name="N2", current=True, active_s=0.091209078, peer="gX64jrmD"),),
    )  # fmt: skip
    view.jetstream_view = jetstream_view(clustered=True, meta=meta)
    shown = monitor.get("/varz").json["jetstream"]["meta"]
    assert shown == {
        "name": "C3",
        "leader": "N1",
        "peer": "xZ93l5JM",
        "replicas": [{"name": "N2", "current": True, "active": 91209000, "peer": "gX64jrmD"}],
        "cluster_size": 2,
        "quorum_needed": 2,
        "pending": 0,
        "pending_requests": 0,
        "pending_infos": 0,
        "snapshot": {"pending_entries": 0, "pending_size": 0, "last_time": "0001-01-01T00:00:00Z"},
    }


def test_jetstream_configured_but_not_running_is_empty(monitor: MonitorProbe, view: FakeServerView) -> None:
    view.jetstream_view = jetstream_view(enabled=False)
    assert monitor.get("/varz").json["jetstream"] == {}
