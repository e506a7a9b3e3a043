"""Typed server options: what the rest of the appliance reads, never the raw config tree.

Every field has nats-server's default. Durations are seconds (float), sizes are bytes (int).
`appliance/config/load.py` fills these from a NATS config file; `appliance/config/flags.py`
overlays command-line flags (flags win, as in nats-server).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypedDict

from appliance import limits
from appliance.config.imports import Export, Import
from appliance.config.tls import TLSOptions
from appliance.config.websocket import WebsocketOptions


class LoggingSettings(TypedDict):
    """appliance.log.setup_logging's keyword arguments."""

    debug: bool
    trace: bool
    logtime: bool
    log_file: str
    log_size_limit: int
    log_max_num: int


@dataclass(slots=True)
class SubjectPermission:
    allow: list[str] | None = None  # None: not restricted; [] allows nothing
    deny: list[str] = field(default_factory=list)


@dataclass(slots=True)
class ResponsePermission:
    max_msgs: int = 1
    expires_s: float = 0.0


@dataclass(slots=True)
class Permissions:
    publish: SubjectPermission | None = None
    subscribe: SubjectPermission | None = None
    allow_responses: ResponsePermission | None = None


@dataclass(slots=True)
class User:
    username: str = ""
    password: str = ""  # plain text, or a bcrypt hash when it matches ^\$2[abxy]\$\d{2}\$
    account: str = "$G"
    permissions: Permissions | None = None
    allowed_connection_types: list[str] | None = None
    nkey: str = ""  # an NKey user (public key "U..."): no username or password then


@dataclass(slots=True)
class AccountJetStreamLimits:
    enabled: bool = False
    max_memory: int = -1
    max_store: int = -1
    max_streams: int = -1
    max_consumers: int = -1
    max_ack_pending: int = -1
    max_bytes_required: bool = False
    memory_max_stream_bytes: int = -1  # `mem_max_stream_bytes`: the largest max_bytes of a memory stream
    storage_max_stream_bytes: int = -1  # `disk_max_stream_bytes`: the same for file streams
    cluster_traffic: str = ""  # parsed for compatibility; routes are not built yet
    # an account JWT's tiered_limits ("R1", "R3"... -> that replica count's limits); when any, they
    # replace the limits above (nats-server's jsLimits has no "" entry then)
    tiers: dict[str, AccountJetStreamLimits] = field(default_factory=dict)


@dataclass(slots=True)
class Account:
    name: str
    users: list[User] = field(default_factory=list)
    jetstream: AccountJetStreamLimits = field(default_factory=AccountJetStreamLimits)
    # exports and imports (config/imports.py; checked against each other at load, routed by server/imports.py)
    imports: list[Import] = field(default_factory=list)
    exports: list[Export] = field(default_factory=list)
    mappings: dict[str, object] = field(default_factory=dict)
    jwt: str = ""  # operator mode: the account's JWT (name = its public key), verified at load


@dataclass(slots=True)
class TrustOptions:
    """Operator mode (decentralized auth): `operator`, `resolver`, `resolver_preload`."""

    operator_jwts: list[str] = field(default_factory=list)  # verified operator JWTs
    trusted_keys: list[str] = field(default_factory=list)  # operators and their signing keys
    resolver: str = ""  # "MEMORY" or "FULL"; "" without operators
    preload: dict[str, str] = field(default_factory=dict)  # account public key -> account JWT
    resolver_dir: str = ""  # FULL: where account JWTs are kept (<public key>.jwt)
    allow_delete: bool = False  # FULL: `$SYS.REQ.CLAIMS.DELETE` is honoured
    hard_delete: bool = False  # FULL: deleted JWTs are removed (else renamed *.jwt.deleted)
    pinned: list[str] | None = None  # `resolver_pinned_accounts`: only these accounts' users (and the system's)

    @property
    def enabled(self) -> bool:
        return bool(self.operator_jwts)


@dataclass(slots=True)
class Authorization:
    """The top-level `authorization {}` block (users bind to $G) and the CLI's --user/--pass/--auth."""

    user: str = ""
    password: str = ""
    token: str = ""
    timeout_s: float = limits.AUTH_TIMEOUT_S
    timeout_given: bool = False  # without it and with TLS, nats-server waits tls timeout + 1 s
    users: list[User] = field(default_factory=list)
    default_permissions: Permissions | None = None


@dataclass(slots=True)
class JetStreamOptions:
    enabled: bool = False
    store_dir: str = ""  # as configured; the server appends "/jetstream" like nats-server
    max_memory: int = -1  # -1: derived at start (75% of RAM)
    max_storage: int = -1  # -1: derived at start (from the disk)
    domain: str = ""
    sync_interval_s: float = 120.0
    sync_always: bool = False  # `sync_interval: always`
    strict: bool = True
    unique_tag: str = ""


@dataclass(slots=True)
class ClusterOptions:
    name: str = ""
    host: str = ""
    port: int = 0  # 0: no cluster listener; -1: random
    routes: list[str] = field(default_factory=list)  # as configured: nats-route://[user:pass@]host:port
    advertise: str = ""
    no_advertise: bool = False
    user: str = ""
    password: str = ""
    auth_timeout_s: float = limits.AUTH_TIMEOUT_S
    pool_size: int = 3
    pinned_accounts: list[str] = field(default_factory=list)
    compression: str = "accept"
    connect_retries: int = 0
    ping_interval_s: float = 30.0
    ping_max: int = limits.PINGS_OUTSTANDING_MAX
    auth_timeout_given: bool = False  # `timeout` in cluster authorization (else TLS timeout + 1 s with tls)
    tls: TLSOptions | None = None  # `cluster { tls {} }`: routes are TLS first and always mutually verified

    @property
    def enabled(self) -> bool:
        return self.port != 0


@dataclass(slots=True)
class ApplianceOptions:
    """The one `appliance { ... }` block: settings nats-server does not have."""

    workers: int = 0  # 0: one per usable core
    cpu_pinning: bool = True
    numa_store_dirs: dict[int, str] = field(default_factory=dict)  # NUMA node -> store dir
    ring_bytes: int = 8 * 1024 * 1024
    peer_remove_timeout_s: float = limits.JS_PEER_REMOVE_TIMEOUT_S  # SERVER.REMOVE: re-added after this


def default_auth_timeout(options: ServerOptions) -> None:
    """nats-server's getDefaultAuthTimeout: with TLS and no `timeout` in `authorization {}`, a
    client has the TLS timeout plus one second to authenticate (the handshake comes first)."""
    auth = options.authorization
    if not auth.timeout_given:
        auth.timeout_s = options.tls.timeout_s + 1.0 if options.tls is not None else limits.AUTH_TIMEOUT_S


@dataclass(slots=True)
class ServerOptions:
    config_file: str = ""
    server_name: str = ""  # "" → the server id, as nats-server
    host: str = "0.0.0.0"
    port: int = 4222  # -1: random
    client_advertise: str = ""
    http_host: str = "0.0.0.0"
    http_port: int = 0  # 0: monitoring off; -1: random
    https_port: int = 0  # monitoring over TLS with the client port's `tls {}` (nats-server allows one of the two)
    max_payload: int = limits.PAYLOAD_BYTES_MAX
    max_pending: int = limits.PENDING_BYTES_MAX
    max_control_line: int = limits.CONTROL_LINE_BYTES_MAX
    max_connections: int = limits.CONNECTIONS_MAX
    max_closed_clients: int = limits.CLOSED_CONNECTIONS_MAX  # closed connections kept for /connz, per worker
    max_subscriptions: int = 0  # 0: unlimited
    allow_non_tls: bool = False  # with `tls {}`: plain-text clients too (INFO says tls_available)
    tls: TLSOptions | None = None  # the client port's `tls {}` (or --tls* flags); None: plain text
    websocket: WebsocketOptions = field(default_factory=WebsocketOptions)  # `websocket {}` (port 0: off)
    ping_interval_s: float = limits.PING_INTERVAL_S
    ping_max: int = limits.PINGS_OUTSTANDING_MAX
    write_deadline_s: float = limits.WRITE_DEADLINE_S
    lame_duck_duration_s: float = limits.LAME_DUCK_DURATION_S
    lame_duck_grace_period_s: float = limits.LAME_DUCK_GRACE_PERIOD_S
    debug: bool = False
    trace: bool = False
    trace_verbose: bool = False  # `trace_verbose`, -VV/-DVV: also trace the system account
    logtime: bool = True
    log_file: str = ""
    log_size_limit: int = 0  # `logfile_size_limit`: rotate log_file beyond this many bytes; 0: never
    log_max_num: int = 0  # `logfile_max_num`: rotated files kept, counting the live one; 0: all
    pid_file: str = ""
    ports_file_dir: str = ""  # `ports_file_dir`: write <executable>_<pid>.ports there (nats-server's JSON)
    server_tags: list[str] = field(default_factory=list)
    authorization: Authorization = field(default_factory=Authorization)
    accounts: dict[str, Account] = field(default_factory=dict)
    trust: TrustOptions = field(default_factory=TrustOptions)
    system_account: str = "$SYS"
    no_system_account: bool = False
    no_auth_user: str = ""
    jetstream: JetStreamOptions = field(default_factory=JetStreamOptions)
    cluster: ClusterOptions = field(default_factory=ClusterOptions)
    appliance: ApplianceOptions = field(default_factory=ApplianceOptions)
    # top-level keys the config defined only to be used as $variables (not options)
    variables: dict[str, object] = field(default_factory=dict)
    # top-level `mappings {}` of the global account, kept raw like Account.mappings
    mappings: dict[str, object] = field(default_factory=dict)
    # warnings of the config load ('file:line:col: text'); `nats-server -t` treats them as errors
    config_warnings: list[str] = field(default_factory=list)
    # 'file:line:col' of each top-level key of the config, so later checks can point at it
    config_anchors: dict[str, str] = field(default_factory=dict)

    def logging_settings(self) -> LoggingSettings:
        """The keyword arguments of appliance.log.setup_logging for these options."""
        return {"debug": self.debug, "trace": self.trace, "logtime": self.logtime, "log_file": self.log_file,
                "log_size_limit": self.log_size_limit, "log_max_num": self.log_max_num}
