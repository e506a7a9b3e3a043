"""JetStream structures as nats-server marshals them; shared by /varz `jetstream` and (later) /jsz.

Field order and omitempty rules follow nats-server's JetStreamConfig, JetStreamStats,
MetaClusterInfo and PeerInfo structs.
"""

from __future__ import annotations

from appliance.durations import GO_ZERO_TIME, rfc3339_nano, wall_ns
from .gojson import JsonValue
from .view import JetStreamStats, JetStreamView, MetaClusterInfo, PeerInfo


def config_json(js: JetStreamView) -> dict[str, JsonValue]:
    out: dict[str, JsonValue] = {"max_memory": js.max_memory, "max_storage": js.max_storage}
    if js.store_dir:
        out["store_dir"] = js.store_dir
    if js.sync_interval_s:
        out["sync_interval"] = wall_ns(js.sync_interval_s)
    if js.sync_always:
        out["sync_always"] = True
    if js.domain:
        out["domain"] = js.domain
    if js.compress_ok:
        out["compress_ok"] = True
    if js.unique_tag:
        out["unique_tag"] = js.unique_tag
    if js.strict:
        out["strict"] = True
    return out


def stats_json(stats: JetStreamStats) -> dict[str, JsonValue]:
    api: dict[str, JsonValue] = {
        "level": stats.api_level,
        "total": stats.api_total,
        "errors": stats.api_errors,
    }
    if stats.api_inflight:
        api["inflight"] = stats.api_inflight
    return {
        "memory": stats.memory,
        "storage": stats.storage,
        "reserved_memory": stats.reserved_memory,
        "reserved_storage": stats.reserved_storage,
        "accounts": stats.accounts,
        "ha_assets": stats.ha_assets,
        "api": api,
    }


def peer_json(peer: PeerInfo) -> dict[str, JsonValue]:
    out: dict[str, JsonValue] = {"name": peer.name, "current": peer.current}
    if peer.offline:
        out["offline"] = True
    out["active"] = wall_ns(peer.active_s)
    if peer.lag:
        out["lag"] = peer.lag
    out["peer"] = peer.peer
    return out


def meta_json(meta: MetaClusterInfo) -> dict[str, JsonValue]:
    out: dict[str, JsonValue] = {}
    if meta.name:
        out["name"] = meta.name
    if meta.leader:
        out["leader"] = meta.leader
    if meta.leader_peer:
        out["peer"] = meta.leader_peer
    if meta.replicas:
        out["replicas"] = [peer_json(p) for p in meta.replicas]
    snapshot = meta.snapshot
    snapshot_json: dict[str, JsonValue] = {
        "pending_entries": snapshot.pending_entries,
        "pending_size": snapshot.pending_bytes,
        # a Go time.Time is never omitted by omitempty: "never" prints as the zero time
        "last_time": GO_ZERO_TIME
        if snapshot.last_wall_s is None
        else rfc3339_nano(wall_ns(snapshot.last_wall_s)),
    }
    if snapshot.last_duration_s:
        snapshot_json["last_duration"] = wall_ns(snapshot.last_duration_s)
    out.update(
        {
            "cluster_size": meta.cluster_size,
            "quorum_needed": meta.quorum_needed,
            "pending": meta.pending_requests + meta.pending_infos,
            "pending_requests": meta.pending_requests,
            "pending_infos": meta.pending_infos,
            "snapshot": snapshot_json,
        }
    )
    return out


def varz_json(js: JetStreamView | None) -> dict[str, JsonValue]:
    """/varz `jetstream`: {} unless JetStream runs (nats-server omits every part then)."""
    if js is None or not js.enabled:
        return {}
    out: dict[str, JsonValue] = {"config": config_json(js), "stats": stats_json(js.stats)}
    if js.meta is not None:
        out["meta"] = meta_json(js.meta)
    out["limits"] = dict(js.limits)
    return out
