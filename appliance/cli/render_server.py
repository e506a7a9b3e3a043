"""`server ls` text: natscli's "Server Overview" table from `$SYS.REQ.SERVER.PING` answers (pure)."""

from __future__ import annotations

from typing import Any

from appliance.cli.format import (
    comma,
    go_duration,
    humanize_duration,
    ibytes,
    parse_go_time,
    render_table,
    since_ns,
)

JsonDict = dict[str, Any]
HEADERS = [
    "Name",
    "Cluster",
    "Host",
    "Version",
    "JS",
    "Conns",
    "Subs",
    "Routes",
    "GWs",
    "Mem",
    "CPU %",
    "Cores",
    "Slow",
    "Uptime",
    "RTT",
]


def server_list_table(answers: list[tuple[JsonDict, int]]) -> str:
    """One row per server (sorted by name) and a totals footer; `answers` pairs statsz with rtt ns."""
    rows: list[list[str]] = []
    clusters: set[str] = set()
    totals = {"connections": 0, "subscriptions": 0, "mem": 0, "slow": 0, "js": 0}
    versions: set[str] = set()
    for answer, rtt_ns in sorted(answers, key=lambda pair: str(pair[0].get("server", {}).get("name", ""))):
        server: JsonDict = answer.get("server", {})
        stats: JsonDict = answer.get("statsz", {})
        if server.get("cluster"):
            clusters.add(server["cluster"])
        versions.add(str(server.get("ver", "")))
        totals["connections"] += int(stats.get("connections", 0))
        totals["subscriptions"] += int(stats.get("subscriptions", 0))
        totals["mem"] += int(stats.get("mem", 0))
        totals["slow"] += int(stats.get("slow_consumers", 0))
        totals["js"] += 1 if server.get("jetstream") else 0
        start, now = parse_go_time(stats.get("start", "")), parse_go_time(server.get("time", ""))
        uptime = humanize_duration(since_ns(start, now)) if start and now else ""
        rows.append(
            [
                str(server.get("name", "")),
                str(server.get("cluster", "")),
                str(server.get("host", "")),
                str(server.get("ver", "")),
                (server.get("domain") or "yes") if server.get("jetstream") else "no",
                comma(int(stats.get("connections", 0))),
                comma(int(stats.get("subscriptions", 0))),
                str(len(stats.get("routes") or [])),
                str(len(stats.get("gateways") or [])),
                ibytes(int(stats.get("mem", 0))),
                f"{float(stats.get('cpu', 0.0)):.0f}",
                str(stats.get("cores", "")),
                comma(int(stats.get("slow_consumers", 0))),
                uptime,
                go_duration(_round_ms(rtt_ns)),
            ]
        )
    footer = [
        "",
        str(len(clusters)),
        str(len(rows)),
        "" if len(versions) <= 1 else "X",
        str(totals["js"]),
        comma(totals["connections"]),
        comma(totals["subscriptions"]),
        "",
        "",
        ibytes(totals["mem"]),
        "",
        "",
        comma(totals["slow"]),
        "",
        "",
    ]
    return render_table("Server Overview", HEADERS, rows, footer)


def _round_ms(ns: int) -> int:
    return (ns + 500_000) // 1_000_000 * 1_000_000


def meta_group(jsz: JsonDict) -> JsonDict:
    """The meta_cluster block of a `$SYS.REQ.SERVER.PING.JSZ` answer ({} when absent)."""
    return dict((jsz.get("data") or {}).get("meta_cluster") or {})
