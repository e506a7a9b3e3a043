"""nats-server's command-line flags: Go `flag` syntax, and the overlay where flags win (spec §3)."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.config import (
    RunArgs,
    apply_flags,
    embedded_default_options,
    options_from_text,
    parse_run_args,
    resolve_run_options,
    user_data_dir,
)
from appliance.config.options import ServerOptions
from appliance.errors import ConfigError


def flag_error(argv: list[str]) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_run_args(argv)
    return caught.value.problems[0]


# --- parsing --------------------------------------------------------------------------------
def test_no_flags_is_all_unset() -> None:
    assert parse_run_args([]) == RunArgs()


@pytest.mark.parametrize(
    "argv",
    [
        ["-sd=/data"], ["-sd", "/data"], ["--sd=/data"], ["--store_dir=/data"], ["--store_dir", "/data"],
        ["-store_dir=/data"],
    ],
)
def test_value_flags_take_equals_or_the_next_argument_with_one_or_two_dashes(argv: list[str]) -> None:
    assert parse_run_args(argv).store_dir == "/data"


def test_the_common_nats_server_command_line() -> None:
    args = parse_run_args([
        "-c", "n1.conf", "-p", "-1", "-a", "127.0.0.1", "-n", "n1", "-m", "8222", "-js", "-sd", "/tmp/js",
        "--cluster", "nats://127.0.0.1:6222", "--routes", "nats://127.0.0.1:6223,nats://127.0.0.1:6224",
        "--cluster_name", "C1", "-DV", "-l", "/tmp/log", "-P", "/tmp/pid",
    ])
    assert (args.config_file, args.port, args.host, args.server_name, args.http_port) == ("n1.conf", -1, "127.0.0.1", "n1", 8222)
    assert (args.jetstream, args.store_dir, args.cluster_listen) == (True, "/tmp/js", "nats://127.0.0.1:6222")
    assert (args.routes, args.cluster_name) == ("nats://127.0.0.1:6223,nats://127.0.0.1:6224", "C1")
    assert (args.debug, args.trace, args.trace_verbose) == (True, True, None)
    assert (args.log_file, args.pid_file) == ("/tmp/log", "/tmp/pid")


@pytest.mark.parametrize(
    ("flag", "debug", "trace", "verbose"),
    [("-D", True, None, None), ("-V", None, True, None), ("-DV", True, True, None), ("-VV", None, True, True),
     ("-DVV", True, True, True), ("--debug", True, None, None), ("--trace", None, True, None), ("-DV=false", False, False, None)],
)
def test_logging_flags(flag: str, debug: bool | None, trace: bool | None, verbose: bool | None) -> None:
    args = parse_run_args([flag])
    assert (args.debug, args.trace, args.trace_verbose) == (debug, trace, verbose)


def test_aliases() -> None:
    assert parse_run_args(["--addr", "h"]).host == parse_run_args(["--net", "h"]).host == "h"
    assert parse_run_args(["--name", "x"]).server_name == parse_run_args(["--server_name", "x"]).server_name == "x"
    assert parse_run_args(["--cluster_listen", "nats://h:1"]).cluster_listen == "nats://h:1"
    assert parse_run_args(["--jetstream"]).jetstream is True
    assert parse_run_args(["--http_port=9"]).http_port == 9
    assert parse_run_args(["--config=x.conf"]).config_file == "x.conf"
    assert parse_run_args(["--log", "l"]).log_file == "l" and parse_run_args(["--pid", "p"]).pid_file == "p"


def test_boolean_flags_take_only_the_equals_form() -> None:
    assert parse_run_args(["-T=false"]).logtime is False
    assert parse_run_args(["-js=0"]).jetstream is False
    assert parse_run_args(["--no_advertise=true"]).no_advertise is True
    assert flag_error(["-js=maybe"]) == 'invalid boolean value "maybe" for -js: parse error'


def test_simple_value_flags() -> None:
    args = parse_run_args([
        "--user", "u", "--pass", "p", "--auth", "tok", "--client_advertise", "c:1", "--connect_retries", "3",
        "--cluster_advertise", "h:2", "-t",
    ])
    assert (args.user, args.password, args.auth_token, args.client_advertise) == ("u", "p", "tok", "c:1")
    assert (args.connect_retries, args.cluster_advertise, args.check_config) == (3, "h:2", True)


def test_version_and_help() -> None:
    assert parse_run_args(["-v"]).show_version and parse_run_args(["--version"]).show_version
    assert parse_run_args(["-h"]).show_help and parse_run_args(["--help"]).show_help
    assert parse_run_args(["version"]).show_version and parse_run_args(["-p", "1", "help"]).show_help


def test_errors_are_clear() -> None:
    assert flag_error(["-x"]) == "flag provided but not defined: -x"
    assert flag_error(["--bogus=1"]) == "flag provided but not defined: -bogus"
    assert flag_error(["-p", "abc"]) == 'invalid value "abc" for flag -p: parse error'
    assert flag_error(["-p"]) == "flag needs an argument: -p"
    assert flag_error(["---p"]) == "bad flag syntax: ---p"
    assert flag_error(["run"]) == 'unrecognized command: "run"'
    assert "not supported by appliance" in flag_error(["--help_tls"])


def test_parsing_stops_at_a_double_dash() -> None:
    assert parse_run_args(["-p", "5", "--"]).port == 5


# --- overlay ----------------------------------------------------------------------------------
FILE = """\
server_name: from-file
listen: 127.0.0.1:4222
jetstream { store_dir: /file/js }
cluster { name: C1, listen: 127.0.0.1:6222, routes: [nats://127.0.0.1:6223], authorization { user: ru, password: rp } }
debug: false
"""


def file_options() -> ServerOptions:
    return options_from_text(FILE, filename="n.conf", env={})


def test_flags_win_over_the_file() -> None:
    base = file_options()
    merged = apply_flags(base, parse_run_args(["-p", "5222", "-n", "flag-name", "-sd", "/flag/js", "-D", "-a", "0.0.0.0"]))
    assert (merged.port, merged.server_name, merged.jetstream.store_dir, merged.debug, merged.host) == (
        5222, "flag-name", "/flag/js", True, "0.0.0.0",
    )
    assert base.port == 4222 and base.server_name == "from-file"  # the input is not changed


def test_unset_flags_leave_the_file_alone() -> None:
    base = file_options()
    assert apply_flags(base, parse_run_args([])) == base


def test_cluster_flag_sets_listen_and_route_auth_from_the_url() -> None:
    merged = apply_flags(file_options(), parse_run_args(["--cluster", "nats://u:p@0.0.0.0:7222"]))
    assert (merged.cluster.host, merged.cluster.port, merged.cluster.user, merged.cluster.password) == ("0.0.0.0", 7222, "u", "p")


def test_cluster_flag_without_credentials_clears_the_files_route_auth() -> None:
    merged = apply_flags(file_options(), parse_run_args(["--cluster", "nats://127.0.0.1:-1"]))
    assert (merged.cluster.port, merged.cluster.user, merged.cluster.password) == (-1, "", "")


def test_empty_cluster_flag_turns_clustering_off() -> None:
    assert apply_flags(file_options(), parse_run_args(["--cluster="])).cluster.port == 0


def test_cluster_flag_errors() -> None:
    with pytest.raises(ConfigError, match="expected cluster password to be set"):
        apply_flags(ServerOptions(), parse_run_args(["--cluster", "nats://u@h:1"]))
    with pytest.raises(ConfigError, match="missing port"):
        apply_flags(ServerOptions(), parse_run_args(["--cluster", "nats://h"]))
    with pytest.raises(ConfigError, match="must look like"):
        apply_flags(ServerOptions(), parse_run_args(["--cluster", "h:1"]))


def test_routes_flag_replaces_the_files_routes() -> None:
    merged = apply_flags(file_options(), parse_run_args(["--routes", "nats://a:1, nats://b:2"]))
    assert merged.cluster.routes == ["nats://a:1", "nats://b:2"]
    assert apply_flags(file_options(), parse_run_args(["--routes="])).cluster.routes == []


def test_routes_need_a_cluster_listener() -> None:
    with pytest.raises(ConfigError, match="solicited routes require cluster capabilities"):
        apply_flags(ServerOptions(), parse_run_args(["--routes", "nats://a:1"]))
    assert apply_flags(ServerOptions(), parse_run_args(["--cluster", "nats://h:1", "--routes", "nats://a:1"])).cluster.routes


def test_auth_and_other_flags() -> None:
    merged = apply_flags(ServerOptions(), parse_run_args([
        "--user", "u", "--pass", "p", "--auth", "t", "--client_advertise", "c", "--cluster_name", "C", "--no_advertise=true",
        "--connect_retries", "4", "--cluster_advertise", "a:1", "-m", "-1", "-VV", "-T=false", "-js",
    ]))
    auth = merged.authorization
    assert (auth.user, auth.password, auth.token, merged.client_advertise) == ("u", "p", "t", "c")
    assert (merged.cluster.name, merged.cluster.no_advertise, merged.cluster.connect_retries) == ("C", True, 4)
    assert (merged.cluster.advertise, merged.http_port, merged.trace, merged.trace_verbose) == ("a:1", -1, True, True)
    assert (merged.logtime, merged.jetstream.enabled) == (False, True)


def test_port_zero_means_the_default_port() -> None:
    assert apply_flags(ServerOptions(port=5), parse_run_args(["-p", "0"])).port == 4222


# --- the whole `appliance run` sequence ----------------------------------------------------
def test_flags_can_fix_what_the_file_lacks(tmp_path: Path) -> None:
    path = tmp_path / "n.conf"
    path.write_text("jetstream: enabled\ncluster { name: C1, listen: 127.0.0.1:6222, routes: [nats://127.0.0.1:6223] }\n")
    with pytest.raises(ConfigError, match="requires `server_name`"):
        resolve_run_options(parse_run_args(["-c", str(path)]), env={})
    options = resolve_run_options(parse_run_args(["-c", str(path), "-n", "n1"]), env={})
    assert options.server_name == "n1" and options.config_file == str(path)


def test_pedantic_resolution_treats_warnings_as_problems_like_dash_t(tmp_path: Path) -> None:
    path = tmp_path / "w.conf"
    path.write_text("write_deadline: 2m\n")
    assert resolve_run_options(parse_run_args(["-c", str(path)]), env={}).write_deadline_s == 2_000_000
    with pytest.raises(ConfigError, match="should be converted to a duration"):
        resolve_run_options(parse_run_args(["-t", "-c", str(path)]), env={}, pedantic=True)


def test_flags_alone_build_a_clustered_jetstream_server() -> None:
    argv = ["-js", "-n", "n1", "--cluster_name", "C1", "--cluster", "nats://127.0.0.1:-1", "--routes", "nats://127.0.0.1:6223"]
    options = resolve_run_options(parse_run_args(argv), env={})
    assert options.jetstream.enabled and options.cluster.port == -1 and options.cluster.routes == ["nats://127.0.0.1:6223"]


def test_flags_that_break_the_options_are_reported() -> None:
    with pytest.raises(ConfigError) as caught:
        resolve_run_options(parse_run_args(["-js", "--cluster", "nats://127.0.0.1:6222", "-p", "70000"]), env={})
    assert "<command line>: port 70000 out of range (-1 for random, 1..65535)" in caught.value.problems
    assert "<command line>: jetstream cluster requires `server_name` to be set" in caught.value.problems


# --- no config file: the embedded default (DESIGN §1) -----------------------------------------
def test_the_embedded_default_is_a_local_single_node_jetstream_server() -> None:
    defaults = embedded_default_options(data_dir="/home/u/.local/share/appliance")
    options = resolve_run_options(parse_run_args([]), env={}, defaults=defaults)
    assert (options.host, options.port, options.cluster.port) == ("127.0.0.1", 4222, 0)
    assert options.jetstream.enabled and options.jetstream.store_dir == "/home/u/.local/share/appliance"
    assert resolve_run_options(parse_run_args(["-p", "5000", "-js=false"]), env={}, defaults=defaults).port == 5000
    assert defaults.port == 4222  # defaults are copied, never changed


def test_a_config_file_replaces_the_embedded_default(tmp_path: Path) -> None:
    path = tmp_path / "plain.conf"
    path.write_text("port: 4333\n")
    options = resolve_run_options(parse_run_args(["-c", str(path)]), env={}, defaults=embedded_default_options(data_dir="/d"))
    assert (options.host, options.port, options.jetstream.enabled) == ("0.0.0.0", 4333, False)


def test_the_user_data_dir_follows_xdg() -> None:
    assert user_data_dir({"XDG_DATA_HOME": "/xdg", "HOME": "/home/u"}) == "/xdg/appliance"
    assert user_data_dir({"HOME": "/home/u"}) == "/home/u/.local/share/appliance"
    assert user_data_dir({"XDG_DATA_HOME": "relative", "HOME": "/home/u"}) == "/home/u/.local/share/appliance"
