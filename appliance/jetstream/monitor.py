"""JetStream as the monitoring endpoints see it: the JetStreamView of /varz and /healthz, and the
per-account detail of /jsz (streams, consumers, configs) rendered as nats-server does."""

from __future__ import annotations

from typing import TYPE_CHECKING

from appliance.jetstream import resources
from appliance.jetstream.api_consumers import info_of
from appliance.jetstream.api_streams import stream_info
from appliance.jetstream.cluster_info import asset_cluster, context_of, meta_cluster
from appliance.jetstream.request import API_LEVEL
from appliance.server.accounts import GLOBAL_ACCOUNT
from appliance.server.monitor.view import (
    ConsumerHealth,
    JetStreamStats,
    JetStreamView,
    MetaClusterInfo,
    RaftGroupStat,
    StreamHealth,
)

if TYPE_CHECKING:
    from appliance.cluster.group import RaftGroup
    from appliance.jetstream.service import JetStreamService

DEFAULT_LIMITS = {"default_max_consumers": 1000}


def listed_accounts(service: JetStreamService) -> list[str]:
    """The accounts nats-server counts as JetStream ones: the global account only when no other
    account (the system account aside) is configured (nats-server's globalAccountOnly)."""
    global_too = resources.global_account_jetstream(service.options)
    return [name for name in service.accounts if name != GLOBAL_ACCOUNT or global_too]


class JetStreamMonitor:
    def __init__(self, service: JetStreamService) -> None:
        self.service = service
        # configured, or derived at start as nats-server derives them (75% of RAM / free disk)
        self.max_memory, self.max_storage = resources.server_limits(service)

    def fsync_latency(self) -> object:
        """The file stores' fsync latency histogram (HistogramSnapshot), for /metrics."""
        return self.service.sync_stats.latency.snapshot()

    def commit_batches(self) -> object:
        """Messages per group-commit fsync (HistogramSnapshot), for /metrics."""
        return self.service.sync_stats.batch.snapshot()

    def raft_groups(self) -> list[RaftGroupStat]:
        """Every RAFT group this worker holds a replica of: the meta group, each stream's, each consumer's."""
        meta = self.service.meta.group
        owned: list[tuple[str, RaftGroup]] = [("meta", meta)] if meta is not None else []
        for ajs in self.service.accounts.values():
            for stream in ajs.streams.values():
                owned.append(("stream", stream.group))
                owned.extend(("consumer", consumer.group) for consumer in stream.consumers.values())
        return [RaftGroupStat(kind=kind, group=group.group_id, state=group.role_name(),
                              leader_changes=group.leader_changes, replica_lag=group.replica_lags())
                for kind, group in owned]

    def totals(self) -> dict[str, int]:
        memory = storage = streams = consumers = messages = size = streams_leader = consumers_leader = 0
        for ajs in self.service.accounts.values():
            for stream in ajs.streams.values():
                state = stream.store.state()
                streams += 1
                consumers += len(stream.consumers)
                streams_leader += _leads(stream.group)
                consumers_leader += sum(_leads(consumer.group) for consumer in stream.consumers.values())
                messages += state.msgs
                size += state.bytes
                if stream.config.storage == "memory":
                    memory += state.bytes
                else:
                    storage += state.bytes
        return {
            "memory": memory,
            "storage": storage,
            "streams": streams,
            "streams_leader": streams_leader,
            "consumers": consumers,
            "consumers_leader": consumers_leader,
            "messages": messages,
            "bytes": size,
        }

    def view(self) -> JetStreamView:
        options = self.service.options.jetstream
        totals = self.totals()
        listed = listed_accounts(self.service)
        accounts = [name for name in listed if self.service.accounts[name].streams]
        reserved = resources.server_usage(self.service)
        stats = JetStreamStats(
            memory=totals["memory"],
            storage=totals["storage"],
            reserved_memory=reserved.reserved_memory,
            reserved_storage=reserved.reserved_storage,
            accounts=len(listed),
            api_level=API_LEVEL,
            api_total=sum(a.api_total for a in self.service.accounts.values()),
            api_errors=sum(a.api_errors for a in self.service.accounts.values()),
        )
        streams = self.health()
        meta = self.meta_info()
        return JetStreamView(
            enabled=True,
            clustered=meta is not None,
            meta=meta,
            meta_state="ok" if meta is None or meta.leader else "no_leader",
            max_memory=self.max_memory,
            max_storage=self.max_storage,
            store_dir=self.service.root,
            sync_interval_s=options.sync_interval_s,
            sync_always=options.sync_always,
            domain=options.domain,
            unique_tag=options.unique_tag,
            strict=options.strict,
            stats=stats,
            limits=dict(DEFAULT_LIMITS),
            accounts=tuple(accounts),
            streams=streams,
            damage=tuple(line for key, line in self.service.damage.items() if key == ("", "meta")),
        )

    def meta_info(self) -> MetaClusterInfo | None:
        """The meta group as /jsz `meta_cluster` shows it; None when not clustered. A server whose
        meta group has not formed yet (cluster/meta_formation.py) reports itself alone, leaderless."""
        service = self.service
        meta = service.meta
        if not meta.clustered:  # a single server with a cluster block: its own one-voter group
            return meta_cluster(meta.group, context_of(service)) if meta.group is not None else None
        if meta.group is None:
            return MetaClusterInfo(name=service.options.cluster.name, cluster_size=1, quorum_needed=1)
        return meta_cluster(meta.group, context_of(service))

    def health(self) -> tuple[StreamHealth, ...]:
        """Every stream held here: damaged data, or could not be opened (service.failures)."""
        failures = self.service.failures
        out: list[StreamHealth] = []
        for name, ajs in self.service.accounts.items():
            for stream in ajs.streams.values():
                consumers = [ConsumerHealth(c) for c in stream.consumers]
                prefix = f"{stream.config.name} > "
                consumers += [
                    ConsumerHealth(key[1][len(prefix) :], "not_recovered", why)
                    for key, why in failures.items()
                    if key[0] == name and key[1].startswith(prefix)
                ]
                damaged = {k[1][len(prefix) :]: why for k, why in self.service.damage.items()
                           if k[0] == name and k[1].startswith(prefix)}
                consumers = [ConsumerHealth(c.name, "damaged", damaged[c.name]) if c.name in damaged else c
                             for c in consumers]
                lost = stream.store.lost()
                if lost.damaged:
                    detail = f"{lost.count} message(s) lost until repaired: " + "; ".join(lost.regions)
                    out.append(StreamHealth(name, stream.config.name, "damaged", detail, tuple(consumers)))
                else:
                    out.append(StreamHealth(name, stream.config.name, consumers=tuple(consumers)))
            for (account, stream_name), why in failures.items():
                if account == name and " > " not in stream_name and stream_name not in ajs.streams:
                    out.append(StreamHealth(name, stream_name, "not_recovered", why))
        return tuple(out)

    def damaged_streams(self) -> int:
        """Streams with unrepaired damage or that could not be opened (`appliance status`)."""
        assets = sum(1 for s in self.health() if s.state != "ok" or any(c.state != "ok" for c in s.consumers))
        return assets + (("", "meta") in self.service.damage)

    def details(
        self, *, account: str, streams: bool, consumers: bool, config: bool
    ) -> list[dict[str, object]]:
        """/jsz `account_details`: one entry per JetStream account (or only `account`)."""
        out: list[dict[str, object]] = []
        listed = listed_accounts(self.service)
        for name, ajs in sorted(self.service.accounts.items()):
            if (account and name != account) or name not in listed:
                continue
            memory = storage = 0
            stream_detail: list[dict[str, object]] = []
            for stream in sorted(ajs.streams.values(), key=lambda s: s.config.name):
                cluster = asset_cluster(self.service, stream.group, standalone=True)
                info = stream_info(stream, dynamic_metadata=False, cluster=cluster)
                if stream.config.storage == "memory":
                    memory += stream.store.state().bytes
                else:
                    storage += stream.store.state().bytes
                detail: dict[str, object] = {
                    "name": stream.config.name,
                    "created": info["created"],
                    "cluster": info["cluster"],
                }
                if config:
                    detail["config"] = info["config"]
                detail["state"] = info["state"]
                if consumers and stream.consumers:
                    detail["consumer_detail"] = [
                        _consumer_detail(info_of(c, self.service), c.config.metadata, config=config)
                        for _, c in sorted(stream.consumers.items())
                    ]
                stream_detail.append(detail)
            entry: dict[str, object] = {
                "name": name,
                "id": name,
                "memory": memory,
                "storage": storage,
                **resources.account_reserved_json(ajs),
                "accounts": 0,
                "ha_assets": 0,
                "api": {"level": 0, "total": ajs.api_total, "errors": ajs.api_errors},
            }
            if (streams or consumers) and stream_detail:  # omitted when empty, as nats-server
                entry["stream_detail"] = stream_detail
            out.append(entry)
        return out


def _leads(group: RaftGroup) -> int:
    """1 if this replica leads the group (a single voter always does), as /jsz `raft` counts it."""
    return 1 if len(group.voters()) <= 1 or group.is_leader() else 0


def _consumer_detail(info: dict[str, object], metadata: dict[str, str], *, config: bool) -> dict[str, object]:
    """A consumer's info as /jsz shows it: its config only when asked for (`config=true`)."""
    if not config:
        info.pop("config", None)
        return info
    found = info.get("config")
    if isinstance(found, dict):
        found["metadata"] = dict(sorted(metadata.items()))
    return info
