"""Differential test: the real nats-server 2.15.1 and appliance judge the same config texts.

* `nats-server -t -c FILE` (parse + per-key checks, warnings are errors) against
  `options_from_text(..., pedantic=True, validate=False)`: accepted by both or rejected by both.
* Checks nats-server makes only at start-up (`nats-server -c FILE` exits 1 at once) against
  appliance's cross-field validation, which `check-config` also runs.
* The deliberate differences, asserted so they stay deliberate: keys nats-server knows that
  appliance reports as unsupported, and the appliance-only `appliance {}` block.
"""

from __future__ import annotations

import concurrent.futures
import json
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from appliance.config import options_from_text, parse_run_args, resolve_run_options
from appliance.errors import ConfigError

pytestmark = pytest.mark.integration  # runs the real nats-server binary (127.0.0.1, free ports)

# the `nats_server` fixture of conftest.py: run nats-server ARGS with exactly ENV in a directory
RunServer = Callable[[list[str], dict[str, str], Path], "subprocess.CompletedProcess[str]"]

RUN_TIMEOUT_S = 20.0

SEED_SYS = """\
server_name=n1-c1
listen=4222

accounts {
  $SYS {
    users = [
      { user: "admin",
        pass: "$2a$11$DRh4C0KNbNnD8K/hb/buWe1zPxEHrLEiDmuq1Mi0rRJiH/W25Qidm"
      }
    ]
  }
}

jetstream {
   store_dir=/nats/storage
}

cluster {
  name: C1
  listen: 0.0.0.0:6222
  routes: [
    nats://host_b:6222
    nats://host_c:6222
  ]
}
"""
TORTURE = """\
// slash comment
# hash comment
{
host 127.0.0.1; port = 4999
http: "127.0.0.1:8999"
include ./inc/extra.conf            # contains: max_payload = 512KB
authorization {
  users = [
    {user: "a b", password: 'raw\\npw'}, {user: c, password: "esc\\tpw"}
  ]
}
server_tags: [ "az:1", ssd ]
ping_interval: "30s"
write_deadline: 5s
}
"""
ACCEPTED = {
    "port": "port: 4222\n",
    "log_files": "log_file: /tmp/x.log\nlogfile_size_limit: 1MB\nlogfile_max_num: 3\nports_file_dir: /tmp\n",
    "torture": TORTURE,
    "standalone": "server_name: S1\nlisten: 127.0.0.1:4222\nhttp: 127.0.0.1:8222\njetstream { store_dir: /data/exp/jss }\n",
    "member": (
        "server_name: N1\nlisten: 127.0.0.1:5201\njetstream { store_dir: /data/exp/js1 }\n"
        "accounts { SYS: { users: [{user: sys, password: sys}] }, APP: { jetstream: enabled, users: [{user: app, password: app}] } }\n"
        "system_account: SYS\ncluster { name: C3, listen: 127.0.0.1:6201,\n"
        "  routes: [nats-route://127.0.0.1:6201, nats-route://127.0.0.1:6202, nats-route://127.0.0.1:6203] }\n"
    ),
    "seed_sys": SEED_SYS,
    "variable": "PORT_X: 4777\nport: $PORT_X\n",
    "nested_variable": "cluster { p: 6222, port: $p }\n",
    "env": "port: $MYP\n",
    "env_chain": "server_name: $CHAIN_A\n",
    "listen_bare": "listen: 127.0.0.1:4222\n",
    "listen_port_only": "listen: -1\n",
    "sizes": "max_payload: 2MB\nmax_pending: 1G\nmax_control_line: 8kb\n",
    "js_block": 'jetstream { max_mem: 1G, max_file: "1G", sync_interval: "1m", store_dir: "/tmp/x", strict: false }\n',
    "js_short": "jetstream: enabled\n",
    "js_bool": "jetstream: true\n",
    "store_dir_top": "store_dir: /tmp/x\njetstream: enabled\n",
    "accounts_map": "accounts { A: { users: [{user: a, password: a}], jetstream: { max_mem: 1G, max_streams: 10 } } }\n",
    "accounts_array": "accounts: [A, B]\n",
    "imports": (
        'accounts { X: { exports: [ {stream: "a.>"}, {service: "req"} ] },\n'
        '  APP: { imports: [ {stream: {account: X, subject: "a.>"}, prefix: p}, {service: {account: X, subject: "req"}, to: "local"} ] } }\n'
    ),
    "tags": 'server_tags: [ "az:1", ssd ]\n',
    "durations": 'ping_interval: "30s"\nwrite_deadline: 5s\nlame_duck_duration: "45s"\nlame_duck_grace_period: "5s"\n',
    "bcrypt_2a_unquoted": "authorization { user: a, password: $2a$11$DRh4C0KNbNnD8K/hb/buWe1zPxEHrLEiDmuq1Mi0rRJiH/W25Qidm }\n",
    "braces": "{ port: 4222 }\n",
    "cluster_keys": "cluster { name: C1, listen: 127.0.0.1:6222, pool_size: -1, compression: off, no_advertise: true }\n",
    "booleans": "debug: yes\ntrace: OFF\nlogtime: on\n",
    "token": 'authorization { token: "s3cr3t", timeout: 2 }\n',
    "route_auth": "cluster { authorization { user: ru, password: rp, timeout: 1 } }\n",
    "permissions": (
        'authorization { users: [ { user: u, permissions: { publish: { allow: ["a.>"], deny: "a.b" },'
        ' subscribe: ["_INBOX.>", "q.* grp"], allow_responses: { max: 3, expires: "1m" } } } ] }\n'
    ),
    "default_permissions": "authorization { default_permissions: { publish: { deny: \">\" } }, users: [ {user: u} ] }\n",
    "no_auth_user": "accounts { A { users: [{user: a}] } }\nno_auth_user: a\n",
    "no_system_account": "no_system_account: true\n",
    "mappings": 'mappings { "src.*": "dst.$1" }\n',
    "aliases": "MAX_CONN: 10\nmax_subs: 5\nlog_file: /tmp/l\npid_file: /tmp/p\nmonitor_port: 8222\nnet: 127.0.0.1\n",
    "block_string_variable": "BLOCK: (\nn1\n)\nserver_name: $BLOCK\n",
    "semicolon_and_comma_terminators": "port: 4222;\nserver_name: x,\n",
    "unquoted_escape": "server_name: a\\tb\n",
    "trailing_comma_in_array": "server_tags: [a, b,]\n",
    "array_comments": "cluster { routes = [\n nats://a:1 # one\n nats://b:2 // two\n] }\n",
    "quoted_keys": "\"port\": 4222\n'server_name' = x\n",
    "no_space_after_colon": "port:4222\n",
    "upper_case_key": "PORT: 4222\nDEBUG: True\n",
    "quoted_include": 'include "inc/extra.conf"\n',
    "variable_above_nested_use": "PW: x\naccounts { A { users: [ {user: a, password: $PW} ] } }\n",
    "comment_after_value": "server_name: n1 # comment with: colon\n",
    "quoted_duration": 'write_deadline: "2m"\n',
    "random_port": "port: -1\n",
    "single_quoted_path": "jetstream { store_dir: 'x y' }\n",
    "stray_brace": "port: 4222 }\n",
    "http_port_only": "http: 8222\n",
    "zero_max_conn": "max_connections: 0\n",
    "empty_routes": 'cluster { listen: "127.0.0.1:6222", routes: [] }\n',
    "unclosed_top_brace": "{ port: 4222\n",
    "extra_closing_brace": "{ port: 4222 } }\n",
    "nested_braces": "{\n{\nport: 1\n}\n}\n",
    "crlf_line_ends": "port: 4222\r\nserver_name: n1\r\n",
    "tabs": "port\t4222\ncluster {\n\tname\t=\tC1\n}\n",
    "map_semicolons": "cluster { name: C1; port: 6222; }\n",
    "subject_token_with_gt": 'authorization { users: [ { user: u, permissions: { publish: "a>.b*" } } ] }\n',
    "queue_subscription_permission": 'authorization { users: [ { user: u, permissions: { subscribe: "a.* q" } } ] }\n',
}
REJECTED = {
    "unknown": "foo_bar: 1\n",
    "two_unknown": "port: 4222\nfoo_bar: 1\nbaz: 2\n",
    "int_array_quirk": "server_tags: [1]\n",
    "undefined_variable": "port: $NOPE_VAR\n",
    "bcrypt_2b_unquoted": "authorization { user: a, password: $2b$11$DRh4C0KNbNnD8K/hb/buWe1zPxEHrLEiDmuq1Mi0rRJiH/W25Qidm }\n",
    "lame_duck_unquoted": "lame_duck_duration: 2m\n",
    "lame_duck_short": 'lame_duck_duration: "10s"\n',
    "integer_duration_warning": "write_deadline: 2m\n",
    "server_name_space": 'server_name: "a b"\n',
    "listen_url": 'listen: "nats://0.0.0.0:4222"\n',
    "size_suffix_string": 'jetstream: {max_mem: "1X"}\n',
    "port_string": 'port: "4222"\n',
    "port_float": "port: 1.5\n",
    "bad_escape": 'server_name: "\\q"\n',
    "store_dir_twice": "store_dir: /a\njetstream { store_dir: /b }\n",
    "js_unknown": "jetstream { foo: 1 }\n",
    "cluster_unknown": "cluster { bar: 1 }\n",
    "empty": "",
    "key_without_value": "foo",
    "user_and_token": "authorization { user: a, token: t }\n",
    "reserved_account": "accounts { $G { } }\n",
    "duplicate_user": "authorization { users: [{user: a}] }\naccounts { B { users: [{user: a}] } }\n",
    "route_users": "cluster { authorization { users: [] } }\n",
    "js_string": "jetstream: maybe\n",
    "bad_duration": 'ping_interval: "1d"\n',
    "missing_include": "include nope.conf\n",
    "leading_dot": "server_name: .5\n",
    "env_cycle": "port: $CYCLE_A\n",
    "auth_timeout_warning": "authorization { timeout: 2m }\n",
    "cluster_name_space": 'cluster { name: "C 1" }\n',
    "payload_too_big": "max_payload: 3GB\n",
    "unterminated_string": 'server_name: "abc\n',
    "unclosed_map": "cluster { name: C1\n",
    "bad_subject": 'authorization { users: [ { user: u, permissions: { publish: "a..b" } } ] }\n',
    "users_not_array": "authorization { users: {user: a} }\n",
    "subject_after_full_wildcard": 'authorization { users: [ { user: u, permissions: { publish: "a.>.b" } } ] }\n',
    "queue_in_publish_permission": 'authorization { users: [ { user: u, permissions: { publish: "a.* q" } } ] }\n',
    "account_not_map": "accounts { A: 1 }\n",
    "hash_glued_to_number": "port: 4222#c\n",
    "ip_with_extra_colon": "listen: 127.0.0.1:4222:5\n",
    "float_with_suffix": "jetstream { max_mem: 1.5G }\n",
    "underscore_number": "max_payload: 1_000\n",
    "double_comma": "server_tags: [a,,b]\n",
    "maps_without_comma_in_array": "authorization { users = [ {user: a, password: b} {user: c, password: d} ] }\n",
    "variable_below_use": "accounts { A { users: [ {user: a, password: $PW} ] } }\nPW: x\n",
    "datetime_for_string": "server_name: 2021-01-01T00:00:00Z\n",
    "int_for_bool": "logtime: 1\n",
    "env_string_with_spaces": "authorization { token: $SPACED }\n",
    "quoted_key_with_space": '"a b": 1\n',
    "quoted_bool_for_bool": 'debug: "true"\n',
    "include_array": "include [a]\n",
    "negative_without_digit": "port: -x\n",
    "float_ip_like": "port: 1.2.3\n",
    "bad_hex_escape": 'server_name: "\\xZZ"\n',
    "partial_datetime": "server_name: 2021-01-01\n",
}
STARTUP_REJECTED = {
    "payload_over_pending": "max_pending: 1MB\nmax_payload: 2MB\n",
    "js_cluster_without_server_name": "jetstream { store_dir: $STORE }\ncluster { listen: 127.0.0.1:-1 }\n",
    "js_cluster_without_routes": "server_name: n1\njetstream { store_dir: $STORE }\ncluster { listen: 127.0.0.1:-1, name: C1 }\n",
    "no_auth_user_without_users": "no_auth_user: b\n",
    "grace_over_duration": 'lame_duck_duration: "30s"\nlame_duck_grace_period: "40s"\n',
    "undefined_system_account": "accounts { A {} }\nsystem_account: NOPE\n",
}
UNSUPPORTED_BY_APPLIANCE = {
    "syslog": "syslog: false\n",
    "logtime_utc": "logtime_utc: true\n",
    "http_base_path": "http_base_path: /x\n",
    "cluster_connect_backoff": "cluster { connect_backoff: true }\n",
}
CASE_ENV = {"TAGS": "[a, b\n]", "SPACED": "s3 cr3t", "MYP": "4888", "CHAIN_A": "$CHAIN_B", "CHAIN_B": "n1", "CYCLE_A": "$CYCLE_B", "CYCLE_B": "$CYCLE_A"}


def write_case(directory: Path, name: str, text: str) -> Path:
    (directory / "inc").mkdir(exist_ok=True)
    (directory / "inc" / "extra.conf").write_text("max_payload = 512KB\n")
    path = directory / f"{name}.conf"
    path.write_text(text)
    return path


def appliance_accepts(path: Path, env: dict[str, str], *, validate: bool) -> tuple[bool, list[str]]:
    try:
        options_from_text(path.read_text(), filename=str(path), env=env, pedantic=True, validate=validate)
    except ConfigError as error:
        return False, error.problems
    return True, []


VERDICT_CASES = {**ACCEPTED, **REJECTED}
PARALLEL_RUNS_MAX = 8  # concurrent `nats-server -t` processes while judging the case table


@pytest.fixture(scope="module")
def t_verdicts(
    nats_server: RunServer, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, tuple[Path, subprocess.CompletedProcess[str]]]:
    """`nats-server -t` on every case of the table, run concurrently once for the module."""
    root = tmp_path_factory.mktemp("t_verdicts")

    def judge(name: str) -> tuple[str, tuple[Path, subprocess.CompletedProcess[str]]]:
        directory = root / name
        directory.mkdir()
        path = write_case(directory, name, VERDICT_CASES[name])
        return name, (path, nats_server(["-t", "-c", path.name], CASE_ENV, directory))

    with concurrent.futures.ThreadPoolExecutor(max_workers=PARALLEL_RUNS_MAX) as pool:
        return dict(pool.map(judge, VERDICT_CASES))


@pytest.mark.parametrize(("name", "accepted"), [(n, True) for n in ACCEPTED] + [(n, False) for n in REJECTED])
def test_appliance_and_nats_server_t_agree(
    t_verdicts: dict[str, tuple[Path, subprocess.CompletedProcess[str]]], name: str, accepted: bool
) -> None:
    path, real = t_verdicts[name]
    assert (real.returncode == 0) is accepted, f"nats-server -t disagrees with the case table: {real.stderr}"
    ours, problems = appliance_accepts(path, CASE_ENV, validate=False)
    assert ours is accepted, f"nats-server said: {real.stderr.strip()}\nappliance said: {problems}"
    if not accepted:
        assert problems and all(problem.startswith(str(path)) for problem in problems)


@pytest.mark.parametrize(("name", "text"), list(STARTUP_REJECTED.items()))
def test_appliance_rejects_what_nats_server_refuses_to_start_with(nats_server: RunServer, tmp_path: Path, name: str, text: str) -> None:
    env = {**CASE_ENV, "STORE": str(tmp_path / "store")}
    path = write_case(tmp_path, name, "port: -1\n" + text)
    assert nats_server(["-t", "-c", path.name], env, tmp_path).returncode == 0, "-t alone accepts these"
    real = nats_server(["-c", path.name], env, tmp_path)
    assert real.returncode == 1, real.stderr
    ours, problems = appliance_accepts(path, env, validate=True)
    assert not ours
    texts = [problem.split(": ", 1)[1] for problem in problems]
    assert any(text in real.stderr for text in texts), f"nats-server: {real.stderr}\nappliance: {problems}"


@pytest.mark.parametrize(("name", "text"), list(UNSUPPORTED_BY_APPLIANCE.items()))
def test_keys_nats_server_accepts_are_reported_as_unsupported_not_unknown(nats_server: RunServer, tmp_path: Path, name: str, text: str) -> None:
    path = write_case(tmp_path, name, text)
    assert nats_server(["-t", "-c", path.name], CASE_ENV, tmp_path).returncode == 0
    ours, problems = appliance_accepts(path, CASE_ENV, validate=True)
    assert not ours
    assert len(problems) == 1 and "not supported by appliance" in problems[0]


STRICTER_THAN_NATS_SERVER_T = {
    "accounts_scalar": ("accounts: 30s\n", 'field "accounts": expected a map, got string "30s"'),
    "listen_port_range": ("listen: 70000\n", 'field "listen": port 70000 out of range'),
    "http_unquoted_size": ("http: 2m\n", 'field "http": port 2000000 out of range'),
    "negative_max_payload": ("max_payload: -1\n", "max_payload value can not be negative"),
}


@pytest.mark.parametrize(("name", "case"), list(STRICTER_THAN_NATS_SERVER_T.items()))
def test_where_appliance_is_deliberately_stricter_than_nats_server_t(
    nats_server: RunServer, tmp_path: Path, name: str, case: tuple[str, str]
) -> None:
    """nats-server -t passes these (it ignores a scalar `accounts`, and finds bad ports only when
    binding); appliance reports them while checking the file."""
    text, expected = case
    path = write_case(tmp_path, name, text)
    assert nats_server(["-t", "-c", path.name], CASE_ENV, tmp_path).returncode == 0
    ours, problems = appliance_accepts(path, CASE_ENV, validate=False)
    assert not ours and len(problems) == 1 and expected in problems[0], problems


def test_the_appliance_block_is_ours_alone(nats_server: RunServer, tmp_path: Path) -> None:
    path = write_case(tmp_path, "appliance", "appliance { workers: 2, ring_bytes: 1MiB }\n")
    real = nats_server(["-t", "-c", path.name], CASE_ENV, tmp_path)
    assert real.returncode == 1 and 'unknown field "appliance"' in real.stderr
    assert appliance_accepts(path, CASE_ENV, validate=True) == (True, [])


def test_string_lists_from_the_environment_work_unlike_in_nats_server(nats_server: RunServer, tmp_path: Path) -> None:
    """nats-server's pedantic mode rejects list items that came from an environment variable
    ("error parsing tags: unsupported type string"): a bug we do not copy."""
    path = write_case(tmp_path, "env_array", "server_tags: $TAGS\n")
    real = nats_server(["-t", "-c", path.name], CASE_ENV, tmp_path)
    assert real.returncode == 1 and "error parsing tags: unsupported type string" in real.stderr
    options = options_from_text(path.read_text(), filename=str(path), env=CASE_ENV, pedantic=True)
    assert options.server_tags == ["a", "b"]


def test_both_report_every_unknown_field_with_its_line(nats_server: RunServer, tmp_path: Path) -> None:
    path = write_case(tmp_path, "lines", "port: 4222\nfoo_bar: 1\nbaz: 2\n")
    real = nats_server(["-t", "-c", path.name], CASE_ENV, tmp_path)
    assert 'lines.conf:2:1: unknown field "foo_bar"' in real.stderr and 'lines.conf:3:1: unknown field "baz"' in real.stderr
    _, problems = appliance_accepts(path, CASE_ENV, validate=True)
    assert problems == [f'{path}:2:1: unknown field "foo_bar"', f'{path}:3:1: unknown field "baz"']


@pytest.mark.parametrize("text", ["port: 4333\nserver_name: a b c }\n", "port: 4333\nfoo { a: 1 \n",
                                  "port: 4333\nfoo = [1,2\n}\n", 'a: "\\q"\n'])
def test_a_syntax_error_says_parse_error_with_nats_servers_text(nats_server: RunServer, tmp_path: Path,
                                                                text: str) -> None:
    """Tools that wrap nats-server look for its "Parse error on line N: '...'"; ours says the same
    words after file:line:col."""
    path = write_case(tmp_path, "syntax", text)
    real = nats_server(["-c", path.name], CASE_ENV, tmp_path)
    assert real.returncode == 1
    said = real.stderr.strip().removeprefix("nats-server: ")
    assert said.startswith("Parse error on line ")
    with pytest.raises(ConfigError) as caught:
        options_from_text(text, filename=str(path), env=CASE_ENV)
    [problem] = caught.value.problems
    position, _, words = problem.partition(": ")
    assert position.startswith(f"{path}:") and words == said


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def read_varz(http_port: int, process: subprocess.Popen[bytes]) -> dict[str, object]:
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while time.monotonic() < deadline:
        assert process.poll() is None, "nats-server exited before serving /varz"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/varz", timeout=2) as response:
                varz: dict[str, object] = json.loads(response.read())
                return varz
        except OSError:
            time.sleep(0.05)  # polling a condition with a deadline, not waiting for time to pass
    raise AssertionError("nats-server did not serve /varz in time")


def varz_of_running_server(server: Path, directory: Path, args: list[str], http_port: int) -> dict[str, object]:
    """Starts `nats-server ARGS` in `directory`, reads /varz once, stops it (by its pid)."""
    process = subprocess.Popen([str(server), *args], cwd=directory, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        return read_varz(http_port, process)
    finally:
        process.kill()
        process.wait(timeout=RUN_TIMEOUT_S)


NANOSECONDS = 1_000_000_000


def test_accepted_values_match_what_a_running_nats_server_reports(nats_server_path: Path, tmp_path: Path) -> None:
    client_port, http_port = free_port(), free_port()
    text = TORTURE.replace("port = 4999", f"port = {client_port}").replace("8999", str(http_port))
    path = write_case(tmp_path, "torture", text)
    varz = varz_of_running_server(nats_server_path, tmp_path, ["-c", path.name], http_port)
    ours = options_from_text(text, filename=str(path), env={}, pedantic=True)
    assert (varz["host"], varz["port"], varz["http_port"]) == (ours.host, ours.port, ours.http_port)
    assert (varz["max_payload"], varz["tags"]) == (ours.max_payload, ours.server_tags)
    assert varz["ping_interval"] == ours.ping_interval_s * NANOSECONDS
    assert varz["write_deadline"] == ours.write_deadline_s * NANOSECONDS
    assert (ours.max_payload, ours.server_tags, ours.ping_interval_s, ours.write_deadline_s) == (524288, ["az:1", "ssd"], 30.0, 5.0)


def test_flags_override_the_file_exactly_as_nats_server_does(nats_server_path: Path, tmp_path: Path) -> None:
    """The duration and size traps, and flags winning over the file, against a running nats-server."""
    http_port, file_port, flag_port, cluster_port = free_port(), free_port(), free_port(), free_port()
    store = tmp_path / "js"
    text = (
        f"port: {file_port}\nhttp: 127.0.0.1:{http_port}\nserver_name: from-file\nwrite_deadline: 2m\n"
        'server_tags: ["AZ:1", " Ssd ", "az:1"]\n'
        f'jetstream {{ store_dir: "{store}", max_mem: 1G, max_file: "1G" }}\n'
    )
    path = write_case(tmp_path, "flags", text)
    argv = [
        "-c", path.name, "-p", str(flag_port), "-n", "from-flags", "--cluster", f"nats://127.0.0.1:{cluster_port}",
        "--cluster_name", "CN", "--routes", "nats://127.0.0.1:1", "-DV",
    ]
    varz = varz_of_running_server(nats_server_path, tmp_path, argv, http_port)
    ours = resolve_run_options(parse_run_args(argv), read_file=lambda name: (tmp_path / name).read_text(), env={})
    assert (varz["port"], varz["server_name"]) == (ours.port, ours.server_name) == (flag_port, "from-flags")
    assert varz["write_deadline"] == ours.write_deadline_s * NANOSECONDS == 2_000_000 * NANOSECONDS
    assert varz["tags"] == ours.server_tags == ["az:1", "ssd"]
    cluster = varz["cluster"]
    assert isinstance(cluster, dict)
    assert (cluster["name"], cluster["addr"], cluster["cluster_port"]) == (ours.cluster.name, ours.cluster.host, ours.cluster.port)
    assert cluster["urls"] == [route.removeprefix("nats://") for route in ours.cluster.routes]
    jetstream = varz["jetstream"]
    assert isinstance(jetstream, dict)
    config = jetstream["config"]
    assert (config["max_memory"], config["max_storage"]) == (ours.jetstream.max_memory, ours.jetstream.max_storage)
    assert (config["max_memory"], config["max_storage"]) == (10**9, 2**30)
    assert config["store_dir"] == ours.jetstream.store_dir + "/jetstream"


def test_limits_auth_and_cluster_values_match_a_running_nats_server(nats_server_path: Path, tmp_path: Path) -> None:
    http_port, cluster_port = free_port(), free_port()
    text = (
        f"listen: 127.0.0.1:-1\nhttp_port: {http_port}\nmax_connections: 77\nmax_control_line: 8KB\n"
        'max_payload: 512KB\nmax_pending: 32MB\nping_interval: "45s"\nping_max: 5\n'
        "authorization { timeout: 3.5 }\n"
        "accounts { OPS { users: [ {user: ops, password: o} ] } }\nsystem_account: OPS\n"
        f"cluster {{ name: CX, listen: 127.0.0.1:{cluster_port}, pool_size: 5,\n"
        "  authorization { user: r, password: s, timeout: 1.5 } }\n"
    )
    path = write_case(tmp_path, "limits", text)
    varz = varz_of_running_server(nats_server_path, tmp_path, ["-c", path.name], http_port)
    ours = options_from_text(text, filename=str(path), env={}, pedantic=True)
    assert (varz["max_connections"], varz["max_control_line"]) == (ours.max_connections, ours.max_control_line) == (77, 8192)
    assert (varz["max_payload"], varz["max_pending"]) == (ours.max_payload, ours.max_pending) == (524288, 32 * 1024**2)
    assert (varz["ping_interval"], varz["ping_max"]) == (ours.ping_interval_s * NANOSECONDS, ours.ping_max)
    assert (varz["auth_timeout"], varz["system_account"]) == (ours.authorization.timeout_s, ours.system_account) == (3.5, "OPS")
    cluster = varz["cluster"]
    assert isinstance(cluster, dict)
    assert (cluster["name"], cluster["cluster_port"], cluster["pool_size"]) == (ours.cluster.name, ours.cluster.port, ours.cluster.pool_size)
    assert cluster["auth_timeout"] == ours.cluster.auth_timeout_s == 1.5


FLAG_ERRORS = [
    ["-x"], ["-p", "abc"], ["-p"], ["-js=maybe"], ["run"], ["--routes", "nats://a:1"], ["---p"],
    ["--cluster", "nats://u@h:1"], ["-m", "1", "--bogus=1"],
]


@pytest.mark.parametrize("argv", FLAG_ERRORS, ids=" ".join)
def test_bad_command_lines_get_nats_servers_message(nats_server: RunServer, tmp_path: Path, argv: list[str]) -> None:
    """Same first line as nats-server. (nats-server then prints its usage and, for flag-syntax
    errors, exits 0 — its usage function exits 0; `appliance run` exits 1 on every error.)"""
    real = nats_server(argv, {}, tmp_path)
    first_line = real.stderr.strip().splitlines()[0].removeprefix("nats-server: ")
    with pytest.raises(ConfigError) as caught:
        resolve_run_options(parse_run_args(argv), env={})
    assert caught.value.problems == [first_line]
