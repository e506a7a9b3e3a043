"""An in-memory `ServerView` for monitoring tests: set fields, add connections, move the clock.

Everything the endpoints read is plain data here, so a test states the server it wants and checks
the JSON. Time comes from a `ManualClock`; nothing is random unless the test says so.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from appliance.clock import ManualClock
from appliance.config.options import ServerOptions
from appliance.server.monitor.app import MonitorApp
from appliance.server.monitor.endpoint import Response
from appliance.server.monitor.view import (
    RaftzGroup,
    AccountInfo,
    ConnectionInfo,
    ConnState,
    JetStreamView,
    ProcessUsage,
    RouteInfo,
    ServerCounters,
    SublistStats,
    SubscriptionInfo,
)

FAKE_SERVER_ID = "NDFAKEVIEW0SERVER0ID0FOR0MONITORING0TESTS0000000000000000"


@dataclass(slots=True)
class FakeServerView:
    clock: ManualClock = field(default_factory=ManualClock)
    options: ServerOptions = field(default_factory=ServerOptions)
    server_id: str = FAKE_SERVER_ID
    server_name: str = FAKE_SERVER_ID
    version: str = "2.15.1"
    git_commit: str = ""
    client_host: str = "127.0.0.1"
    client_port: int = 4222
    http_host: str = "127.0.0.1"
    http_port: int = 8222
    start_wall_s: float = 0.0
    config_load_wall_s: float = 0.0
    config_digest: str = ""
    auth_required: bool = False
    system_account: str = "$SYS"
    cluster_name: str = ""
    connect_urls: Sequence[str] = ()
    feature_flags: Mapping[str, bool] = field(default_factory=dict)
    not_ready_reason: str | None = None
    usage: ProcessUsage = ProcessUsage(rss_bytes=50 * 1024 * 1024, cpu_percent=1.5, cores=2, max_procs=2)
    extra_counters: ServerCounters = ServerCounters()
    open_connections: dict[int, ConnectionInfo] = field(default_factory=dict)
    closed_connections: list[ConnectionInfo] = field(default_factory=list)
    internal_subscriptions: list[SubscriptionInfo] = field(default_factory=list)
    account_names: list[str] = field(default_factory=lambda: ["$G", "$SYS"])
    stats_by_account: dict[str, SublistStats] = field(default_factory=dict)
    jetstream_view: JetStreamView | None = None
    route_list: list[RouteInfo] = field(default_factory=list)
    queues: dict[str, int] = field(default_factory=dict)
    raftz: list[RaftzGroup] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.start_wall_s = self.start_wall_s or self.clock.wall()
        self.config_load_wall_s = self.config_load_wall_s or self.start_wall_s

    # --- building the scene -----------------------------------------------------------------------

    def connect(self, cid: int, **fields: object) -> ConnectionInfo:
        """Open a client connection now (fields as in ConnectionInfo; ip/port/account have defaults)."""
        now = self.clock.wall()
        values: dict[str, object] = {
            "ip": "127.0.0.1",
            "port": 50000 + cid,
            "start_wall_s": now,
            "last_activity_wall_s": now,
            "account": "$G",
        }
        values.update(fields)
        conn = ConnectionInfo(cid=cid, **values)  # type: ignore[arg-type]
        assert cid not in self.open_connections, f"cid {cid} is already open"
        self.open_connections[cid] = conn
        return conn

    def update(self, cid: int, **fields: object) -> ConnectionInfo:
        conn = replace(self.open_connections[cid], **fields)  # type: ignore[arg-type]
        self.open_connections[cid] = conn
        return conn

    def close(self, cid: int, reason: str = "Client Closed") -> ConnectionInfo:
        conn = replace(self.open_connections.pop(cid), stop_wall_s=self.clock.wall(), reason=reason)
        self.closed_connections.append(conn)
        return conn

    # --- ServerView -------------------------------------------------------------------------------

    def now_wall_s(self) -> float:
        return self.clock.wall()

    def ready_error(self) -> str | None:
        return self.not_ready_reason

    def counters(self) -> ServerCounters:
        return replace(
            self.extra_counters,
            connections=len(self.open_connections),
            total_connections=len(self.open_connections) + len(self.closed_connections),
            subscriptions=sum(s.num_subscriptions for s in self.sublist_stats(None)),
        )

    def process_usage(self) -> ProcessUsage:
        return self.usage

    def connections(self, state: ConnState) -> list[ConnectionInfo]:
        opened = list(self.open_connections.values())
        if state == "open":
            return opened
        if state == "closed":
            return list(self.closed_connections)
        return opened + self.closed_connections

    def connection_count(self, state: ConnState) -> int:
        return len(self.connections(state))

    def has_account(self, name: str) -> bool:
        return name in self.account_names

    def subscriptions(self, account: str | None) -> list[SubscriptionInfo]:
        subs = list(self.internal_subscriptions)
        for conn in self.open_connections.values():
            subs.extend(conn.subscriptions)
        return [s for s in subs if account is None or s.account == account]

    def sublist_stats(self, account: str | None) -> list[SublistStats]:
        names = [n for n in self.account_names if account is None or n == account]
        return [self.stats_by_account.get(n) or self._counted_stats(n) for n in names]

    def _counted_stats(self, account: str) -> SublistStats:
        count = len(self.subscriptions(account))
        return SublistStats(num_subscriptions=count, num_inserts=count)

    def jetstream(self) -> JetStreamView | None:
        return self.jetstream_view

    def accounts(self) -> list[AccountInfo]:
        return [AccountInfo(name=name, is_system=name == self.system_account,
                            jetstream_enabled=self.jetstream_view is not None and name != self.system_account,
                            client_connections=sum(c.account == name for c in self.open_connections.values()))
                for name in self.account_names]

    def routes(self) -> list[RouteInfo]:
        return list(self.route_list)

    def internal_queues(self) -> dict[str, int]:
        return dict(self.queues)

    def raftz_groups(self) -> list[RaftzGroup]:
        return list(self.raftz)


@dataclass(frozen=True, slots=True)
class Page:
    """One answer of the monitoring app, with the accessors tests want."""

    response: Response

    @property
    def status(self) -> int:
        return self.response.status

    @property
    def text(self) -> str:
        return self.response.body.decode()

    @property
    def json(self) -> Any:  # noqa: ANN401 - parsed JSON is whatever the page holds
        return json.loads(self.response.body)

    def header(self, name: str) -> str | None:
        return dict(self.response.headers).get(name)


class MonitorProbe:
    """A monitoring app over a fake view, asked for pages without sockets."""

    def __init__(self, view: FakeServerView) -> None:
        self.view = view
        self.app = MonitorApp(view)

    def get(self, path: str, query: str = "") -> Page:
        return Page(self.app.respond(path, query))
