"""The read-only view of a running server that the monitoring endpoints render.

This is the whole contract between the monitoring HTTP package and the rest of the server: the core
server (and later the cluster and JetStream layers) implement `ServerView`; the endpoints only read
it. Every value is a snapshot: the endpoints never hold a reference into live server state, so the
server may keep its own structures as it likes.

Units: wall times are float seconds since the Unix epoch (`appliance.clock.Clock.wall()`); durations
are float seconds; sizes are bytes. The endpoints convert to nats-server's JSON forms.

`appliance.testing.fake_view.FakeServerView` is a complete in-memory implementation for tests.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from appliance.config.imports import Export, Import

from appliance.config.options import ServerOptions

ConnState = Literal["open", "closed", "any"]
ConnKind = Literal["Client", "Router", "Gateway", "Leafnode", "JetStream", "Account", "System"]


@dataclass(frozen=True, slots=True)
class SubscriptionInfo:
    """One subscription as /connz?subs=detail and /subsz?subs=1 show it."""

    subject: str
    sid: str
    cid: int  # the connection that owns it (internal clients have their own cids)
    account: str
    queue: str = ""
    msgs: int = 0  # messages delivered to this subscription
    max_msgs: int = 0  # auto-unsubscribe limit; 0: none


@dataclass(frozen=True, slots=True)
class ConnectionInfo:
    """One client connection, open or recently closed."""

    cid: int
    ip: str
    port: int
    start_wall_s: float
    last_activity_wall_s: float
    account: str
    kind: ConnKind = "Client"
    type: str = "nats"  # "nats", "mqtt", "websocket"
    rtt_s: float = 0.0  # 0: not measured yet
    pending_bytes: int = 0
    in_msgs: int = 0
    out_msgs: int = 0
    in_bytes: int = 0
    out_bytes: int = 0
    stalls: int = 0
    subscriptions: tuple[SubscriptionInfo, ...] = ()
    name: str = ""
    lang: str = ""
    version: str = ""
    authorized_user: str = ""  # the user this connection authenticated as; "" for none
    jwt: str = ""  # operator mode: the user JWT (not shown for a bearer token, as nats-server)
    issuer_key: str = ""  # operator mode: the user JWT's issuer (the account or its signing key)
    name_tag: str = ""  # the account's name in its JWT; "": the account name
    tls_version: str = ""  # e.g. "1.3"; "" when not TLS
    tls_cipher_suite: str = ""
    tls_first: bool = False  # the handshake came before the INFO (handshake_first)
    stop_wall_s: float | None = None  # set once closed
    reason: str = (
        ""  # close reason as nats-server spells it ("Client Closed", "Slow Consumer (Pending Bytes)")
    )


@dataclass(frozen=True, slots=True)
class SublistStats:
    """Raw counters of one account's sublist; /subsz derives rates when it sums accounts."""

    num_subscriptions: int = 0
    num_cache: int = 0
    num_inserts: int = 0
    num_removes: int = 0
    num_matches: int = 0
    cache_hits: int = 0
    max_fanout: int = 0  # largest result among cached entries
    total_fanout: int = 0  # sum of result sizes over cached entries
    cached_results: int = 0  # number of cached entries looked at for the fanout numbers


@dataclass(frozen=True, slots=True)
class AccountInfo:
    """An account as /accountz shows it; counts cover every worker of the host."""

    name: str
    is_system: bool = False
    jetstream_enabled: bool = False
    client_connections: int = 0
    jwt: str = ""  # operator mode: the account's JWT
    exports: tuple[Export, ...] = ()  # its exports, as configured
    imports: tuple[Import, ...] = ()  # its imports that stand (config/imports.py resolve)


@dataclass(frozen=True, slots=True)
class ByKindCounts:
    """nats-server's per-connection-kind counters (`slow_consumer_stats`, `stale_connection_stats`)."""

    clients: int = 0
    routes: int = 0
    gateways: int = 0
    leafs: int = 0


@dataclass(frozen=True, slots=True)
class ServerCounters:
    """The live counters /varz shows; totals are since start, "in"/"out" from the server's side."""

    connections: int = 0  # open client connections
    total_connections: int = 0  # client connections ever accepted
    routes: int = 0
    remotes: int = 0  # configured or discovered route peers
    leafnodes: int = 0
    in_msgs: int = 0  # all kinds: clients, routes, gateways, leafnodes
    in_bytes: int = 0
    out_msgs: int = 0
    out_bytes: int = 0
    in_client_msgs: int = 0
    in_client_bytes: int = 0
    out_client_msgs: int = 0
    out_client_bytes: int = 0
    slow_consumers: int = 0
    stale_connections: int = 0
    stalled_clients: int = 0
    subscriptions: int = 0  # across every account
    slow_consumer_stats: ByKindCounts = ByKindCounts()
    stale_connection_stats: ByKindCounts = ByKindCounts()


@dataclass(frozen=True, slots=True)
class RouteInfo:
    """One route to another server of the cluster, as /routez shows it."""

    rid: int
    remote_id: str
    remote_name: str
    did_solicit: bool
    is_configured: bool
    ip: str
    port: int
    start_wall_s: float
    last_activity_wall_s: float
    rtt_s: float | None
    pending_size: int
    in_msgs: int
    out_msgs: int
    in_bytes: int
    out_bytes: int
    subscriptions: tuple[str, ...]  # the peer's interest here: "subject" or "subject queue"


@dataclass(frozen=True, slots=True)
class ProcessUsage:
    """Resources of the whole server (every worker process of this host counted)."""

    rss_bytes: int
    cpu_percent: float
    cores: int  # CPUs the server may use
    max_procs: int  # processes serving clients (nats-server: GOMAXPROCS)


@dataclass(frozen=True, slots=True)
class PeerInfo:
    """A RAFT peer of a group as JetStream cluster info shows it."""

    name: str
    current: bool
    active_s: float  # since last heard from
    peer: str  # peer id (hash of the server name)
    offline: bool = False
    lag: int = 0


@dataclass(frozen=True, slots=True)
class MetaSnapshotStats:
    pending_entries: int = 0
    pending_bytes: int = 0
    last_wall_s: float | None = None  # when the last meta snapshot was taken; None: never
    last_duration_s: float = 0.0


@dataclass(frozen=True, slots=True)
class RaftGroupStat:
    """One RAFT group this server holds a replica of, for /metrics."""

    kind: str  # meta, stream or consumer
    group: str  # the group id
    state: str  # leader, follower or candidate
    leader_changes: int  # new leaders this replica learned of since the group started here
    replica_lag: Mapping[str, int] = field(default_factory=dict)  # follower peer -> entries behind (leader only)


@dataclass(frozen=True, slots=True)
class RaftzPeer:
    """Another voter of a RAFT group as /raftz `peers` shows it."""

    peer: str  # peer id
    name: str  # server name ("" when unknown)
    known: bool = True  # a settled member (False while its membership change is in flight)
    last_replicated_index: int = 0  # 0: not tracked here (a follower tracks no replication)
    last_seen_s: float | None = None  # since last heard from; None: never (or not tracked here)


@dataclass(frozen=True, slots=True)
class RaftzWal:
    """The group's RAFT log as /raftz `wal` shows it (nats-server's StreamState of its WAL)."""

    messages: int = 0
    bytes: int = 0
    first_seq: int = 0
    first_wall_s: float | None = None  # None: unknown (shown as Go's zero time)
    last_seq: int = 0
    last_wall_s: float | None = None


@dataclass(frozen=True, slots=True)
class RaftzGroup:
    """One RAFT group this server holds a replica of, as /raftz shows it; `account` is the account
    nats-server files it under (the system account for the meta group, the asset's otherwise)."""

    account: str
    name: str  # as shown: "_meta_", "S-...", "C-..."
    kind: str  # meta, stream or consumer
    id: str  # this replica's peer id
    state: str  # LEADER, FOLLOWER, CANDIDATE
    size: int
    quorum_needed: int
    committed: int
    applied: int
    term: int
    pterm: int  # term of the last log entry
    pindex: int  # index of the last log entry
    leader: str = ""  # peer id
    leader_since_wall_s: float | None = None
    ever_had_leader: bool = False
    voted_for: str = ""
    catching_up: bool = False
    traffic_account: str = "$SYS"
    wal: RaftzWal = RaftzWal()
    peers: tuple[RaftzPeer, ...] = ()


@dataclass(frozen=True, slots=True)
class MetaClusterInfo:
    """The JetStream meta group as /varz `jetstream.meta` and /jsz `meta_cluster` show it."""

    name: str
    cluster_size: int
    quorum_needed: int
    leader: str = ""  # server name; "" when no leader is known
    leader_peer: str = ""  # the leader's peer id
    replicas: tuple[PeerInfo, ...] = ()
    pending_requests: int = 0
    pending_infos: int = 0
    snapshot: MetaSnapshotStats = MetaSnapshotStats()


@dataclass(frozen=True, slots=True)
class JetStreamStats:
    memory: int = 0
    storage: int = 0
    reserved_memory: int = 0
    reserved_storage: int = 0
    accounts: int = 0
    ha_assets: int = 0
    api_level: int = 0
    api_total: int = 0
    api_errors: int = 0
    api_inflight: int = 0


# damaged: opened, but the store holds damaged data it does not serve until repaired (appliance)
AssetState = Literal["ok", "not_current", "not_recovered", "write_error", "damaged", "under_replicated"]


@dataclass(frozen=True, slots=True)
class ConsumerHealth:
    name: str
    state: AssetState = "ok"
    detail: str = ""  # the underlying error text for a state other than "ok"


@dataclass(frozen=True, slots=True)
class StreamHealth:
    """A stream this server holds (a replica of, when clustered) and its consumers held here."""

    account: str
    name: str
    state: AssetState = "ok"
    detail: str = ""
    consumers: tuple[ConsumerHealth, ...] = ()


MetaState = Literal[
    "ok", "no_leader", "recovering", "not_current", "not_running", "write_error", "apply_error"
]


@dataclass(frozen=True, slots=True)
class JetStreamView:
    """JetStream as monitoring sees it; `ServerView.jetstream()` is None when JetStream is not configured."""

    enabled: bool  # configured and running (False: configured but failed or disabled)
    clustered: bool
    max_memory: int
    max_storage: int
    store_dir: str  # as used: ends in /jetstream like nats-server
    sync_interval_s: float
    sync_always: bool = False
    domain: str = ""
    compress_ok: bool = False  # stream compression (s2) offered; nats-server shows it only when true
    unique_tag: str = ""
    strict: bool = True
    stats: JetStreamStats = JetStreamStats()
    limits: Mapping[str, int] = field(default_factory=dict)  # JSLimitOpts, JSON names
    meta: MetaClusterInfo | None = None  # None when not clustered
    meta_state: MetaState = "ok"
    meta_detail: str = ""  # error text for write_error / apply_error
    accounts: tuple[str, ...] = ()  # accounts that have JetStream assets (assigned anywhere, when clustered)
    streams: tuple[StreamHealth, ...] = ()  # assets held by this server
    damage: tuple[str, ...] = ()  # JetStream-wide damage recovered from (a meta log damaged mid-file)
    # streams of the cluster with fewer peers than replicas (a peer-remove without a spare server):
    # (account, stream, peers, replicas wanted)
    under_replicated: tuple[tuple[str, str, int, int], ...] = ()


class ServerView(Protocol):
    """What the monitoring endpoints read from a running server. All reads; no method blocks."""

    @property
    def options(self) -> ServerOptions: ...

    @property
    def server_id(self) -> str: ...

    @property
    def server_name(self) -> str: ...

    @property
    def version(self) -> str: ...

    @property
    def git_commit(self) -> str: ...

    @property
    def client_host(self) -> str: ...  # as INFO `host`: the bound address

    @property
    def client_port(self) -> int: ...  # the bound port (resolved when configured as -1)

    @property
    def http_host(self) -> str: ...

    @property
    def http_port(self) -> int: ...

    @property
    def start_wall_s(self) -> float: ...

    @property
    def config_load_wall_s(self) -> float: ...

    @property
    def config_digest(self) -> str: ...  # "sha256:<hex>" of the loaded config; "" without a config file

    @property
    def auth_required(self) -> bool: ...

    @property
    def system_account(self) -> str: ...  # "" when there is none

    @property
    def cluster_name(self) -> str: ...  # "" when not clustered

    @property
    def connect_urls(self) -> Sequence[str]: ...  # INFO `connect_urls`

    @property
    def feature_flags(self) -> Mapping[str, bool]: ...

    def now_wall_s(self) -> float: ...

    def ready_error(self) -> str | None:
        """None once the server serves clients; else why not, as nats-server words it.

        nats-server's text names the listeners not yet up: "failed to be ready for connections after
        1ms: server" ("server" is the client listener; "route" the cluster listener).
        """
        ...

    def counters(self) -> ServerCounters: ...

    def process_usage(self) -> ProcessUsage: ...

    def connections(self, state: ConnState) -> list[ConnectionInfo]:
        """Client connections (open, recently closed, or both), any order."""
        ...

    def connection_count(self, state: ConnState) -> int:
        """How many connections `connections(state)` stands for (every worker's, also those it did
        not list because the page could not show them)."""
        ...

    def has_account(self, name: str) -> bool: ...

    def sublist_stats(self, account: str | None) -> list[SublistStats]:
        """One entry per account (only `account` when given)."""
        ...

    def subscriptions(self, account: str | None) -> list[SubscriptionInfo]:
        """Local subscriptions (clients and internal clients; not routes), every account or one."""
        ...

    def jetstream(self) -> JetStreamView | None: ...

    def accounts(self) -> list[AccountInfo]:
        """Every account this server knows (any order)."""
        ...

    def routes(self) -> list[RouteInfo]:
        """Route connections to other servers of the cluster (none while standalone)."""
        ...

    def internal_queues(self) -> Mapping[str, int]:
        """Items waiting in each of the server's internal queues (/ipqueuesz), by queue name."""
        ...
