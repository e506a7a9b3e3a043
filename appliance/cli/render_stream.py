"""`stream info` and `stream ls` text from the JetStream API's JSON, in the `nats` CLI's layout.

Input is the decoded JSON of `$JS.API.STREAM.INFO` / `STREAM.LIST` (a dict); output is text.
Pure: the time zone and the reference time come from the caller (the API's `ts` when present).
"""

from __future__ import annotations

from datetime import datetime, tzinfo
from typing import Any

from appliance.cli.format import (
    Columns,
    comma,
    humanize_duration,
    ibytes,
    local_time,
    parse_go_time,
    render_table,
    rfc3339_local,
    seen_ago,
    since_ns,
)

JsonDict = dict[str, Any]

_STORAGE = {"file": "File", "memory": "Memory"}
_RETENTION = {"limits": "Limits", "interest": "Interest", "workqueue": "WorkQueue"}
_DISCARD = {"old": "Old", "new": "New"}
_RESERVED_METADATA_PREFIX = "_nats."


def stream_info_text(info: JsonDict, *, tz: tzinfo | None, state_only: bool = False) -> str:
    """The report `nats stream info` prints: Configuration, Cluster Information, State."""
    config: JsonDict = info.get("config", {})
    name = config.get("name", "")
    created = parse_go_time(info.get("created", ""))
    created_text = rfc3339_local(created, tz) if created else "(unknown)"
    kind = "State" if state_only else "Information"
    cols = Columns(f"{kind} for Stream {name} created {created_text}")
    if not state_only:
        add_stream_config(cols, config)
    add_cluster(cols, info.get("cluster"))
    add_stream_state(cols, info, tz=tz)
    return cols.render()


def add_stream_config(cols: Columns, config: JsonDict) -> None:
    cols.title("Configuration")
    cols.row_if("Description", config.get("description", ""), bool(config.get("description")))
    cols.row_if("Subjects", config.get("subjects", []), bool(config.get("subjects")))
    cols.row("Replicas", int(config.get("num_replicas", 1)))
    cols.row_if("Sealed", True, bool(config.get("sealed")))
    cols.row("Storage", _STORAGE.get(config.get("storage", "file"), config.get("storage", "")))
    compression = config.get("compression", "none")
    cols.row_if(
        "Compression", "S2 Compression" if compression == "s2" else compression, compression != "none"
    )
    cols.row_if("First Sequence", int(config.get("first_seq", 0)), int(config.get("first_seq", 0)) > 0)
    placement = config.get("placement") or {}
    cols.row_if("Placement Cluster", placement.get("cluster", ""), bool(placement.get("cluster")))
    cols.row_if("Placement Tags", placement.get("tags", []), bool(placement.get("tags")))
    _add_options(cols, config)
    _add_limits(cols, config)
    metadata = {
        key: value
        for key, value in (config.get("metadata") or {}).items()
        if not key.startswith(_RESERVED_METADATA_PREFIX)
    }
    if metadata:
        cols.title("Metadata")
        for key in sorted(metadata):
            cols.row(key, metadata[key])


def _add_options(cols: Columns, config: JsonDict) -> None:
    cols.title("Options")
    republish = config.get("republish")
    if isinstance(republish, dict):
        label = "Republishing Headers" if republish.get("headers_only") else "Republishing"
        cols.row(label, f"{republish.get('src', '')} to {republish.get('dest', '')}")
    cols.row("Retention", _RETENTION.get(config.get("retention", "limits"), config.get("retention", "")))
    cols.row("Acknowledgments", not config.get("no_ack", False))
    discard = _DISCARD.get(config.get("discard", "old"), config.get("discard", ""))
    cols.row("Discard Policy", "New Per Subject" if config.get("discard_new_per_subject") else discard)
    cols.row("Duplicate Window", humanize_duration(int(config.get("duplicate_window", 0))))
    cols.row_if("Direct Get", True, bool(config.get("allow_direct")))
    cols.row_if("Mirror Direct Get", True, bool(config.get("mirror_direct")))
    cols.row("Allows Msg Delete", not config.get("deny_delete", False))
    cols.row("Allows Per-Message TTL", bool(config.get("allow_msg_ttl", False)))
    cols.row("Allows Purge", not config.get("deny_purge", False))
    cols.row("Allows Rollups", bool(config.get("allow_rollup_hdrs", False)))


def _add_limits(cols: Columns, config: JsonDict) -> None:
    cols.title("Limits")
    max_msgs = int(config.get("max_msgs", -1))
    cols.row("Maximum Messages", "unlimited" if max_msgs == -1 else max_msgs)
    per_subject = int(config.get("max_msgs_per_subject", -1))
    cols.row("Maximum Per Subject", "unlimited" if per_subject <= 0 else per_subject)
    max_bytes = int(config.get("max_bytes", -1))
    cols.row("Maximum Bytes", "unlimited" if max_bytes == -1 else ibytes(max_bytes))
    max_age = int(config.get("max_age", 0))
    cols.row("Maximum Age", "unlimited" if max_age <= 0 else humanize_duration(max_age))
    max_msg_size = int(config.get("max_msg_size", -1))
    cols.row("Maximum Message Size", "unlimited" if max_msg_size == -1 else ibytes(max_msg_size))
    max_consumers = int(config.get("max_consumers", -1))
    cols.row("Maximum Consumers", "unlimited" if max_consumers == -1 else max_consumers)
    limits = config.get("consumer_limits") or {}
    inactive = int(limits.get("inactive_threshold", 0))
    cols.row_if("Consumer Inactive Threshold", humanize_duration(inactive), inactive > 0)
    max_ack_pending = int(limits.get("max_ack_pending", 0))
    cols.row_if("Consumer Max Ack Pending", max_ack_pending, max_ack_pending > 0)


def add_cluster(cols: Columns, cluster: JsonDict | None, *, detail: bool = True) -> None:
    """The seeds' block: Name, Leader, one `Replica: n4-c1, current, seen 0.07s ago` per peer.

    `detail`: a stream's replicas also say OFFLINE and how many operations behind they are; the
    nats CLI leaves both out of a consumer's."""
    if not cluster or not cluster.get("name"):
        return
    cols.title("Cluster Information")
    cols.row("Name", cluster["name"])
    cols.row("Leader", cluster.get("leader", ""))
    for replica in cluster.get("replicas") or []:
        cols.row("Replica", replica_text(replica, detail=detail))


def replica_text(replica: JsonDict, *, detail: bool = True) -> str:
    parts = [str(replica.get("name", "")), "current" if replica.get("current") else "outdated"]
    if replica.get("offline") and detail:
        parts.append("OFFLINE")
    parts.append(seen_ago(int(replica.get("active", 0))))
    lag = int(replica.get("lag", 0)) if detail else 0
    if lag > 1:
        parts.append(f"{comma(lag)} operations behind")
    elif lag == 1:
        parts.append("1 operation behind")
    return ", ".join(parts)


def add_stream_state(cols: Columns, info: JsonDict, *, tz: tzinfo | None) -> None:
    state: JsonDict = info.get("state", {})
    cols.title("State")
    metadata = (info.get("config") or {}).get("metadata") or {}
    cols.row_if("Host Version", metadata.get("_nats.ver", ""), bool(metadata.get("_nats.ver")))
    if metadata.get("_nats.level") or metadata.get("_nats.req.level"):
        cols.row(
            "Required API Level",
            f"{metadata.get('_nats.req.level') or '0'} hosted at level {metadata.get('_nats.level', '')}",
        )
    cols.row("Messages", int(state.get("messages", 0)))
    cols.row("Bytes", ibytes(int(state.get("bytes", 0))))
    for label, seq_key, ts_key in (
        ("First Sequence", "first_seq", "first_ts"),
        ("Last Sequence", "last_seq", "last_ts"),
    ):
        seq = int(state.get(seq_key, 0))
        moment = parse_go_time(state.get(ts_key, ""))
        cols.row(label, comma(seq) if moment is None else f"{comma(seq)} @ {local_time(moment, tz)}")
    deleted = len(state.get("deleted") or []) or int(state.get("num_deleted", 0))
    cols.row_if("Deleted Messages", deleted, deleted > 0)
    cols.row("Active Consumers", int(state.get("consumer_count", 0)))
    cols.row_if(
        "Number of Subjects", int(state.get("num_subjects", 0)), int(state.get("num_subjects", 0)) > 0
    )


def stream_list_table(infos: list[JsonDict], *, tz: tzinfo | None, now: datetime) -> str:
    """`nats stream ls`: the Streams table, smallest first, as natscli sorts it."""
    rows = []
    for info in sorted(infos, key=lambda item: int(item.get("state", {}).get("bytes", 0))):
        state = info.get("state", {})
        created = parse_go_time(info.get("created", ""))
        reference = parse_go_time(info.get("ts", "")) or now
        last = parse_go_time(state.get("last_ts", ""))
        rows.append(
            [
                info.get("config", {}).get("name", ""),
                info.get("config", {}).get("description", ""),
                local_time(created, tz) if created else "",
                comma(int(state.get("messages", 0))),
                ibytes(int(state.get("bytes", 0))),
                humanize_duration(since_ns(last, reference)) if last else "never",
            ]
        )
    return render_table(
        "Streams", ["Name", "Description", "Created", "Messages", "Size", "Last Message"], rows
    )
