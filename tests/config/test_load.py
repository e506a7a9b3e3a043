"""Config text -> ServerOptions: keys, aliases, nats-server's conversions and checks (spec §1.1–§2.5)."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance import limits
from appliance.config import load_config, options_from_text
from appliance.config.options import ServerOptions
from appliance.errors import ConfigError


def load(text: str, *, pedantic: bool = False, env: dict[str, str] | None = None) -> ServerOptions:
    return options_from_text(text, filename="t.conf", env=env or {}, pedantic=pedantic)


def problems(text: str, *, pedantic: bool = False) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load(text, pedantic=pedantic)
    return caught.value.problems


# --- top level ------------------------------------------------------------------------------
def test_defaults_are_nats_servers() -> None:
    options = load("server_name: s")
    assert (options.host, options.port, options.http_port) == ("0.0.0.0", 4222, 0)
    assert options.max_payload == limits.PAYLOAD_BYTES_MAX
    assert options.system_account == "$SYS"
    assert options.config_file == "t.conf"


@pytest.mark.parametrize(
    ("text", "host", "port"),
    [
        ("listen: 4333", "0.0.0.0", 4333),
        ('listen: "127.0.0.1:4333"', "127.0.0.1", 4333),
        ("listen: 127.0.0.1:4333", "127.0.0.1", 4333),
        ("listen=localhost:-1", "localhost", -1),
        ("host: 10.0.0.1\nport: 5000", "10.0.0.1", 5000),
        ("net: 10.0.0.2\nport: -1", "10.0.0.2", -1),
        ('listen: "[::1]:4333"', "::1", 4333),
    ],
)
def test_listen_and_host_port_forms(text: str, host: str, port: int) -> None:
    options = load(text)
    assert (options.host, options.port) == (host, port)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('listen: "nats://0.0.0.0:4222"', 'could not parse address string "nats://0.0.0.0:4222"'),
        ("listen: localhost", 'could not parse address string "localhost"'),
        ('listen: "h:x"', 'could not parse port "x"'),
        ("port: -2", "port -2 out of range"),
        ("port: 70000", "port 70000 out of range"),
        ('port: "4222"', 'field "port": expected an integer, got string'),
        ("port: 1.5", 'field "port": expected an integer, got float64'),
    ],
)
def test_bad_listen_and_port_values(text: str, expected: str) -> None:
    assert any(expected in p for p in problems(text)), problems(text)


def test_http_monitoring_forms() -> None:
    assert (load("http: 127.0.0.1:8222").http_host, load("http: 127.0.0.1:8222").http_port) == ("127.0.0.1", 8222)
    assert load("http_port: 8222").http_port == 8222
    assert load("monitor_port: -1").http_port == -1


def test_keys_are_case_insensitive_and_aliases_work() -> None:
    options = load("PORT: 1234\nServer_Name: n1\nMAX_CONN: 10\nmax_subs: 5\nLogFile: /l\npidfile: /p")
    assert (options.port, options.server_name, options.max_connections) == (1234, "n1", 10)
    assert (options.max_subscriptions, options.log_file, options.pid_file) == (5, "/l", "/p")


def test_server_name_cannot_contain_spaces() -> None:
    assert problems('server_name: "a b"') == ["t.conf:1:14: server name cannot contain spaces"]


def test_sizes_from_the_lexer_apply_to_limits() -> None:
    options = load("max_payload: 2MB\nmax_pending: 1G\nmax_control_line: 8kb")
    assert (options.max_payload, options.max_pending, options.max_control_line) == (2 * 1024**2, 10**9, 8192)


def test_max_payload_may_not_exceed_max_pending() -> None:
    assert problems("max_pending: 1MB\nmax_payload: 2MB") == [
        "t.conf:2:1: max_payload (2097152) cannot be higher than max_pending (1048576)"
    ]


def test_max_payload_too_big_or_negative() -> None:
    assert problems("max_payload: 3GB")[0].endswith("max_payload value is too big")
    assert problems("max_payload: -1")[0].endswith("max_payload value can not be negative")


def test_booleans_logging_and_tags() -> None:
    options = load("debug: true\ntrace: on\nlogtime: no\nserver_tags: [\"az:1\", ssd]")
    assert (options.debug, options.trace, options.logtime) == (True, True, False)
    assert options.server_tags == ["az:1", "ssd"]
    assert load("server_tags: single").server_tags == ["single"]
    assert load('server_tags: ["AZ:1", " Ssd ", "az:1"]').server_tags == ["az:1", "ssd"]
    assert load("trace_verbose: true").trace is True


# --- durations (§1.1) -----------------------------------------------------------------------
def test_duration_strings_are_go_durations() -> None:
    options = load('ping_interval: "30s"\nwrite_deadline: 5s\nlame_duck_duration: "1h30m"\nlame_duck_grace_period: "500ms"')
    assert (options.ping_interval_s, options.write_deadline_s) == (30.0, 5.0)
    assert (options.lame_duck_duration_s, options.lame_duck_grace_period_s) == (5400.0, 0.5)


def test_unquoted_2m_is_two_million_seconds_with_a_warning() -> None:
    options = load("write_deadline: 2m")
    assert options.write_deadline_s == 2_000_000.0
    assert options.config_warnings == [
        't.conf:1:17: invalid use of field "write_deadline": write_deadline should be converted to a duration'
    ]


def test_pedantic_load_turns_warnings_into_problems_like_nats_server_t() -> None:
    assert problems("ping_interval: 60", pedantic=True) == [
        't.conf:1:16: invalid use of field "ping_interval": ping_interval should be converted to a duration'
    ]


def test_bad_durations_use_gos_messages() -> None:
    assert problems('ping_interval: "1d"') == ['t.conf:1:16: error parsing ping_interval: time: unknown unit "d" in duration "1d"']
    assert problems('ping_interval: "10"')[0].endswith('time: missing unit in duration "10"')
    assert problems('ping_interval: "abc"')[0].endswith('time: invalid duration "abc"')


def test_lame_duck_duration_must_be_a_string_of_at_least_30_seconds() -> None:
    assert "expected a duration string" in problems("lame_duck_duration: 2m")[0]
    assert problems('lame_duck_duration: "10s"') == ["t.conf:1:21: invalid lame_duck_duration of 10s, minimum is 30 seconds"]


def test_lame_duck_grace_period_must_be_below_the_duration() -> None:
    assert "strictly lower" in problems('lame_duck_duration: "30s"\nlame_duck_grace_period: "40s"')[0]


# --- jetstream (§2.2) -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "enabled"),
    [("jetstream: enabled", True), ("jetstream: Enable", True), ("jetstream: true", True),
     ("jetstream: disabled", False), ("jetstream: false", False), ("jetstream {}", True),
     ("jetstream { enabled: false }", False)],
)
def test_jetstream_short_forms(text: str, enabled: bool) -> None:
    assert load(text).jetstream.enabled is enabled


def test_jetstream_block_keys_and_storage_sizes() -> None:
    options = load(
        'jetstream {\n store_dir: /data/jss\n max_mem: 1G\n max_file: "1G"\n domain: hub\n'
        ' sync_interval: "10s"\n strict: false\n unique_tag: " AZ "\n}'
    )
    js = options.jetstream
    assert (js.enabled, js.store_dir, js.domain, js.strict, js.unique_tag) == (True, "/data/jss", "hub", False, "az")
    assert (js.max_memory, js.max_storage, js.sync_interval_s) == (10**9, 2**30, 10.0)
    assert load("jetstream { sync: always }").jetstream.sync_always is True
    assert load("jetstream { max_memory_store: 1GB, max_file_store: 2T }").jetstream.max_memory == 2**30


def test_storage_size_strings_must_end_in_k_m_g_t() -> None:
    assert problems('jetstream: {max_mem: "1X"}') == ["t.conf:1:22: max_mem_store sizes defined as strings must end in K, M, G, T"]


def test_jetstream_bad_string_form() -> None:
    assert "Expected 'enabled' or 'disabled'" in problems("jetstream: maybe")[0]


def test_store_dir_may_be_top_level_but_not_both() -> None:
    assert load("store_dir: /x\njetstream: enabled").jetstream.store_dir == "/x"
    assert load("storedir: /y").jetstream.store_dir == "/y"
    assert problems("store_dir: /a\njetstream { store_dir: /b }") == ["t.conf:2:13: Duplicate 'store_dir' configuration"]


# --- cluster (§2.3) -------------------------------------------------------------------------
SEED_N1 = """\
server_name=n1-c1
listen=4222

jetstream {
   store_dir=/nats/storage
}

cluster {
  name: C1
  listen: localhost:6222
  routes: [
    nats-route://host_b:6222
    nats-route://host_c:6222
  ]
}
"""


def test_the_seed_cluster_member_loads_as_written() -> None:
    options = load(SEED_N1)
    assert (options.server_name, options.port, options.jetstream.store_dir) == ("n1-c1", 4222, "/nats/storage")
    cluster = options.cluster
    assert (cluster.name, cluster.host, cluster.port, cluster.enabled) == ("C1", "localhost", 6222, True)
    assert cluster.routes == ["nats-route://host_b:6222", "nats-route://host_c:6222"]


def test_cluster_keys() -> None:
    cluster = load(
        "cluster {\n name: C\n host: 0.0.0.0\n port: -1\n advertise: 'h:1'\n no_advertise: true\n"
        " pool_size: -1\n accounts: [A, B]\n compression: off\n connect_retries: 5\n ping_interval: \"10s\"\n"
        " ping_max: 3\n authorization { user: ru, password: rp, timeout: 0.5 }\n}"
    ).cluster
    assert (cluster.name, cluster.host, cluster.port, cluster.advertise) == ("C", "0.0.0.0", -1, "h:1")
    assert (cluster.no_advertise, cluster.pool_size, cluster.pinned_accounts) == (True, -1, ["A", "B"])
    assert (cluster.compression, cluster.connect_retries, cluster.ping_interval_s, cluster.ping_max) == ("off", 5, 10.0, 3)
    assert (cluster.user, cluster.password, cluster.auth_timeout_s) == ("ru", "rp", 0.5)


def test_cluster_ping_interval_is_capped_at_30s_with_a_warning() -> None:
    options = load('cluster { ping_interval: "1m" }')
    assert options.cluster.ping_interval_s == 30.0
    assert "max for routes" in options.config_warnings[0]


def test_cluster_authorization_takes_one_user_only() -> None:
    assert "does not allow multiple users" in problems("cluster { authorization { users: [] } }")[0]
    assert "does not support tokens" in problems("cluster { authorization { token: t } }")[0]


def test_duplicate_routes_are_a_warning() -> None:
    options = load("cluster { listen: 6222, routes: [nats://a:1, nats://a:1] }")
    assert options.cluster.routes == ["nats://a:1"]
    assert "Duplicate route entry detected" in options.config_warnings[0]


def test_a_route_with_a_bad_port_is_an_error() -> None:
    assert 'error parsing route url ["nats://a:x"]' in problems("cluster { routes: [nats://a:x] }")[0]


def test_cluster_name_cannot_contain_spaces() -> None:
    assert "cluster name cannot contain spaces" in problems('cluster { name: "C 1" }')[0]


def test_jetstream_clustering_requires_server_name_cluster_name_and_routes() -> None:
    found = problems("jetstream: enabled\ncluster { listen: 6222 }")
    assert found == [
        "t.conf:2:1: jetstream cluster requires `server_name` to be set",
        "t.conf:2:1: jetstream cluster requires `cluster.name` to be set",
        "t.conf:2:1: JetStream cluster requires configured routes or solicited leafnode for the system account",
    ]


def test_a_cluster_without_jetstream_needs_no_names() -> None:
    assert load("cluster { listen: 127.0.0.1:16222, routes: [nats://127.0.0.1:16223] }").cluster.port == 16222


# --- authorization (§2.4) -------------------------------------------------------------------
AUTH = """\
authorization {
  timeout: 3
  users: [
    { user: alice, password: "$2a$11$abcdefghijklmnopqrstuv", permissions: { publish: "foo.>", subscribe: ["_INBOX.>", "bar"] } }
    { username: bob, pass: plain, allowed_connection_types: ["STANDARD", "websocket"] }
    { user: carol, password: c, permission: { publish: { allow: ["a.*"], deny: ["a.b"] }, sub: { deny: ">" }, allow_responses: { max: 5, expires: "1m" } } }
  ]
  default_permissions: { publish: { deny: ">" } }
}
"""


def test_authorization_users_and_permissions() -> None:
    auth = load(AUTH).authorization
    assert auth.timeout_s == 3.0
    alice, bob, carol = auth.users
    assert (alice.username, alice.password, alice.account) == ("alice", "$2a$11$abcdefghijklmnopqrstuv", "$G")
    assert alice.permissions is not None and alice.permissions.publish is not None
    assert alice.permissions.publish.allow == ["foo.>"]
    assert alice.permissions.subscribe is not None and alice.permissions.subscribe.allow == ["_INBOX.>", "bar"]
    assert (bob.username, bob.password, bob.allowed_connection_types) == ("bob", "plain", ["STANDARD", "WEBSOCKET"])
    assert bob.permissions is auth.default_permissions  # users without permissions get the defaults
    assert carol.permissions is not None and carol.permissions.publish is not None
    assert (carol.permissions.publish.allow, carol.permissions.publish.deny) == (["a.*"], ["a.b"])
    assert carol.permissions.subscribe is not None and carol.permissions.subscribe.deny == [">"]
    responses = carol.permissions.allow_responses
    assert responses is not None and (responses.max_msgs, responses.expires_s) == (5, 60.0)


def test_allow_responses_true_turns_off_the_blanket_publish_allow() -> None:
    user = load("authorization { users: [ {user: u, permissions: { allow_responses: true }} ] }").authorization.users[0]
    assert user.permissions is not None and user.permissions.publish is not None
    assert user.permissions.publish.allow == []
    assert user.permissions.allow_responses is not None and user.permissions.allow_responses.max_msgs == 1


def test_single_user_token_and_timeout_forms() -> None:
    auth = load('authorization { user: a, password: b, timeout: "5s" }').authorization
    assert (auth.user, auth.password, auth.timeout_s) == ("a", "b", 5.0)
    assert load("authorization { token: s3cr3t }").authorization.token == "s3cr3t"


def test_authorization_conflicts() -> None:
    assert "Cannot have a user/pass and token" in problems("authorization { user: a, token: t }")[0]
    assert "single user/pass and a users array" in problems("authorization { user: a, users: [] }")[0]
    assert "token and a users array" in problems("authorization { token: t, users: [] }")[0]


@pytest.mark.parametrize(
    ("subject", "valid"),
    [("foo.>", True), ("a.*.c", True), (">", True), ("a>", True), ("a..b", False), (".a", False), ("a.", False),
     ("a.>.b", False), ("a\tb", False), ("", False)],
)
def test_permission_subjects_are_checked_like_nats_server(subject: str, valid: bool) -> None:
    text = f'authorization {{ users: [{{user: u, permissions: {{publish: "{subject}"}}}}] }}'.replace("\t", "\\t")
    if valid:
        load(text)
    else:
        assert "is not a valid subject" in problems(text)[0]


def test_bad_permission_shapes() -> None:
    assert 'subject "a..b" is not a valid subject' in problems("authorization { users: [{user: u, permissions: {publish: \"a..b\"}}] }")[0]
    assert "only 'allow' or 'deny'" in problems("authorization { users: [{user: u, permissions: {publish: {permit: x}}}] }")[0]
    assert "User entry requires a user" in problems("authorization { users: [{password: p}] }")[0]
    assert "queue" not in problems("authorization { users: [{user: u, permissions: {publish: \"a b\"}}] }")[0]
    assert load("authorization { users: [{user: u, permissions: {subscribe: \"a.* q\"}}] }").authorization.users


def test_high_auth_timeout_warns_about_unquoted_durations() -> None:
    assert "possibly caused by unquoted duration" in load("authorization { timeout: 2m }").config_warnings[0]


# --- accounts (§2.5) ------------------------------------------------------------------------
ACCOUNTS = """\
accounts {
  SYS: { users: [ {user: sys, password: sys} ] }
  APP: {
    jetstream: { max_mem: 1G, max_file: 10G, max_streams: 10, max_consumers: 100, max_ack_pending: 1000 }
    users: [ {user: app, password: app} ]
    imports: [ {stream: {account: X, subject: "a.>"}, prefix: p}, {service: {account: X, subject: "req"}, to: "local"} ]
    mappings: { "src.*": "dst.$1" }
  }
  X: { jetstream: enabled, exports: [ {stream: "a.>"}, {service: "req"} ] }
  Y: { jetstream: disabled, default_permissions: { publish: "y.>" }, users: [ {user: y} ] }
}
system_account: SYS
no_auth_user: app
"""


def test_accounts_bind_their_users_and_type_imports() -> None:
    options = load(ACCOUNTS)
    assert sorted(options.accounts) == ["APP", "SYS", "X", "Y"]
    app = options.accounts["APP"]
    assert [(u.username, u.account) for u in app.users] == [("app", "APP")]
    js = app.jetstream
    assert (js.enabled, js.max_memory, js.max_store, js.max_streams, js.max_consumers, js.max_ack_pending) == (
        True, 10**9, 10**10, 10, 100, 1000,
    )
    assert (app.imports[0].account, app.imports[0].subject, app.imports[0].local) == ("X", "a.>", "p.a.>")
    assert (app.imports[1].service, app.imports[1].local) == (True, "local")
    exports = options.accounts["X"].exports
    assert [(e.subject, e.service, e.response_type) for e in exports] == [("a.>", False, "Singleton"),
                                                                           ("req", True, "Singleton")]
    assert app.mappings == {"src.*": "dst.$1"}
    assert options.accounts["X"].jetstream.enabled and not options.accounts["Y"].jetstream.enabled
    y_user = options.accounts["Y"].users[0]
    assert y_user.permissions is not None and y_user.permissions.publish is not None
    assert y_user.permissions.publish.allow == ["y.>"]
    assert (options.system_account, options.no_auth_user) == ("SYS", "app")


def test_accounts_as_an_array_of_names() -> None:
    assert sorted(load("accounts: [A, B]").accounts) == ["A", "B"]
    assert "Duplicate Account Entry: A" in problems("accounts: [A, A]")[0]


def test_the_global_account_is_reserved() -> None:
    assert '"$G" is a Reserved Account' in problems("accounts { $G { } }")[0]


def test_users_are_unique_across_accounts_and_authorization() -> None:
    text = "authorization { users: [{user: a}] }\naccounts { B { users: [{user: a}] } }"
    assert 'Duplicate user "a" detected' in problems(text)[0]


def test_no_auth_user_must_exist() -> None:
    assert "not present as user" in problems("accounts { A { users: [{user: a}] } }\nno_auth_user: b")[0]
    assert "users/nkeys are not defined" in problems("no_auth_user: b")[0]


def test_system_account_alias_and_type() -> None:
    assert load("accounts { S {} }\nsystem: S").system_account == "S"
    assert load("accounts { S {} }\nSYSTEM_ACCOUNT: S").system_account == "S"
    assert load("no_system_account: true").no_system_account is True
    assert "system account name must be a string" in problems("system_account: 1")[0]
    assert problems("accounts { A {} }\nsystem: NOPE") == ["t.conf:2:1: error resolving system account: account missing"]
    assert load('system_account: "$SYS"').system_account == "$SYS"


def test_the_seeds_sys_account_with_a_bcrypt_password() -> None:
    text = 'accounts {\n  $SYS {\n    users = [\n      { user: "admin",\n        pass: "$2a$11$DRh4C0KNbNnD8K/hb/buWe1zPxEHrLEiDmuq1Mi0rRJiH/W25Qidm"\n      }\n    ]\n  }\n}\n'
    admin = load(text).accounts["$SYS"].users[0]
    assert (admin.username, admin.account) == ("admin", "$SYS")
    assert admin.password.startswith("$2a$11$DRh4C0KN")


# --- appliance block ------------------------------------------------------------------------
def test_the_appliance_block() -> None:
    settings = load('appliance { workers: 4, cpu_pinning: false, numa_store_dirs: { 0: "/a", 1: "/b" }, ring_bytes: 16MiB }').appliance
    assert (settings.workers, settings.cpu_pinning, settings.ring_bytes) == (4, False, 16 * 1024**2)
    assert settings.numa_store_dirs == {0: "/a", 1: "/b"}
    assert settings.peer_remove_timeout_s == 300.0  # nats-server's peerRemoveTimeout
    assert load('appliance { peer_remove_timeout: "90s" }').appliance.peer_remove_timeout_s == 90.0


def test_appliance_block_checks() -> None:
    found = problems("appliance { workers: -1, ring_bytes: 1000, numa_store_dirs: { x: /a }, turbo: true }")
    assert len(found) == 4
    assert "workers must be" in found[0] and "power of two" in found[1]
    assert 'NUMA node "x"' in found[2] and 'unknown field "turbo"' in found[3]
    assert problems('appliance { peer_remove_timeout: "0s" }') == [
        "t.conf:1:34: peer_remove_timeout must be a positive duration"]
    assert problems('appliance { peer_remove_timeout: "soon" }') == [
        't.conf:1:34: error parsing peer_remove_timeout: time: invalid duration "soon"']


# --- unknown, unsupported, variables, collection ----------------------------------------------
def test_unknown_keys_are_errors_everywhere() -> None:
    assert problems("port: 4222\nfoo_bar: 1") == ['t.conf:2:1: unknown field "foo_bar"']
    assert problems("jetstream { foo: 1 }") == ['t.conf:1:13: unknown field "foo"']
    assert problems("cluster {\n  bar: 1\n}") == ['t.conf:2:3: unknown field "bar"']
    assert problems("authorization { users: [{user: u, zap: 1}] }") == ['t.conf:1:35: unknown field "zap"']


@pytest.mark.parametrize("key", ["leafnodes", "gateway", "mqtt", "resolver_tls", "trusted_keys"])
def test_known_but_unsupported_keys_are_errors_not_ignored(key: str) -> None:
    assert problems(f"{key}: {{}}") == [f't.conf:1:1: field "{key}" is known to nats-server but not supported by appliance']


def test_top_level_keys_used_only_as_variables_are_fine_and_kept() -> None:
    options = load("PORT_X: 4777\nport: $PORT_X\njs_dir: /d\njetstream { store_dir: $js_dir }")
    assert options.port == 4777 and options.jetstream.store_dir == "/d"
    assert options.variables == {"PORT_X": 4777, "js_dir": "/d"}


def test_nested_keys_used_as_variables_are_fine() -> None:
    assert load("cluster { p: 6222, port: $p }").cluster.port == 6222


def test_environment_variables_fill_values() -> None:
    assert load("port: $MYP", env={"MYP": "4888"}).port == 4888


def test_every_problem_of_a_file_is_reported_not_just_the_first() -> None:
    text = 'port: "x"\nfoo: 1\njetstream { max_mem: "1X", bogus: 2 }\nserver_name: "a b"\ntls {}\nwrite_deadline: "zz"'
    found = problems(text)
    assert [int(p.split(":")[1]) for p in found] == [1, 2, 3, 3, 4, 5, 6]
    assert all(p.startswith("t.conf:") for p in found)


def test_the_problem_list_is_bounded_and_says_how_many_were_left_out() -> None:
    found = problems("".join(f"unknown_{i}: 1\n" for i in range(limits.CONFIG_PROBLEMS_MAX + 25)))
    assert len(found) == limits.CONFIG_PROBLEMS_MAX + 1
    assert found[-1] == "t.conf: 25 more problems not shown"


def test_an_empty_file_is_a_warning_and_a_pedantic_error() -> None:
    assert load("").config_warnings == ["t.conf: config has no values or is empty"]
    assert problems("# only a comment\n", pedantic=True) == ["t.conf: config has no values or is empty"]


def test_load_config_reads_a_file(tmp_path: Path) -> None:
    path = tmp_path / "n1.conf"
    path.write_text(SEED_N1)
    options = load_config(str(path), env={})
    assert options.config_file == str(path) and options.server_name == "n1-c1"
    assert options.config_anchors["cluster"] == f"{path}:8:1"


def test_validation_can_be_deferred_for_flags_to_fix() -> None:
    options = options_from_text("jetstream: enabled\ncluster { listen: 6222 }", filename="t.conf", env={}, validate=False)
    assert options.cluster.port == 6222 and options.server_name == ""
