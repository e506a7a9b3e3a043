"""The core server seen through the monitoring contract (`appliance/server/monitor/view.py`)."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import os
import socket
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import psutil

from appliance import NATS_VERSION
from appliance.config.options import ServerOptions
from appliance.server.conn_info import connection_info, subscription_info
from appliance.config.tls_context import https_context
from appliance.server.links import LocalFabric
from appliance.server.monitor import connz
from appliance.server.monitor.app import MonitorApp
from appliance.durations import wall_ns
from appliance.server.monitor.endpoint import (
    PART_CLOSED,
    PART_COUNTERS,
    PART_OPEN,
    PART_PROCESS,
    PART_QUEUES,
    PART_SUBLISTS,
    PART_TOP,
    PARTS,
)
from appliance.server.monitor.gather import GatherCoalescer
from appliance.server.monitor.http import MonitorServer
from appliance.server.system_service import SystemResponder
from appliance.server.claims_service import ClaimsService
from appliance.server.jwt_accounts import JWTAccounts
from appliance.server.monitor.system import server_info_json
from appliance.server.monitor.view import (
    AccountInfo,
    ByKindCounts,
    ConnectionInfo,
    ConnState,
    JetStreamView,
    ProcessUsage,
    RaftGroupStat,
    RaftzGroup,
    RouteInfo,
    ServerCounters,
    SublistStats,
    SubscriptionInfo,
)
from appliance.server.server import Server


def _config_digest(options: ServerOptions) -> str:
    if not options.config_file:
        return ""
    try:
        return "sha256:" + hashlib.sha256(Path(options.config_file).read_bytes()).hexdigest()
    except OSError:
        return ""


def _connection_from_dict(raw: dict[str, Any]) -> ConnectionInfo:
    fields = dict(raw)
    fields["subscriptions"] = tuple(SubscriptionInfo(**sub) for sub in raw.get("subscriptions", ()))
    return ConnectionInfo(**fields)


def _add_counters(a: ServerCounters, b: ServerCounters) -> ServerCounters:
    summed: dict[str, object] = {}
    for name in ServerCounters.__dataclass_fields__:
        x, y = getattr(a, name), getattr(b, name)
        if isinstance(x, ByKindCounts):
            summed[name] = ByKindCounts(**{k: getattr(x, k) + getattr(y, k) for k in ByKindCounts.__dataclass_fields__})
        else:
            summed[name] = x + y
    return ServerCounters(**summed)  # type: ignore[arg-type]


_CONNECTION_FIELDS = tuple(ConnectionInfo.__dataclass_fields__)
_SUBSCRIPTION_FIELDS = tuple(SubscriptionInfo.__dataclass_fields__)
INTERNAL_CID_SHOWN = 0  # the cid /subsz shows for an internal client's subscription


def _connection_dict(info: ConnectionInfo) -> dict[str, object]:
    """`dataclasses.asdict` of a ConnectionInfo without its deep copies (thousands per snapshot)."""
    out = {name: getattr(info, name) for name in _CONNECTION_FIELDS}
    out["subscriptions"] = [{name: getattr(sub, name) for name in _SUBSCRIPTION_FIELDS}
                            for sub in info.subscriptions]
    return out


class WorkerSnapshot:
    """What one worker reports to worker 0 for /varz, /connz and /subsz (JSON over a link): only the
    parts the request names (monitor/endpoint.py PARTS), so a /varz never costs a list of connections."""

    @staticmethod
    def build(view: ServerMonitorView, frame_bytes_max: int, parts: frozenset[str] = PARTS) -> dict[str, object]:
        snapshot: dict[str, object] = {}
        if PART_COUNTERS in parts:
            snapshot["counters"] = dataclasses.asdict(view.local_counters())
        page = next((part for part in parts if part.startswith(PART_TOP)), None)
        now_ns = wall_ns(view.now_wall_s())
        for state, part in (("open", PART_OPEN), ("closed", PART_CLOSED)):
            if part in parts:
                conns = view.local_connections(state)  # type: ignore[arg-type]
                snapshot[f"{state}_total"] = len(conns)
                if page is not None:
                    conns = connz.top(conns, page, now_ns)
                snapshot[state] = [_connection_dict(c) for c in conns]
        if PART_OPEN in parts:  # /subsz lists them with the connections' subscriptions
            snapshot["internal"] = [{name: getattr(sub, name) for name in _SUBSCRIPTION_FIELDS}
                                    for sub in view.local_internal_subscriptions(None)]
        if PART_SUBLISTS in parts:
            snapshot["sublists"] = [{"account": name, "stats": dataclasses.asdict(stats),
                                     "clients": view.local_account_clients(name)}
                                    for name, stats in view.account_sublist_stats(None)]
        if PART_QUEUES in parts:
            snapshot["queues"] = view.local_queues()
        if PART_PROCESS in parts:
            snapshot["process"] = dataclasses.asdict(view.local_process_usage())
        # a snapshot must fit one frame: drop closed connections first, then the newest open ones
        while len(json.dumps(snapshot)) > frame_bytes_max * 9 // 10:
            for key in ("closed", "open", "internal"):
                items = snapshot.get(key, [])
                assert isinstance(items, list)
                if items:
                    del items[len(items) // 2:]
                    snapshot["truncated"] = True
                    break
            else:
                break
        return snapshot


class ServerMonitorView:
    """The core server through the monitoring contract; with sibling workers, the whole host.

    `refresh()` (awaited by the HTTP server before each request) gathers the siblings'
    snapshots, so the synchronous reads below cover every worker of the host.
    """

    def __init__(self, server: Server, http_listener: socket.socket | None,
                 fabric: LocalFabric | None = None, *, cores: int | None = None) -> None:
        self._server = server
        self._cores = cores  # the server's CPUs when this process is pinned to fewer (a worker)
        self._fabric = fabric
        self._peers: list[dict[str, Any]] = []
        self._gather = GatherCoalescer(fabric.gather_snapshots) if fabric is not None else None
        if fabric is not None:
            fabric.snapshot_provider = lambda frame_bytes_max, parts: WorkerSnapshot.build(self, frame_bytes_max,
                                                                                           parts)
        self._http = http_listener.getsockname()[:2] if http_listener is not None else ("", 0)
        self._digest = _config_digest(server.options)
        self._config_load_wall_s = server.start_wall_s
        self._process = psutil.Process(os.getpid())
        self._process.cpu_percent()

    @property
    def options(self) -> ServerOptions:
        return self._server.options

    @property
    def server_id(self) -> str:
        return self._server.server_id

    @property
    def server_name(self) -> str:
        return self._server.server_name

    @property
    def version(self) -> str:
        return NATS_VERSION

    @property
    def git_commit(self) -> str:
        return ""

    @property
    def client_host(self) -> str:
        return self._server.listen_address[0]

    @property
    def client_port(self) -> int:
        return self._server.listen_address[1]

    @property
    def http_host(self) -> str:
        return str(self._http[0])

    @property
    def http_port(self) -> int:
        return int(self._http[1])

    @property
    def start_wall_s(self) -> float:
        return self._server.start_wall_s

    @property
    def config_load_wall_s(self) -> float:
        return self._config_load_wall_s

    @property
    def config_digest(self) -> str:
        return self._digest

    @property
    def auth_required(self) -> bool:
        return self._server.auth.required

    @property
    def system_account(self) -> str:
        return self._server.accounts.system_name

    @property
    def cluster_name(self) -> str:
        return self._server.options.cluster.name

    @property
    def connect_urls(self) -> Sequence[str]:
        return [] if self._server.options.cluster.no_advertise else list(self._server.cluster_urls)

    def routes(self) -> list[RouteInfo]:
        routes = self._server.routes
        return [] if routes is None else [RouteInfo(**row) for row in routes.route_infos()]  # type: ignore[arg-type]

    @property
    def feature_flags(self) -> Mapping[str, bool]:
        return {}

    def now_wall_s(self) -> float:
        return self._server.clock.wall()

    def ready_error(self) -> str | None:
        return None if self._server.ready else "Server is not ready to accept connections"

    async def refresh(self, parts: frozenset[str] = PARTS) -> list[dict[str, Any]]:
        """Gather the `parts` of every sibling's snapshot that the next answer reads (see GatherCoalescer);
        returns what was gathered (the same list for every request that shared the gather)."""
        self._peers = await self._gather.gather(parts) if self._gather is not None and parts else []
        return self._peers

    def answer_from(self, gathered: list[dict[str, Any]]) -> None:
        """Read the siblings from `gathered` (what this request's refresh returned): concurrent
        requests each refresh, and one that waits for its turn to render must not answer from a
        later request's gather of other parts (a /varz read a closed-connections gather, without
        the sibling's counters, and reported one worker's total)."""
        self._peers = gathered

    def counters(self) -> ServerCounters:
        total = self.local_counters()
        for peer in self._peers:
            if "counters" not in peer:
                continue
            raw = dict(peer["counters"])
            for name in ("slow_consumer_stats", "stale_connection_stats"):
                raw[name] = ByKindCounts(**raw[name])
            total = _add_counters(total, ServerCounters(**raw))
        return total

    def local_counters(self) -> ServerCounters:
        server = self._server
        in_msgs, in_bytes, out_msgs, out_bytes = server.totals()
        return ServerCounters(
            connections=len(server.clients),
            total_connections=server.total_connections,
            routes=0 if server.routes is None else len(server.routes.route_infos()),
            remotes=0 if server.routes is None else len(server.routes.route_infos()),
            in_msgs=in_msgs,
            in_bytes=in_bytes,
            out_msgs=out_msgs,
            out_bytes=out_bytes,
            in_client_msgs=in_msgs,
            in_client_bytes=in_bytes,
            out_client_msgs=out_msgs,
            out_client_bytes=out_bytes,
            slow_consumers=server.slow_consumers,
            stale_connections=server.stale_connections,
            subscriptions=sum(s.num_subscriptions for _, s in self.account_sublist_stats(None)),
            slow_consumer_stats=ByKindCounts(clients=server.slow_consumers),
            stale_connection_stats=ByKindCounts(clients=server.stale_connections),
        )

    def process_usage(self) -> ProcessUsage:
        local = self.local_process_usage()
        peers = [p["process"] for p in self._peers if "process" in p]
        rss = local.rss_bytes + sum(int(p["rss_bytes"]) for p in peers)
        cpu = local.cpu_percent + sum(float(p["cpu_percent"]) for p in peers)
        return ProcessUsage(rss_bytes=rss, cpu_percent=cpu, cores=local.cores, max_procs=1 + len(peers))

    def local_process_usage(self) -> ProcessUsage:
        with self._process.oneshot():
            rss = self._process.memory_info().rss
            cpu = self._process.cpu_percent()
        cores = self._cores or len(os.sched_getaffinity(0))
        return ProcessUsage(rss_bytes=rss, cpu_percent=cpu, cores=cores, max_procs=1)

    def connections(self, state: ConnState) -> list[ConnectionInfo]:
        found = self.local_connections(state)
        for peer in self._peers:
            if state in ("open", "any"):
                found.extend(_connection_from_dict(c) for c in peer.get("open", ()))
            if state in ("closed", "any"):
                found.extend(_connection_from_dict(c) for c in peer.get("closed", ()))
        return found

    def local_connections(self, state: ConnState) -> list[ConnectionInfo]:
        found: list[ConnectionInfo] = []
        if state in ("open", "any"):
            found.extend(connection_info(c) for c in self._server.clients.values())
        if state in ("closed", "any"):
            found.extend(self._server.closed_clients)  # recorded when each closed (conn_info.py)
        return found

    def connection_count(self, state: ConnState) -> int:
        count = (len(self._server.clients) if state in ("open", "any") else 0) + \
            (len(self._server.closed_clients) if state in ("closed", "any") else 0)
        for peer in self._peers:
            for listed in ("open", "closed"):
                if state in (listed, "any"):
                    count += int(peer.get(f"{listed}_total", len(peer.get(listed, ()))))
        return count

    def has_account(self, name: str) -> bool:
        return self._server.accounts.get(name) is not None

    def sublist_stats(self, account: str | None) -> list[SublistStats]:
        stats = [s for _, s in self.account_sublist_stats(account)]
        for peer in self._peers:
            stats.extend(SublistStats(**raw["stats"]) for raw in peer.get("sublists", ())
                         if account is None or raw["account"] == account)
        return stats

    def account_sublist_stats(self, account: str | None) -> list[tuple[str, SublistStats]]:
        accounts = self._server.accounts.all()
        if account is not None:
            accounts = [a for a in accounts if a.name == account]
        stats = []
        for acc in accounts:
            sublist = acc.sublist
            fanouts = [len(r[0]) + len(r[1]) for r in sublist.cache.values()]
            remote = self._fabric.remote_interest_count(acc.name) if self._fabric is not None else 0
            if self._fabric is not None and self._fabric.index != 0:  # each worker holds the service
                remote += self._server.imports.import_subscriptions(acc.name)  # imports; counted once
            stats.append((acc.name, SublistStats(
                num_subscriptions=sublist.count - remote,
                num_cache=len(sublist.cache),
                num_inserts=sublist.inserts,
                num_removes=sublist.removes,
                num_matches=sublist.matches,
                cache_hits=sublist.cache_hits,
                max_fanout=max(fanouts, default=0),
                total_fanout=sum(fanouts),
                cached_results=len(fanouts),
            )))
        return stats

    def subscriptions(self, account: str | None) -> list[SubscriptionInfo]:
        found = self.local_subscriptions(account)
        for peer in self._peers:
            for raw in peer.get("open", ()):
                found.extend(SubscriptionInfo(**sub) for sub in raw["subscriptions"]
                             if account is None or sub["account"] == account)
            found.extend(SubscriptionInfo(**sub) for sub in peer.get("internal", ())
                         if account is None or sub["account"] == account)
        return found

    def local_subscriptions(self, account: str | None) -> list[SubscriptionInfo]:
        found = []
        for conn in self._server.clients.values():
            if account is not None and conn.account.name != account:
                continue
            found.extend(subscription_info(s, conn.cid) for s in conn.subs.values())
        return found + self.local_internal_subscriptions(account)

    def local_internal_subscriptions(self, account: str | None) -> list[SubscriptionInfo]:
        """The internal clients' subscriptions (JetStream API, system services), which the sublist
        counts: nats-server lists its own too. Shown with cid 0: an internal client has no id in
        the client-id space (nats-server's have ids no connection uses, 1, 2, ...)."""
        return [subscription_info(s, INTERNAL_CID_SHOWN) for client in self._server.internal_clients.values()
                for s in client.subscriptions() if account is None or s.account == account]

    def accounts(self) -> list[AccountInfo]:
        clients: dict[str, int] = {}
        for peer in self._peers:
            for raw in peer.get("sublists", ()):
                clients[raw["account"]] = clients.get(raw["account"], 0) + int(raw.get("clients", 0))
        configured = self._server.options.accounts
        return [AccountInfo(name=account.name, is_system=account.is_system, jetstream_enabled=account.jetstream,
                            client_connections=account.clients + clients.get(account.name, 0),
                            jwt=configured[account.name].jwt if account.name in configured else "",
                            exports=self._server.imports.exports_of(account.name),
                            imports=self._server.imports.imports_of(account.name))
                for account in self._server.accounts.all()]

    def local_account_clients(self, name: str) -> int:
        account = self._server.accounts.get(name)
        return account.clients if account is not None else 0

    def internal_queues(self) -> dict[str, int]:
        queues = self.local_queues()
        for peer in self._peers:
            queues.update(peer.get("queues", {}))
        return queues

    def local_queues(self) -> dict[str, int]:
        """This worker's queues, named with the worker: link backlogs, interest sync, monitoring."""
        if self._fabric is None:
            return {}  # one worker: no queue between workers
        prefix = f"worker {self._fabric.index}: "
        local = self._fabric.queue_lengths()
        return {prefix + name: length for name, length in local.items()}

    def jetstream(self) -> JetStreamView | None:
        # JetStream (a higher layer) registers its monitor on the server when it starts
        monitor = getattr(self._server, "jetstream_monitor", None)
        return monitor.view() if monitor is not None else None

    def jetstream_details(self, *, account: str, streams: bool, consumers: bool, config: bool,
                          raft: bool = False) -> tuple[dict[str, int], list[dict[str, object]]]:
        """/jsz totals and `account_details` (empty without JetStream)."""
        monitor = getattr(self._server, "jetstream_monitor", None)
        if monitor is None:
            return {"streams": 0, "consumers": 0, "messages": 0, "bytes": 0}, []
        details = monitor.details(account=account, streams=streams, consumers=consumers, config=config, raft=raft)
        return monitor.totals(), details


    def worker_rows(self) -> list[dict[str, object]]:
        """The supervisor's status table, one dict per worker (state, restarts, ring_fill, ...), when the
        worker's composition root provided it (appliance/worker/main.py); else none."""
        provider = getattr(self._server, "worker_rows", None)
        return list(provider()) if provider is not None else []

    def fsync_latency(self) -> object | None:
        """JetStream's fsync latency histogram (appliance/jetstream/fsync.py HistogramSnapshot), if running."""
        return self._jetstream_histogram("fsync_latency")

    def commit_batches(self) -> object | None:
        """Messages per group-commit fsync (HistogramSnapshot), if JetStream runs."""
        return self._jetstream_histogram("commit_batches")

    def raft_groups(self) -> list[RaftGroupStat]:
        """The RAFT groups of this worker (JetStream's, on worker 0), for /metrics; none without JetStream."""
        monitor = getattr(self._server, "jetstream_monitor", None)
        return list(monitor.raft_groups()) if monitor is not None else []

    def raftz_groups(self) -> list[RaftzGroup]:
        """/raftz: the RAFT groups of clustered JetStream on this worker (worker 0, which also serves
        monitoring); none without JetStream or when standalone."""
        monitor = getattr(self._server, "jetstream_monitor", None)
        return list(monitor.raftz_groups()) if monitor is not None else []

    def _jetstream_histogram(self, name: str) -> object | None:
        monitor = getattr(self._server, "jetstream_monitor", None)
        snapshot = getattr(monitor, name, None) if monitor is not None else None
        return snapshot() if snapshot is not None else None


def provide_snapshots(server: Server, fabric: LocalFabric) -> None:
    """Let sibling workers' monitoring include this worker (every worker of a mesh does this)."""
    ServerMonitorView(server, None, fabric)


def start_system_responder(server: Server, fabric: LocalFabric | None = None) -> SystemResponder | None:
    """Answer the system account's monitoring requests (`server ls`) for the whole host."""
    view = ServerMonitorView(server, None, fabric)
    responder = SystemResponder(server, MonitorApp(view), view.refresh)
    return responder if responder.start() else None


def start_claims_service(server: Server, accounts: JWTAccounts, fabric: LocalFabric | None = None) -> ClaimsService | None:
    """The FULL account resolver's `$SYS.REQ.CLAIMS...` requests (one worker answers them)."""
    view = ServerMonitorView(server, None, fabric)
    seq = itertools.count(1)
    service = ClaimsService(accounts, lambda: dict(server_info_json(view, seq=next(seq))))
    return service if service.start() else None


async def start_monitoring(server: Server, listener: socket.socket, fabric: LocalFabric | None = None,
                           *, cores: int | None = None) -> MonitorServer:
    options = server.options
    context = https_context(options.tls) if options.https_port != 0 and options.tls is not None else None
    monitor = MonitorServer(MonitorApp(ServerMonitorView(server, listener, fabric, cores=cores)), listener, context)
    await monitor.start()
    return monitor
