"""`server report jetstream` text: natscli's "JetStream Summary", "RAFT Meta Group Information" and
(with --leaders) "RAFT Leader Report" tables from `$SYS.REQ.SERVER.PING.JSZ` answers (pure).

Per server (or, with an account, that account's detail on each server): streams, consumers,
messages, bytes, memory and file storage, API requests and the meta group's pending count; the
meta leader's name carries a `*`. Below, the meta group as its leader reports it: every member
with its peer id, leadership, current, online, last activity and lag. When servers report a meta
group but none of them leads it, a warning replaces that table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from appliance.cli.format import comma, humanize_duration, ibytes, render_table

JsonDict = dict[str, Any]
SORTS = ("name", "cluster", "streams", "consumers", "msgs", "mbytes", "bytes", "mem", "file", "store",
         "api", "err")


def compact_strings(names: list[str]) -> list[str]:
    """natscli's CompactStrings: drop the dot-separated suffix all names share (never the first part)."""
    if not names:
        return names
    parts = [name.split(".") for name in names]
    shortest = min(len(p) for p in parts)
    suffix = ""
    for index in range(shortest - 1, 0, -1):
        token = parts[0][index]
        if any(p[index] != token for p in parts):
            break
        suffix = "." + token + suffix
    return [name[: -len(suffix)] if suffix and name.endswith(suffix) else name for name in names]


@dataclass
class _Leader:
    name: str
    cluster: str
    groups: int


def _sort_key(sort: str) -> Any:
    def key(answer: JsonDict) -> tuple[Any, ...]:
        server, data = answer.get("server") or {}, answer.get("data") or {}
        name = str(server.get("name", ""))
        if sort == "name":
            return (name,)
        if sort in ("streams", "consumers"):
            return (int(data.get(sort, 0)), name)
        if sort == "msgs":
            return (int(data.get("messages", 0)),)
        if sort in ("mbytes", "bytes"):
            return (int(data.get("bytes", 0)),)
        if sort == "mem":
            return (int(data.get("memory", 0)),)
        if sort in ("store", "file"):
            return (int(data.get("storage", 0)),)
        if sort == "api":
            return (int((data.get("api") or {}).get("total", 0)),)
        return (str(server.get("cluster", "")), name)  # cluster (and natscli's unhandled "err")

    return key


def jetstream_report(
    answers: list[JsonDict], *, account: str = "", sort: str = "cluster", compact: bool = True,
    leaders: bool = False,
) -> str:
    """The whole report; `answers` are the JSZ replies ({"server", "data"}), in any order."""
    answers = sorted(answers, key=_sort_key(sort))
    names = [str((a.get("server") or {}).get("name", "")) for a in answers]
    shown = compact_strings(names) if compact else names
    domain = any(((a.get("data") or {}).get("config") or {}).get("domain") for a in answers)
    headers = ["Server", "Cluster", *(["Domain"] if domain else []), "Streams", "Consumers", "Messages",
               "Bytes", "Memory", "File", "API Req", "Pending"]
    totals = dict.fromkeys(("api", "pending", "memory", "store", "consumers", "streams", "bytes", "msgs"), 0)
    stream_leaders: dict[str, _Leader] = {}
    consumer_leaders: dict[str, _Leader] = {}
    metas: list[JsonDict] = []
    expected_size = 0
    rows: list[list[str]] = []
    for answer, label in zip(answers, shown, strict=True):
        server: JsonDict = answer.get("server") or {}
        data: JsonDict = answer.get("data") or {}
        name = str(server.get("name", ""))
        details = data.get("account_details") or []
        stats = data
        if account and len(details) == 1:
            detail: JsonDict = details[0]
            stats = detail
            streams = detail.get("stream_detail") or []
            row_bytes = int(detail.get("memory", 0)) + int(detail.get("storage", 0))
            row_streams = len(streams)
            row_consumers = sum(int((s.get("state") or {}).get("consumer_count", 0)) for s in streams)
            row_msgs = sum(int((s.get("state") or {}).get("messages", 0)) for s in streams)
            _count_detail_leaders(streams, name, stream_leaders, consumer_leaders)
        else:
            row_bytes, row_streams = int(data.get("bytes", 0)), int(data.get("streams", 0))
            row_consumers, row_msgs = int(data.get("consumers", 0)), int(data.get("messages", 0))
            if data.get("streams_leader") or data.get("consumers_leader"):
                cluster = str(server.get("cluster", ""))
                consumer_leaders[name] = _Leader(name, cluster, int(data.get("consumers_leader", 0)))
                stream_leaders[name] = _Leader(name, cluster, int(data.get("streams_leader", 0)))
        api = int((stats.get("api") or {}).get("total", 0))
        memory, store = int(stats.get("memory", 0)), int(stats.get("storage", 0))
        leader_mark, pending = "", 0
        meta = data.get("meta_cluster")
        if isinstance(meta, dict):
            if meta.get("leader") == name:
                leader_mark = "*"
                metas.append(meta)
            expected_size = max(expected_size, int(meta.get("cluster_size", 0)))
            pending = int(meta.get("pending", 0))
        for key, value in (("api", api), ("memory", memory), ("store", store), ("bytes", row_bytes),
                           ("streams", row_streams), ("consumers", row_consumers), ("msgs", row_msgs),
                           ("pending", pending)):
            totals[key] += value
        rows.append([label + leader_mark, str(server.get("cluster", "")),
                     *([str((data.get("config") or {}).get("domain", ""))] if domain else []),
                     comma(row_streams), comma(row_consumers), comma(row_msgs), ibytes(row_bytes),
                     ibytes(memory), ibytes(store), comma(api), str(pending)])
    footer = ["", "", *([""] if domain else []), comma(totals["streams"]), comma(totals["consumers"]),
              comma(totals["msgs"]), ibytes(totals["bytes"]), ibytes(totals["memory"]), ibytes(totals["store"]),
              comma(totals["api"]), str(totals["pending"])]
    title = f"JetStream Summary for Account {account}" if account else "JetStream Summary"
    out = render_table(title, headers, rows, footer, right=frozenset({len(headers) - 1})) + "\n"
    if expected_size and not metas:
        out += (f"\nWARNING: No cluster meta leader found. The cluster expects {expected_size} nodes but only "
                f"{len(answers)} responded. JetStream operation requires at least {expected_size // 2 + 1} "
                "up nodes.\n")
    for index, meta in enumerate(metas):
        out += ("\n" if index else "") + meta_group_table(meta, compact=compact)
    if leaders:
        out += "\n"
        if not stream_leaders and not consumer_leaders:
            out += "No JetStream asset leader data reported\n"
        else:
            out += _leader_table(stream_leaders, "Stream Leaders") + "\n"
            out += _leader_table(consumer_leaders, "Consumer Leaders") + "\n"
    return out


def _count_detail_leaders(
    streams: list[JsonDict], name: str, stream_leaders: dict[str, _Leader], consumer_leaders: dict[str, _Leader]
) -> None:
    """Assets `name` leads, from an account's stream details (natscli keys consumers by their
    stream's leader)."""
    for stream in streams:
        cluster: JsonDict = stream.get("cluster") or {}
        leader = str(cluster.get("leader", ""))
        if cluster and leader == name:
            stream_leaders.setdefault(leader, _Leader(leader, str(cluster.get("name", "")), 0)).groups += 1
        for consumer in stream.get("consumer_detail") or []:
            if (consumer.get("cluster") or {}).get("leader") == name:
                entry = consumer_leaders.setdefault(leader, _Leader(leader, str(cluster.get("name", "")), 0))
                entry.groups += 1


def meta_group_table(meta: JsonDict, *, compact: bool = True) -> str:
    """"RAFT Meta Group Information": the meta leader's view, the leader itself added, by name."""
    leader = str(meta.get("leader", ""))
    members = [*(meta.get("replicas") or []), {"name": leader, "current": True, "active": 0, "lag": 0}]
    members.sort(key=lambda member: str(member.get("name", "")))
    names = [str(member.get("name", "")) for member in members]
    shown = compact_strings(names) if compact else names
    rows = []
    for member, label in zip(members, shown, strict=True):
        is_leader = member.get("name") == leader
        rows.append([
            label,
            str(meta.get("peer", "")) if is_leader else str(member.get("peer", "")),
            "yes" if is_leader else "",
            "true" if member.get("current") else "false",
            "false" if member.get("offline") else "true",
            humanize_duration(int(member.get("active", 0))),
            comma(int(member.get("lag", 0))),
        ])
    headers = ["Connection Name", "ID", "Leader", "Current", "Online", "Active", "Lag"]
    return render_table(f"RAFT Meta Group Information - Lead cluster: {meta.get('name', '')}", headers, rows)


def _leader_table(leaders: dict[str, _Leader], title: str) -> str:
    """"RAFT Leader Report": per server its share of its cluster's groups, one `*` per ~10%."""
    per_cluster: dict[str, int] = {}
    for entry in leaders.values():
        per_cluster[entry.cluster] = per_cluster.get(entry.cluster, 0) + entry.groups
    ordered = sorted(leaders.values(), key=lambda e: (e.cluster, e.groups, e.name))
    rows, separators = [], set()
    for index, entry in enumerate(ordered):
        if index and entry.cluster != ordered[index - 1].cluster:
            separators.add(index)
        dots = 0
        if entry.groups > 0:
            dots = max(int(entry.groups / per_cluster[entry.cluster] * 100 / 10 + 0.5), 1)  # Go's math.Round
        rows.append([entry.name, entry.cluster, comma(entry.groups), "*" * dots])
    return render_table("RAFT Leader Report", ["Server", "Cluster", title, "Distribution"], rows,
                        separators=frozenset(separators))
