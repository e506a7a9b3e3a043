"""The core server seen through the monitoring contract (`appliance/server/monitor/view.py`)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import socket
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import psutil

from appliance import NATS_VERSION
from appliance.config.options import ServerOptions
from appliance.config.tls_context import https_context
from appliance.server.client import ClientConnection
from appliance.server.links import LocalFabric
from appliance.server.monitor.app import MonitorApp
from appliance.server.monitor.http import MonitorServer
from appliance.server.monitor.view import (
    ByKindCounts,
    ConnectionInfo,
    ConnState,
    JetStreamView,
    ProcessUsage,
    ServerCounters,
    SublistStats,
    SubscriptionInfo,
)
from appliance.server.server import Server
from appliance.server.sublist import Subscription


def _subscription_info(sub: Subscription, cid: int) -> SubscriptionInfo:
    return SubscriptionInfo(
        subject=sub.subject.decode(errors="replace"),
        sid=sub.sid.decode(errors="replace"),
        cid=cid,
        account=sub.account,
        queue=sub.queue.decode(errors="replace") if sub.queue else "",
        msgs=sub.delivered,
        max_msgs=sub.max_msgs,
    )


def _connection_info(conn: ClientConnection) -> ConnectionInfo:
    return ConnectionInfo(
        cid=conn.cid,
        ip=conn.ip,
        port=conn.port,
        start_wall_s=conn.start_wall_s,
        last_activity_wall_s=conn.last_activity_wall_s,
        account=conn.account.name,
        rtt_s=conn.rtt_s,
        pending_bytes=conn.pending_bytes(),
        in_msgs=conn.in_msgs,
        out_msgs=conn.out_msgs,
        in_bytes=conn.in_bytes,
        out_bytes=conn.out_bytes,
        subscriptions=tuple(_subscription_info(s, conn.cid) for s in conn.subs.values()),
        name=conn.name,
        lang=conn.lang,
        version=conn.version,
        authorized_user=conn.user,
        tls_version=conn.tls_version,
        tls_cipher_suite=conn.tls_cipher_suite,
        tls_first=conn.tls_first,
        stop_wall_s=conn.stop_wall_s if conn.closed else None,
        reason=conn.close_reason if conn.closed else "",
    )


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


class WorkerSnapshot:
    """What one worker reports to worker 0 for /varz, /connz and /subsz (JSON over a link)."""

    @staticmethod
    def build(view: ServerMonitorView, frame_bytes_max: int) -> dict[str, object]:
        snapshot: dict[str, object] = {
            "counters": dataclasses.asdict(view.local_counters()),
            "open": [dataclasses.asdict(c) for c in view.local_connections("open")],
            "closed": [dataclasses.asdict(c) for c in view.local_connections("closed")],
            "sublists": [{"account": name, "stats": dataclasses.asdict(stats)}
                         for name, stats in view.account_sublist_stats(None)],
            "process": dataclasses.asdict(view.local_process_usage()),
        }
        # a snapshot must fit one frame: drop closed connections first, then the newest open ones
        while len(json.dumps(snapshot)) > frame_bytes_max * 9 // 10:
            for key in ("closed", "open"):
                items = snapshot[key]
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
        if fabric is not None:
            fabric.snapshot_provider = lambda frame_bytes_max: WorkerSnapshot.build(self, frame_bytes_max)
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
        return []

    @property
    def feature_flags(self) -> Mapping[str, bool]:
        return {}

    def now_wall_s(self) -> float:
        return self._server.clock.wall()

    def ready_error(self) -> str | None:
        return None if self._server.ready else "Server is not ready to accept connections"

    async def refresh(self) -> None:
        self._peers = await self._fabric.gather_snapshots() if self._fabric is not None else []

    def counters(self) -> ServerCounters:
        total = self.local_counters()
        for peer in self._peers:
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
        rss = local.rss_bytes + sum(int(p["process"]["rss_bytes"]) for p in self._peers)
        cpu = local.cpu_percent + sum(float(p["process"]["cpu_percent"]) for p in self._peers)
        return ProcessUsage(rss_bytes=rss, cpu_percent=cpu, cores=local.cores, max_procs=1 + len(self._peers))

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
                found.extend(_connection_from_dict(c) for c in peer["open"])
            if state in ("closed", "any"):
                found.extend(_connection_from_dict(c) for c in peer["closed"])
        return found

    def local_connections(self, state: ConnState) -> list[ConnectionInfo]:
        found: list[ConnectionInfo] = []
        if state in ("open", "any"):
            found.extend(_connection_info(c) for c in self._server.clients.values())
        if state in ("closed", "any"):
            found.extend(_connection_info(c) for c in self._server.closed_clients)
        return found

    def has_account(self, name: str) -> bool:
        return self._server.accounts.get(name) is not None

    def sublist_stats(self, account: str | None) -> list[SublistStats]:
        stats = [s for _, s in self.account_sublist_stats(account)]
        for peer in self._peers:
            stats.extend(SublistStats(**raw["stats"]) for raw in peer["sublists"]
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
            for raw in peer["open"]:
                found.extend(SubscriptionInfo(**sub) for sub in raw["subscriptions"]
                             if account is None or sub["account"] == account)
        return found

    def local_subscriptions(self, account: str | None) -> list[SubscriptionInfo]:
        found = []
        for conn in self._server.clients.values():
            if account is not None and conn.account.name != account:
                continue
            found.extend(_subscription_info(s, conn.cid) for s in conn.subs.values())
        return found

    def jetstream(self) -> JetStreamView | None:
        # JetStream (a higher layer) registers its monitor on the server when it starts
        monitor = getattr(self._server, "jetstream_monitor", None)
        return monitor.view() if monitor is not None else None

    def jetstream_details(self, *, account: str, streams: bool, consumers: bool, config: bool
                          ) -> tuple[dict[str, int], list[dict[str, object]]]:
        """/jsz totals and `account_details` (empty without JetStream)."""
        monitor = getattr(self._server, "jetstream_monitor", None)
        if monitor is None:
            return {"streams": 0, "consumers": 0, "messages": 0, "bytes": 0}, []
        details = monitor.details(account=account, streams=streams, consumers=consumers, config=config)
        return monitor.totals(), details


def provide_snapshots(server: Server, fabric: LocalFabric) -> None:
    """Let sibling workers' monitoring include this worker (every worker of a mesh does this)."""
    ServerMonitorView(server, None, fabric)


async def start_monitoring(server: Server, listener: socket.socket, fabric: LocalFabric | None = None,
                           *, cores: int | None = None) -> MonitorServer:
    options = server.options
    context = https_context(options.tls) if options.https_port != 0 and options.tls is not None else None
    monitor = MonitorServer(MonitorApp(ServerMonitorView(server, listener, fabric, cores=cores)), listener, context)
    await monitor.start()
    return monitor
