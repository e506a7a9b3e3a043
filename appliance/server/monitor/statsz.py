"""The `statsz` document: what every server answers to `$SYS.REQ.SERVER.PING` (and `.STATSZ`), the
answers `nats server ls` (and `appliance server ls`) tabulate. Fields as nats-server 2.15.1's
ServerStats (seen live): start, mem, cores, cpu, connections, total_connections, active_accounts,
subscriptions, sent/received (+ the clients-only pairs), slow_consumers, routes (one entry per route
with rid, name, sent, received, pending), active_servers, gomaxprocs."""

from __future__ import annotations

from appliance.durations import rfc3339_nano, wall_ns
from .gojson import JsonValue
from .view import ServerView


def _pair(msgs: int, size: int) -> dict[str, JsonValue]:
    return {"msgs": msgs, "bytes": size}


def statsz_json(view: ServerView) -> dict[str, JsonValue]:
    counters = view.counters()
    usage = view.process_usage()
    routes = view.routes()
    out: dict[str, JsonValue] = {
        "start": rfc3339_nano(wall_ns(view.start_wall_s)),
        "mem": usage.rss_bytes,
        "cores": usage.cores,
        "cpu": round(usage.cpu_percent),
        "connections": counters.connections,
        "total_connections": counters.total_connections,
        "active_accounts": 1,
        "subscriptions": counters.subscriptions,
        "sent": _pair(counters.out_msgs + sum(r.out_msgs for r in routes),
                      counters.out_bytes + sum(r.out_bytes for r in routes)),
        "sent_to_clients": _pair(counters.out_client_msgs, counters.out_client_bytes),
        "received": _pair(counters.in_msgs + sum(r.in_msgs for r in routes),
                          counters.in_bytes + sum(r.in_bytes for r in routes)),
        "received_from_clients": _pair(counters.in_client_msgs, counters.in_client_bytes),
        "slow_consumers": counters.slow_consumers,
    }
    if routes:
        out["routes"] = [{"rid": r.rid, "name": r.remote_name, "sent": _pair(r.out_msgs, r.out_bytes),
                          "received": _pair(r.in_msgs, r.in_bytes), "pending": r.pending_size} for r in routes]
    out["active_servers"] = 1 + len({r.remote_id for r in routes})
    out["gomaxprocs"] = usage.max_procs
    return out
