"""diff_options: what a reload applies (nats-server's `Reloaded:` lines) or refuses (its error texts). Pure."""

from __future__ import annotations

import pytest

from appliance.config import options_from_text
from appliance.config.options import ServerOptions
from appliance.server.reload import diff_options


def opts(text: str) -> ServerOptions:
    return options_from_text(text, filename="server.conf")


BASE = "port: 4222\nauthorization { users: [ {user: a, password: pa} ] }\n"


ALWAYS = ["Reloaded: authorization users", "Reloaded: accounts"]  # nats-server reports them on every reload


def test_nothing_changed_still_reports_users_and_accounts_as_nats_server() -> None:
    diff = diff_options(opts(BASE), opts(BASE))
    assert diff.changes == ALWAYS and diff.error is None


@pytest.mark.parametrize(("extra", "line"), [
    ("debug: true", "Reloaded: debug = true"),
    ("trace: true", "Reloaded: trace = true"),
    ("logtime: false", "Reloaded: logtime = false"),
    ("log_file: /tmp/x.log", "Reloaded: log_file = /tmp/x.log"),
    ("max_payload: 2MB", "Reloaded: max_payload = 2097152"),
    ("max_connections: 10", "Reloaded: max_connections = 10"),
    ("ping_interval: \"30s\"", "Reloaded: ping_interval = 30s"),
    ("ping_max: 5", "Reloaded: ping_max = 5"),
    ("write_deadline: \"5s\"", "Reloaded: write_deadline = 5s"),
    ("server_tags: [\"az:1\"]", "Reloaded: tags"),
])
def test_live_changes_are_the_lines_nats_server_logs(extra: str, line: str) -> None:
    diff = diff_options(opts(BASE), opts(BASE + extra + "\n"))
    assert diff.error is None and sorted(diff.changes) == sorted([*ALWAYS, line])


def test_lines_come_in_nats_server_order() -> None:
    """Captured from nats-server 2.15.1: users changed and max_payload set in one reload."""
    diff = diff_options(opts(BASE), opts("port: 4222\nauthorization { users: [ {user: b, password: pb} ] }\n"
                                         "max_payload: 2MB\ndebug: true\n"))
    assert diff.changes == ["Reloaded: debug = true", *ALWAYS, "Reloaded: max_payload = 2097152"]


def test_the_first_unsupported_field_in_nats_server_order_is_named() -> None:
    diff = diff_options(opts("server_name: a\nlame_duck_duration: \"30s\"\n"),
                        opts("server_name: b\nlame_duck_duration: \"45s\"\n"))
    assert diff.error == "config reload not supported for ServerName: old=a, new=b"


def test_users_and_permissions() -> None:
    added = diff_options(opts(BASE), opts("port: 4222\nauthorization { users: [ {user: a, password: pa}, "
                                          "{user: b, password: pb} ] }\n"))
    assert added.changes == ALWAYS
    permissions = diff_options(opts(BASE), opts("port: 4222\nauthorization { users: [ {user: a, password: pa, "
                                                "permissions: {publish: \"x\"}} ] }\n"))
    assert permissions.changes == ALWAYS
    token = diff_options(opts("authorization { token: s1 }\n"), opts("authorization { token: s2 }\n"))
    assert token.changes == [*ALWAYS, "Reloaded: authorization token"]


def test_accounts_change_live_as_nats_server_which_only_logs_reloaded_accounts() -> None:
    """nats-server 2.15.1 (probed with SIGHUP) accepts accounts added and removed, users moved between
    them, JetStream turned on or off per account, imports/exports/mappings: its two lines, nothing else."""
    one = "accounts { A: { users: [ {user: a, password: pa} ], jetstream: enabled } }\n"
    edits = [
        "accounts { A: { users: [ {user: a, password: pa}, {user: b, password: pb} ] } }\n",
        "accounts { A: { users: [ {user: a, password: pa} ] }, B: {} }\n",
        "accounts { B: { users: [ {user: a, password: pa} ], jetstream: enabled } }\n",
        "accounts { A: { users: [ {user: a, password: pa} ], jetstream: enabled, mappings: { x: y } } }\n",
        "accounts { A: { users: [ {user: a, password: pa} ], jetstream: enabled, exports: [ {stream: x} ] },"
        " B: { imports: [ {stream: {account: A, subject: x}} ] } }\n",
    ]
    for edit in edits:
        diff = diff_options(opts(one), opts(edit))
        assert diff.error is None and diff.changes == ALWAYS, edit


@pytest.mark.parametrize(("before", "after", "error"), [
    ("server_name: a", "server_name: b", "config reload not supported for ServerName: old=a, new=b"),
    ("port: 4222", "port: 4333", "config reload not supported for Port: old=4222, new=4333"),
    ("lame_duck_duration: \"30s\"", "lame_duck_duration: \"45s\"",
     "config reload not supported for LameDuckDuration: old=30s, new=45s"),
    ("jetstream { store_dir: /a }", "jetstream { store_dir: /b }",
     "config reload not supported for jetstream storage directory"),
    ("jetstream { store_dir: /a, max_file_store: 2GB }", "jetstream { store_dir: /a, max_file_store: 1GB }",
     "config reload not supported for decreasing jetstream max memory and store"),
    ("jetstream { store_dir: /a }", "jetstream { store_dir: /a, max_file_store: 1GB }",
     "config reload not supported for jetstream dynamic max memory and store"),
    # as nats-server 2.15.1 logs them (probed with SIGHUP): its Options field names and Go values
    ("jetstream { store_dir: /a, domain: a }", "jetstream { store_dir: /a, domain: b }",
     "config reload not supported for JetStreamDomain: old=a, new=b"),
    ("jetstream { store_dir: /a, domain: a }", "jetstream { store_dir: /b, domain: b }",
     "config reload not supported for JetStreamDomain: old=a, new=b"),  # before StoreDir in its order
    ("jetstream { store_dir: /a, unique_tag: az }", "jetstream { store_dir: /a, unique_tag: rack }",
     "config reload not supported for JetStreamUniqueTag: old=az, new=rack"),
    ("jetstream { store_dir: /a, strict: true }", "jetstream { store_dir: /a, strict: false }",
     "config reload not supported for NoJetStreamStrict: old=false, new=true"),
    ("jetstream { store_dir: /a, sync_interval: \"2m\" }", "jetstream { store_dir: /a, sync_interval: \"90s\" }",
     "config reload not supported for SyncInterval: old=2m0s, new=1m30s"),
    ("jetstream { store_dir: /a }", "jetstream { store_dir: /a, sync_interval: always }",
     "config reload not supported for SyncAlways: old=false, new=true"),
])
def test_refused_changes_use_nats_server_texts(before: str, after: str, error: str) -> None:
    diff = diff_options(opts(before + "\n"), opts(after + "\n"))
    assert diff.error == error and diff.changes == []


def test_a_random_port_in_the_file_keeps_the_bound_one() -> None:
    assert diff_options(opts("port: 4222\n"), opts("port: -1\n")).error is None


def test_growing_jetstream_limits_is_live() -> None:
    diff = diff_options(opts("jetstream { store_dir: /a, max_file_store: 1GB }\n"),
                        opts("jetstream { store_dir: /a, max_file_store: 2GB }\n"))
    assert diff.error is None and diff.changes == [*ALWAYS, "Reloaded: JetStream max_file_store = 2.00 GB"]


def cluster(routes: str, *, listen: str = "127.0.0.1:6222", name: str = "C1") -> ServerOptions:
    return opts(BASE + f"cluster {{ name: {name}, listen: {listen}, routes: [{routes}] }}\n")


def test_routes_added_or_removed_reload_live_as_nats_server_routes_option() -> None:
    added = diff_options(cluster(""), cluster("nats-route://127.0.0.1:6223"))
    assert added.error is None and added.changes == [*ALWAYS, "Reloaded: cluster routes"]
    removed = diff_options(cluster("nats-route://127.0.0.1:6223"), cluster(""))
    assert removed.error is None and removed.changes == [*ALWAYS, "Reloaded: cluster routes"]


@pytest.mark.parametrize(("listen", "error"), [
    ("127.0.0.1:6333", "config reload not supported for cluster port: old=6222, new=6333"),
    ("localhost:6222", "config reload not supported for cluster host: old=127.0.0.1, new=localhost"),
])
def test_cluster_listener_edits_are_refused_with_validate_cluster_opts_texts(listen: str, error: str) -> None:
    assert diff_options(cluster(""), cluster("", listen=listen)).error == error


def cluster_block(extra: str, *, name: str = "C1") -> ServerOptions:
    return opts(BASE + f"cluster {{ name: {name}, listen: 127.0.0.1:6222\n{extra}\n}}\n")


@pytest.mark.parametrize("extra", [
    "authorization { user: ru, password: rp }", "authorization { user: ru, password: rp, timeout: 5 }",
    "advertise: \"10.0.0.1:6222\"", "no_advertise: true", "ping_interval: \"5s\"", "ping_max: 5",
    "pool_size: 5", "compression: s2_fast", "connect_retries: 5", "accounts: [ \"$G\" ]",
])
def test_other_cluster_settings_reload_live_as_nats_server_cluster_option(extra: str) -> None:
    """As nats-server 2.15.1 logs each of these edits (probed with SIGHUP): `Reloaded: cluster`."""
    diff = diff_options(cluster_block(""), cluster_block(extra))
    assert diff.error is None and diff.changes == [*ALWAYS, "Reloaded: cluster"]


def test_a_new_cluster_name_is_logged_before_reloaded_cluster_as_nats_server() -> None:
    diff = diff_options(cluster_block(""), cluster_block("", name="C2"))
    assert diff.changes == [*ALWAYS, "Cluster name updated to C2", "Reloaded: cluster"]
    both = diff_options(cluster(""), cluster("nats-route://127.0.0.1:6223", name="C2"))
    assert both.changes == [*ALWAYS, "Cluster name updated to C2", "Reloaded: cluster", "Reloaded: cluster routes"]


@pytest.mark.parametrize(("advertise", "error"), [
    ("x:y:z", "address x:y:z: too many colons in address"),
    ("host:port", 'strconv.Atoi: parsing "port": invalid syntax'),
    ("[::1", "address [::1: missing ']' in address"),
    ("a:99999999999999999999", 'strconv.Atoi: parsing "99999999999999999999": value out of range'),
])  # each as nats-server 2.15.1 logged it (probed with SIGHUP)
def test_an_advertise_nats_server_cannot_parse_is_refused_with_its_text(advertise: str, error: str) -> None:
    diff = diff_options(cluster_block(""), cluster_block(f"advertise: \"{advertise}\""))
    assert diff.error == f"invalid Cluster.Advertise value of {advertise}, err={error}"
    assert diff_options(cluster_block(""), cluster_block("advertise: \"10.0.0.1\"")).error is None  # port added


def test_routes_on_a_server_started_without_a_cluster_are_refused() -> None:
    diff = diff_options(opts(BASE), opts(BASE + "cluster { routes: [nats-route://127.0.0.1:6223] }\n"))
    assert diff.error is not None and diff.error.startswith("config reload not supported for cluster routes: ")
