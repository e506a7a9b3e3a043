"""`/metrics`: the server in Prometheus' text format (prometheus-client), one scrape for the whole host.

nats-server has no /metrics (people run prometheus-nats-exporter against /varz); appliance serves
one on the monitoring port. Everything comes from the same view as /varz and /jsz, so the numbers
are the server's, summed over every worker (the view gathers the siblings' snapshots first), plus
the supervisor's status table for per-worker health. Names are in the `appliance_` namespace,
counters end in `_total`, sizes in `_bytes`, durations in `_seconds`.

    appliance_info{server_id,server_name,version,cluster} 1
    appliance_client_connections, appliance_client_connections_accepted_total
    appliance_messages_received_total, appliance_messages_sent_total, appliance_bytes_received_total,
    appliance_bytes_sent_total, appliance_slow_consumers_total, appliance_subscriptions, appliance_routes
    appliance_jetstream_enabled, appliance_jetstream_{memory,storage}_bytes, ..._max_{memory,storage}_bytes,
    appliance_jetstream_api_requests_total, appliance_jetstream_api_errors_total
    appliance_jetstream_account_{streams,consumers,messages,bytes}{account}
    appliance_jetstream_meta_leader, appliance_jetstream_meta_cluster_size, appliance_raft_replica_lag{group,peer}
    appliance_jetstream_fsync_seconds, appliance_jetstream_group_commit_messages (histograms)
    appliance_worker_state{worker,state}, appliance_worker_restarts_total{worker},
    appliance_worker_ring_occupancy_ratio{worker}, appliance_worker_heartbeat_age_seconds{worker},
    appliance_worker_client_connections{worker}
    appliance_raft_groups{kind,state}, appliance_raft_leader_changes_total{kind},
    appliance_raft_group_replica_lag{kind,group,peer} (groups led here; the meta group's is above)
    appliance_route_{messages,bytes}_{received,sent}_total{peer,peer_id}, appliance_route_rtt_seconds{peer,peer_id}
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from .endpoint import PART_COUNTERS, Endpoint, RequestContext, Response
from .view import RaftGroupStat, ServerView

NAMESPACE = "appliance"


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(f"{NAMESPACE}_{name}", documentation, value=value)


def _counter(name: str, documentation: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(f"{NAMESPACE}_{name}", documentation, value=value)


def server_families(view: ServerView) -> Iterator[Metric]:
    info = GaugeMetricFamily(f"{NAMESPACE}_info", "The server's identity (value 1)",
                             labels=("server_id", "server_name", "version", "cluster"))
    info.add_metric((view.server_id, view.server_name, view.version, view.cluster_name), 1)
    yield info
    yield _gauge("start_time_seconds", "When the server started (Unix time)", view.start_wall_s)
    counters = view.counters()
    yield _gauge("client_connections", "Open client connections", counters.connections)
    yield _counter("client_connections_accepted", "Client connections accepted", counters.total_connections)
    yield _counter("messages_received", "Messages received from clients and routes", counters.in_msgs)
    yield _counter("messages_sent", "Messages sent to clients and routes", counters.out_msgs)
    yield _counter("bytes_received", "Payload bytes received", counters.in_bytes)
    yield _counter("bytes_sent", "Payload bytes sent", counters.out_bytes)
    yield _counter("slow_consumers", "Connections closed or flagged as slow consumers", counters.slow_consumers)
    yield _gauge("subscriptions", "Subscriptions across every account", counters.subscriptions)
    yield _gauge("routes", "Open route connections", counters.routes)


def jetstream_families(view: ServerView) -> Iterator[Metric]:
    js = view.jetstream()
    enabled = js is not None and js.enabled
    yield _gauge("jetstream_enabled", "1 when JetStream runs", 1 if enabled else 0)
    if js is None or not enabled:
        return
    yield _gauge("jetstream_memory_bytes", "Bytes stored in memory streams", js.stats.memory)
    yield _gauge("jetstream_storage_bytes", "Bytes stored in file streams", js.stats.storage)
    yield _gauge("jetstream_max_memory_bytes", "The server's JetStream memory limit", js.max_memory)
    yield _gauge("jetstream_max_storage_bytes", "The server's JetStream storage limit", js.max_storage)
    yield _counter("jetstream_api_requests", "JetStream API requests", js.stats.api_total)
    yield _counter("jetstream_api_errors", "JetStream API requests answered with an error", js.stats.api_errors)
    yield from _account_families(view)
    if js.meta is not None:
        yield _gauge("jetstream_meta_leader", "1 when this server leads the meta group",
                     1 if js.meta.leader == view.server_name else 0)
        yield _gauge("jetstream_meta_cluster_size", "Servers in the meta group", js.meta.cluster_size)
        lag = GaugeMetricFamily(f"{NAMESPACE}_raft_replica_lag", "Entries a replica is behind its leader",
                                labels=("group", "peer"))
        for peer in js.meta.replicas:
            lag.add_metric(("meta", peer.name), peer.lag)
        yield lag
    latency: Any = getattr(view, "fsync_latency", lambda: None)()
    if latency is not None:
        yield _histogram("jetstream_fsync_seconds", "Group-commit fsync latency", latency)
    batches: Any = getattr(view, "commit_batches", lambda: None)()
    if batches is not None:
        yield _histogram("jetstream_group_commit_messages", "Messages made durable by one group-commit fsync",
                         batches)


def _histogram(name: str, documentation: str, snapshot: Any) -> HistogramMetricFamily:
    """A HistogramSnapshot (per-bucket counts) as Prometheus' cumulative buckets."""
    buckets, running = [], 0
    for bound, count in zip((*snapshot.bounds, float("inf")), snapshot.counts, strict=True):
        running += count
        buckets.append(("+Inf" if bound == float("inf") else repr(bound), running))
    return HistogramMetricFamily(f"{NAMESPACE}_{name}", documentation, buckets=buckets, sum_value=snapshot.total)


def _account_families(view: ServerView) -> Iterator[Metric]:
    details_of = getattr(view, "jetstream_details", None)
    if details_of is None:
        return
    _, accounts = details_of(account="", streams=True, consumers=False, config=False)
    names = ("streams", "consumers", "messages", "bytes")
    families = {name: GaugeMetricFamily(f"{NAMESPACE}_jetstream_account_{name}",
                                        f"JetStream {name} of the account", labels=("account",)) for name in names}
    for account in accounts:
        totals = dict.fromkeys(names, 0)
        for stream in account.get("stream_detail", []) or []:
            state = stream.get("state", {})
            totals["streams"] += 1
            totals["consumers"] += int(state.get("consumer_count", 0))
            totals["messages"] += int(state.get("messages", 0))
            totals["bytes"] += int(state.get("bytes", 0))
        for name in names:
            families[name].add_metric((str(account["name"]),), totals[name])
    yield from families.values()


def worker_families(view: ServerView) -> Iterator[Metric]:
    rows: list[dict[str, Any]] = getattr(view, "worker_rows", lambda: [])()
    if not rows:
        return
    state = GaugeMetricFamily(f"{NAMESPACE}_worker_state", "1 for the state each worker is in",
                              labels=("worker", "state"))
    restarts = CounterMetricFamily(f"{NAMESPACE}_worker_restarts", "Restarts of the worker", labels=("worker",))
    ring = GaugeMetricFamily(f"{NAMESPACE}_worker_ring_occupancy_ratio",
                             "Fill of the worker's fullest outgoing ring (0..1)", labels=("worker",))
    heartbeat = GaugeMetricFamily(f"{NAMESPACE}_worker_heartbeat_age_seconds", "Since the worker's last heartbeat",
                                  labels=("worker",))
    connections = GaugeMetricFamily(f"{NAMESPACE}_worker_client_connections", "Client connections of the worker",
                                    labels=("worker",))
    for row in rows:
        worker = str(row["index"])
        state.add_metric((worker, str(row["state"])), 1)
        restarts.add_metric((worker,), row["restarts"])
        ring.add_metric((worker,), row["ring_fill"])
        heartbeat.add_metric((worker,), row["heartbeat_age_s"])
        connections.add_metric((worker,), row["connections"])
    yield from (state, restarts, ring, heartbeat, connections)


RAFT_STATES = ("leader", "follower", "candidate")


def raft_families(view: ServerView) -> Iterator[Metric]:
    """The RAFT groups this server holds a replica of (JetStream's meta, stream and consumer groups):
    how many are in each state, the new leaders they learned of, and (on groups it leads) how far each
    follower's log is behind."""
    groups: list[RaftGroupStat] = getattr(view, "raft_groups", lambda: [])()
    if not groups:
        return
    states = GaugeMetricFamily(f"{NAMESPACE}_raft_groups", "RAFT groups held here, by kind and state",
                               labels=("kind", "state"))
    changes = CounterMetricFamily(f"{NAMESPACE}_raft_leader_changes",
                                  "New leaders learned of by the groups held here (summed over live groups)",
                                  labels=("kind",))
    counts: dict[tuple[str, str], int] = {}
    changed: dict[str, int] = {}
    for group in groups:
        for state in RAFT_STATES:
            counts.setdefault((group.kind, state), 0)
        counts[(group.kind, group.state)] = counts.get((group.kind, group.state), 0) + 1
        changed[group.kind] = changed.get(group.kind, 0) + group.leader_changes
    for (kind, state), count in sorted(counts.items()):
        states.add_metric((kind, state), count)
    for kind, count in sorted(changed.items()):
        changes.add_metric((kind,), count)
    yield states
    yield changes
    lagging = [(group, peer, lag) for group in groups if group.kind != "meta"
               for peer, lag in sorted(group.replica_lag.items())]
    if lagging:
        lag_family = GaugeMetricFamily(f"{NAMESPACE}_raft_group_replica_lag",
                                       "Entries a follower is behind this server, for the groups it leads",
                                       labels=("kind", "group", "peer"))
        for group, peer, lag in lagging:
            lag_family.add_metric((group.kind, group.group, peer), lag)
        yield lag_family


def route_families(view: ServerView) -> Iterator[Metric]:
    """Per route (peer server): messages and bytes each way, and the last measured round trip."""
    routes = view.routes()
    if not routes:
        return
    labels = ("peer", "peer_id")
    families = {
        "in_msgs": CounterMetricFamily(f"{NAMESPACE}_route_messages_received", "Messages received from the peer",
                                       labels=labels),
        "out_msgs": CounterMetricFamily(f"{NAMESPACE}_route_messages_sent", "Messages sent to the peer", labels=labels),
        "in_bytes": CounterMetricFamily(f"{NAMESPACE}_route_bytes_received", "Payload bytes received from the peer",
                                        labels=labels),
        "out_bytes": CounterMetricFamily(f"{NAMESPACE}_route_bytes_sent", "Payload bytes sent to the peer",
                                         labels=labels),
    }
    rtt = GaugeMetricFamily(f"{NAMESPACE}_route_rtt_seconds", "Last measured round trip to the peer (PING/PONG)",
                            labels=labels)
    for route in routes:
        key = (route.remote_name or route.remote_id, route.remote_id)
        for name, family in families.items():
            family.add_metric(key, getattr(route, name))
        if route.rtt_s is not None:
            rtt.add_metric(key, route.rtt_s)
    yield from families.values()
    yield rtt


class _ViewCollector:
    def __init__(self, view: ServerView) -> None:
        self.view = view

    def collect(self) -> Iterator[Metric]:
        yield from server_families(self.view)
        yield from jetstream_families(self.view)
        yield from worker_families(self.view)
        yield from raft_families(self.view)
        yield from route_families(self.view)


def render(view: ServerView) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_ViewCollector(view))
    return generate_latest(registry)


def handle(ctx: RequestContext) -> Response:
    ctx.count()
    return Response(200, (("Content-Type", CONTENT_TYPE_LATEST),), render(ctx.view))


ENDPOINT = Endpoint(paths=("/metrics",), handle=handle, title="Metrics",
                    needs=lambda query: frozenset({PART_COUNTERS}))  # every worker's counters
