"""`consumer info`, `consumer ls` and `consumer next` text in the `nats` CLI's layout (pure)."""

from __future__ import annotations

from datetime import datetime, tzinfo
from typing import Any

from appliance.cli.format import (
    Columns,
    comma,
    humanize_duration,
    local_time,
    parse_go_time,
    render_table,
    since_ns,
)
from appliance.cli.render_stream import add_cluster

JsonDict = dict[str, Any]

_DELIVER = {"all": "All", "last": "Last", "new": "New", "last_per_subject": "Last Per Subject"}
_ACK = {"none": "None", "all": "All", "explicit": "Explicit"}
_REPLAY = {"instant": "Instant", "original": "Original"}


def consumer_info_text(info: JsonDict, *, tz: tzinfo | None, now: datetime) -> str:
    """The report `nats consumer info` prints: Configuration, Cluster Information, State."""
    config: JsonDict = info.get("config", {})
    created = parse_go_time(info.get("created", ""))
    cols = Columns(
        f"Information for Consumer {info.get('stream_name', '')} > {info.get('name', '')} "
        f"created {local_time(created, tz) if created else '(unknown)'}"
    )
    _add_config(cols, config)
    add_cluster(cols, info.get("cluster"), detail=False)
    _add_state(cols, info, config, reference=parse_go_time(info.get("ts", "")) or now)
    return cols.render()


def _add_config(cols: Columns, config: JsonDict) -> None:
    cols.title("Configuration")
    name = config.get("name", "")
    durable = config.get("durable_name", "")
    cols.row_if("Name", name, bool(name))
    cols.row_if("Durable Name", durable, bool(durable) and durable != name)
    cols.row_if("Description", config.get("description", ""), bool(config.get("description")))
    deliver_subject = config.get("deliver_subject", "")
    if deliver_subject:
        cols.row("Delivery Subject", deliver_subject)
    else:
        cols.row("Pull Mode", True)
    if config.get("filter_subject"):
        cols.row("Filter Subject", config["filter_subject"])
    elif config.get("filter_subjects"):
        cols.row("Filter Subjects", config["filter_subjects"])
    cols.row("Deliver Policy", deliver_policy_text(config))
    cols.row_if(
        "Deliver Queue Group",
        config.get("deliver_group", ""),
        bool(config.get("deliver_group")) and bool(deliver_subject),
    )
    ack_policy = config.get("ack_policy", "none")
    cols.row("Ack Policy", _ACK.get(ack_policy, ack_policy))
    cols.row_if("Ack Wait", humanize_duration(int(config.get("ack_wait", 0))), ack_policy != "none")
    cols.row("Replay Policy", _REPLAY.get(config.get("replay_policy", "instant"), ""))
    max_deliver = int(config.get("max_deliver", -1))
    cols.row_if("Maximum Deliveries", max_deliver, max_deliver not in (-1, 0))
    max_ack_pending = int(config.get("max_ack_pending", 0))
    cols.row_if("Max Ack Pending", max_ack_pending, max_ack_pending > 0)
    max_waiting = int(config.get("max_waiting", 0))
    cols.row_if("Max Waiting Pulls", max_waiting, max_waiting > 0)
    heartbeat = int(config.get("idle_heartbeat", 0))
    cols.row_if("Idle Heartbeat", humanize_duration(heartbeat), heartbeat > 0)
    cols.row_if("Flow Control", bool(config.get("flow_control")), bool(deliver_subject))
    cols.row_if("Headers Only", True, bool(config.get("headers_only")))
    inactive = int(config.get("inactive_threshold", 0))
    cols.row_if("Inactive Threshold", humanize_duration(inactive), inactive > 0 and not deliver_subject)
    cols.row_if(
        "Max Pull Expire",
        humanize_duration(int(config.get("max_expires", 0))),
        int(config.get("max_expires", 0)) > 0,
    )
    cols.row_if("Max Pull Batch", int(config.get("max_batch", 0)), int(config.get("max_batch", 0)) > 0)
    replicas = int(config.get("num_replicas", 0))
    cols.row_if("Replicas", replicas, replicas > 0)
    cols.row_if("Memory Storage", True, bool(config.get("mem_storage")))


def deliver_policy_text(config: JsonDict) -> str:
    policy = str(config.get("deliver_policy", "all"))
    if policy == "by_start_sequence":
        return f"From Sequence {config.get('opt_start_seq', 0)}"
    if policy == "by_start_time":
        return f"Since {config.get('opt_start_time', '')}"
    return _DELIVER.get(policy, policy)


def _sequence_pair(point: JsonDict) -> str:
    return (
        f"Consumer sequence: {comma(int(point.get('consumer_seq', 0)))} "
        f"Stream sequence: {comma(int(point.get('stream_seq', 0)))}"
    )


def _add_state(cols: Columns, info: JsonDict, config: JsonDict, *, reference: datetime) -> None:
    cols.title("State")
    delivered = info.get("delivered") or {}
    last_delivery = parse_go_time(delivered.get("last_active", ""))
    suffix = (
        f" Last delivery: {humanize_duration(since_ns(last_delivery, reference))} ago"
        if last_delivery
        else ""
    )
    cols.row("Last Delivered Message", _sequence_pair(delivered) + suffix)
    if config.get("ack_policy", "none") != "none":
        floor = info.get("ack_floor") or {}
        last_ack = parse_go_time(floor.get("last_active", ""))
        suffix = f" Last Ack: {humanize_duration(since_ns(last_ack, reference))} ago" if last_ack else ""
        cols.row("Acknowledgment Floor", _sequence_pair(floor) + suffix)
        pending = int(info.get("num_ack_pending", 0))
        max_ack_pending = int(config.get("max_ack_pending", 0))
        cols.row(
            "Outstanding Acks",
            f"{comma(pending)} out of maximum {comma(max_ack_pending)}" if max_ack_pending > 0 else pending,
        )
        cols.row("Redelivered Messages", int(info.get("num_redelivered", 0)))
    cols.row("Unprocessed Messages", int(info.get("num_pending", 0)))
    if not config.get("deliver_subject"):
        waiting, max_waiting = int(info.get("num_waiting", 0)), int(config.get("max_waiting", 0))
        cols.row(
            "Waiting Pulls",
            f"{comma(waiting)} of maximum {comma(max_waiting)}"
            if max_waiting > 0
            else f"{comma(waiting)} of unlimited",
        )
    elif info.get("push_bound"):
        group = config.get("deliver_group", "")
        cols.row("Active Interest", f"Active using Queue Group {group}" if group else "Active")
    else:
        cols.row("Active Interest", "No interest")


def consumer_list_table(infos: list[JsonDict], *, tz: tzinfo | None, now: datetime) -> str:
    rows = []
    for info in infos:
        created = parse_go_time(info.get("created", ""))
        reference = parse_go_time(info.get("ts", "")) or now
        last = parse_go_time((info.get("delivered") or {}).get("last_active", ""))
        rows.append(
            [
                info.get("name", ""),
                info.get("config", {}).get("description", ""),
                local_time(created, tz) if created else "",
                comma(int(info.get("num_ack_pending", 0))),
                comma(int(info.get("num_pending", 0))),
                humanize_duration(since_ns(last, reference)) if last else "never",
            ]
        )
    return render_table(
        "Consumers", ["Name", "Description", "Created", "Ack Pending", "Unprocessed", "Last Delivery"], rows
    )


def parse_ack_subject(reply: str) -> dict[str, int] | None:
    """The numbers in a `$JS.ACK` reply subject (v1: 9 tokens, v2: 11 or more), else None."""
    tokens = reply.split(".")
    if len(tokens) < 9 or tokens[0] != "$JS" or tokens[1] != "ACK":
        return None
    numbers = tokens[4:9] if len(tokens) == 9 else tokens[6:11]
    try:
        delivered, stream_seq, consumer_seq, timestamp_ns, pending = (int(token) for token in numbers)
    except ValueError:
        return None
    return {
        "delivered": delivered,
        "stream_seq": stream_seq,
        "consumer_seq": consumer_seq,
        "timestamp_ns": timestamp_ns,
        "pending": pending,
    }


def next_message_header(subject: str, reply: str, *, clock_text: str) -> str:
    """The line `nats consumer next` prints before a message body."""
    meta = parse_ack_subject(reply)
    if meta is None:
        return f"--- subject: {subject} reply: {reply}" if reply else f"--- subject: {subject}"
    return (
        f"[{clock_text}] subj: {subject} / tries: {meta['delivered']} / cons seq: {meta['consumer_seq']}"
        f" / str seq: {meta['stream_seq']} / pending: {comma(meta['pending'])}"
    )
