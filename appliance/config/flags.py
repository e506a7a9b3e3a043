"""nats-server's command-line flags for `appliance run`, parsed by hand, overlaid on options.

Why by hand: scripts that start nats-server pass Go-style flags — `-js`, `-sd=DIR`, `-DV`,
`--store_dir=DIR`, `-T=false` — that click/argparse cannot parse. The rules are Go's `flag`
package: one or two dashes, `-name=value` or `-name value` (booleans only take `=value`),
parsing stops at the first non-flag argument or `--`; a leftover `version`/`help` argument
means what it says and anything else is an error.

`parse_run_args(argv) -> RunArgs` (frozen; None = not given) never touches the file system.
`apply_flags(options, args)` returns new options with the flags winning, as nats-server does.
`resolve_run_options(args)` is the whole `appliance run` sequence: load `-c` without the
cross-field checks, overlay the flags, then check the result (a flag like `-n` can fix a file).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass

from appliance.config.convert import split_host_port
from appliance.config.load import DEFAULT_CLIENT_PORT, load_config, validate_options
from appliance.config.options import ServerOptions, default_auth_timeout
from appliance.config.parser import ReadFile, read_text_file
from appliance.config.tls import TLSOptions
from appliance.config.tls_context import TLSConfigError, server_context
from appliance.errors import ConfigError

USAGE = """\
Usage: appliance run [options]

Server Options:
    -a, --addr, --net <host>         Bind to host address (default: 0.0.0.0)
    -p, --port <port>                Use port for clients (default: 4222, -1 for random)
    -n, --name, --server_name <name> Server name (default: auto)
    -P, --pid <file>                 File to store PID
        --ports_file_dir <dir>       Creates a ports file in the specified directory (<executable_name>_<pid>.ports).
    -m, --http_port <port>           Use port for http monitoring
    -ms,--https_port <port>          Use port for https monitoring
    -c, --config <file>              Configuration file
    -t                               Test configuration and exit
        --client_advertise <string>  Client URL to advertise to other servers

Logging Options:
    -l, --log <file>                 File to redirect log output
        --log_size_limit <limit>     Logfile size limit being auto-rotated
    -T, --logtime                    Timestamp log entries (default: true)
    -D, --debug                      Enable debugging output
    -V, --trace                      Trace the raw protocol
    -VV                              Verbose trace (traces system account as well)
    -DV                              Debug and trace
    -DVV                             Debug and verbose trace (traces system account as well)

JetStream Options:
    -js, --jetstream                 Enable JetStream functionality
    -sd, --store_dir <dir>           Set the storage directory

Authorization Options:
        --user <user>                User required for connections
        --pass <password>            Password required for connections
        --auth <token>               Authorization token required for connections

TLS Options:
        --tls                        Enable TLS, do not verify clients (default: false)
        --tlscert <file>             Server certificate file
        --tlskey <file>              Private key for server certificate
        --tlsverify                  Enable TLS, verify client certificates
        --tlscacert <file>           Client certificate CA for verification

Cluster Options:
        --routes <rurl-1, rurl-2>    Routes to solicit and connect
        --cluster <cluster-url>      Cluster URL for solicited routes
        --cluster_listen <url>       Cluster url from which members can solicit routes
        --cluster_name <string>      Cluster Name, if not set one will be dynamically generated
        --no_advertise <bool>        Do not advertise known cluster information to clients
        --cluster_advertise <string> Cluster URL to advertise to other servers
        --connect_retries <number>   For implicit routes, number of connect retries

Common Options:
    -h, --help                       Show this message
    -v, --version                    Show version
"""


@dataclass(frozen=True, slots=True)
class RunArgs:
    """The flags of one `appliance run` command line; None means "not given"."""

    config_file: str | None = None
    check_config: bool = False
    show_version: bool = False
    show_help: bool = False
    port: int | None = None
    host: str | None = None
    server_name: str | None = None
    http_port: int | None = None
    https_port: int | None = None
    client_advertise: str | None = None
    jetstream: bool | None = None
    store_dir: str | None = None
    cluster_listen: str | None = None
    routes: str | None = None
    cluster_name: str | None = None
    cluster_advertise: str | None = None
    no_advertise: bool | None = None
    connect_retries: int | None = None
    user: str | None = None
    password: str | None = None
    auth_token: str | None = None
    debug: bool | None = None
    trace: bool | None = None
    trace_verbose: bool | None = None
    logtime: bool | None = None
    log_file: str | None = None
    pid_file: str | None = None
    ports_file_dir: str | None = None
    log_size_limit: int | None = None
    tls: bool | None = None
    tls_verify: bool | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_ca_cert: str | None = None


# flag name -> (kind, RunArgs fields it sets)
_BOOL, _INT, _STR = "bool", "int", "str"
_FLAGS: dict[str, tuple[str, tuple[str, ...]]] = {}
for _names, _kind, _fields in (
    (("c", "config"), _STR, ("config_file",)),
    (("t",), _BOOL, ("check_config",)),
    (("v", "version"), _BOOL, ("show_version",)),
    (("h", "help"), _BOOL, ("show_help",)),
    (("p", "port"), _INT, ("port",)),
    (("a", "addr", "net"), _STR, ("host",)),
    (("n", "name", "server_name"), _STR, ("server_name",)),
    (("m", "http_port"), _INT, ("http_port",)),
    (("ms", "https_port"), _INT, ("https_port",)),
    (("client_advertise",), _STR, ("client_advertise",)),
    (("js", "jetstream"), _BOOL, ("jetstream",)),
    (("sd", "store_dir"), _STR, ("store_dir",)),
    (("cluster", "cluster_listen"), _STR, ("cluster_listen",)),
    (("routes",), _STR, ("routes",)),
    (("cluster_name",), _STR, ("cluster_name",)),
    (("cluster_advertise",), _STR, ("cluster_advertise",)),
    (("no_advertise",), _BOOL, ("no_advertise",)),
    (("connect_retries",), _INT, ("connect_retries",)),
    (("user",), _STR, ("user",)),
    (("pass",), _STR, ("password",)),
    (("auth",), _STR, ("auth_token",)),
    (("D", "debug"), _BOOL, ("debug",)),
    (("V", "trace"), _BOOL, ("trace",)),
    (("VV",), _BOOL, ("trace", "trace_verbose")),
    (("DV",), _BOOL, ("debug", "trace")),
    (("DVV",), _BOOL, ("debug", "trace", "trace_verbose")),
    (("T", "logtime"), _BOOL, ("logtime",)),
    (("l", "log"), _STR, ("log_file",)),
    (("P", "pid"), _STR, ("pid_file",)),
    (("ports_file_dir",), _STR, ("ports_file_dir",)),
    (("log_size_limit",), _INT, ("log_size_limit",)),
    (("tls",), _BOOL, ("tls",)),
    (("tlsverify",), _BOOL, ("tls_verify",)),
    (("tlscert",), _STR, ("tls_cert",)),
    (("tlskey",), _STR, ("tls_key",)),
    (("tlscacert",), _STR, ("tls_ca_cert",)),
):
    for _name in _names:
        _FLAGS[_name] = (_kind, _fields)

# nats-server flags appliance does not implement: an error, not a silent no-op
UNSUPPORTED_FLAGS = frozenset({
    "logtime_utc", "s", "syslog", "r", "remote_syslog", "sl", "signal", "profile",
    "help_tls", "max_traced_msg_len",
})
_GO_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_GO_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


def _go_bool(name: str, text: str) -> bool:
    if text in _GO_TRUE:
        return True
    if text in _GO_FALSE:
        return False
    raise ConfigError([f'invalid boolean value "{text}" for -{name}: parse error'])


def _go_int(name: str, text: str) -> int:
    try:
        return int(text, 0)
    except ValueError:
        raise ConfigError([f'invalid value "{text}" for flag -{name}: parse error']) from None


def parse_run_args(argv: list[str]) -> RunArgs:
    """RunArgs of `argv` (without the program and command names); raises ConfigError."""
    values: dict[str, object] = {}
    index = 0
    while index < len(argv):
        arg = argv[index]
        if len(arg) < 2 or not arg.startswith("-"):
            break
        index += 1
        if arg == "--":
            break
        name = arg[2:] if arg.startswith("--") else arg[1:]
        if name == "" or name[0] in "-=":
            raise ConfigError([f"bad flag syntax: {arg}"])
        name, has_value, text = name.partition("=")
        if name in UNSUPPORTED_FLAGS:
            raise ConfigError([f"flag -{name} is known to nats-server but not supported by appliance"])
        if name not in _FLAGS:
            raise ConfigError([f"flag provided but not defined: -{name}"])
        kind, fields = _FLAGS[name]
        if kind == _BOOL:
            value: object = _go_bool(name, text) if has_value else True
        else:
            if not has_value:
                if index >= len(argv):
                    raise ConfigError([f"flag needs an argument: -{name}"])
                text = argv[index]
                index += 1
            value = _go_int(name, text) if kind == _INT else text
        for field_name in fields:
            values[field_name] = value
    _leftover_command(argv[index:], values)
    return RunArgs(**values)  # type: ignore[arg-type]


def _leftover_command(rest: list[str], values: dict[str, object]) -> None:
    if not rest:
        return
    command = rest[0].lower()
    if command == "version":
        values["show_version"] = True
    elif command == "help":
        values["show_help"] = True
    else:
        raise ConfigError([f'unrecognized command: "{rest[0]}"'])


# --- overlay ----------------------------------------------------------------------------------
def apply_flags(options: ServerOptions, args: RunArgs) -> ServerOptions:
    """New options: `options` (from the config file) with every given flag overriding it."""
    result = copy.deepcopy(options)
    _apply_server(result, args)
    _apply_jetstream(result, args)
    _apply_cluster(result, args)
    _apply_logging(result, args)
    _apply_tls(result, args)
    default_auth_timeout(result)
    return result


def _apply_tls(options: ServerOptions, args: RunArgs) -> None:
    """nats-server's overrideTLS: `-tls=false` turns TLS off; any other --tls* flag replaces the
    file's `tls {}` with one made of the flags alone (certificate and key required)."""
    if args.tls is False:
        options.tls = None
        return
    given = (args.tls, args.tls_verify, args.tls_cert, args.tls_key, args.tls_ca_cert)
    if all(value is None for value in given):
        return
    if not args.tls_cert:
        raise ConfigError(["TLS Server certificate must be present and valid"])
    if not args.tls_key:
        raise ConfigError(["TLS Server private key must be present and valid"])
    tls = TLSOptions(cert_file=args.tls_cert, key_file=args.tls_key, ca_file=args.tls_ca_cert or "",
                     verify=bool(args.tls_verify))
    try:
        server_context(tls)
    except TLSConfigError as error:
        raise ConfigError([str(error)]) from None
    options.tls = tls


def _apply_server(options: ServerOptions, args: RunArgs) -> None:
    if args.port is not None:
        options.port = args.port or DEFAULT_CLIENT_PORT
    if args.host is not None:
        options.host = args.host
    if args.server_name is not None:
        options.server_name = args.server_name
    if args.http_port is not None:
        options.http_port = args.http_port
    if args.https_port is not None:
        options.https_port = args.https_port
    if args.client_advertise is not None:
        options.client_advertise = args.client_advertise
    auth = options.authorization
    if args.user is not None:
        auth.user = args.user
    if args.password is not None:
        auth.password = args.password
    if args.auth_token is not None:
        auth.token = args.auth_token


def _apply_jetstream(options: ServerOptions, args: RunArgs) -> None:
    if args.jetstream is not None:
        options.jetstream.enabled = args.jetstream
    if args.store_dir is not None:
        options.jetstream.store_dir = args.store_dir


def _apply_logging(options: ServerOptions, args: RunArgs) -> None:
    for name in ("debug", "trace", "trace_verbose", "logtime"):
        value = getattr(args, name)
        if value is not None:
            setattr(options, name, value)
    if args.log_file is not None:
        options.log_file = args.log_file
    if args.pid_file is not None:
        options.pid_file = args.pid_file
    if args.ports_file_dir is not None:
        options.ports_file_dir = args.ports_file_dir
    if args.log_size_limit is not None:
        options.log_size_limit = args.log_size_limit


def _apply_cluster(options: ServerOptions, args: RunArgs) -> None:
    cluster = options.cluster
    if args.cluster_listen is not None:
        _override_cluster_listen(options, args.cluster_listen)
    if args.routes is not None:
        cluster.routes = [route.strip() for route in args.routes.split(",") if route.strip()]
        if args.routes and args.cluster_listen is None and cluster.host == "" and cluster.port == 0:
            raise ConfigError(["solicited routes require cluster capabilities, e.g. --cluster"])
    if args.cluster_name is not None:
        cluster.name = args.cluster_name
    if args.cluster_advertise is not None:
        cluster.advertise = args.cluster_advertise
    if args.no_advertise is not None:
        cluster.no_advertise = args.no_advertise
    if args.connect_retries is not None:
        cluster.connect_retries = args.connect_retries


def _override_cluster_listen(options: ServerOptions, url: str) -> None:
    """`--cluster nats://[user:pass@]host:port`; "" turns clustering off; port -1 is random."""
    cluster = options.cluster
    if url == "":
        cluster.port = 0
        return
    scheme, separator, rest = url.partition("://")
    if not separator or not scheme:
        raise ConfigError([f'cluster URL "{url}" must look like nats://host:port'])
    netloc = rest.split("/", 1)[0]
    userinfo, at, hostport = netloc.rpartition("@")
    try:
        host, port_text = split_host_port(hostport)
        port = int(port_text, 10)
    except ValueError as error:
        raise ConfigError([f'cluster URL "{url}": {error}']) from None
    if not -1 <= port <= 65535:
        raise ConfigError([f'cluster URL "{url}": port {port} out of range'])
    cluster.host, cluster.port = host, port
    if not at:
        cluster.user, cluster.password = "", ""
        return
    user, colon, password = userinfo.partition(":")
    if not colon:
        raise ConfigError(["expected cluster password to be set"])
    cluster.user, cluster.password = user, password


def resolve_run_options(
    args: RunArgs,
    *,
    env: Mapping[str, str] | None = None,
    read_file: ReadFile = read_text_file,
    defaults: ServerOptions | None = None,
    pedantic: bool = False,
) -> ServerOptions:
    """Options for `appliance run`: the `-c` file (else `defaults`, else nats-server's defaults),
    then the flags, then the cross-field checks; raises ConfigError listing every problem.
    `pedantic=True` makes config warnings problems, as `nats-server -t` does (use it for `-t`)."""
    options = copy.deepcopy(defaults) if defaults is not None else ServerOptions()
    if args.config_file is not None:
        options = load_config(args.config_file, env=env, read_file=read_file, validate=False, pedantic=pedantic)
    options = apply_flags(options, args)
    validate_options(options)
    return options

