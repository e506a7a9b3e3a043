"""Replicated streams for the bench: when an R3 stream (or consumer) is ready, who leads it, and
where a client goes.

A stream with replicas > 1 is ready for a measured run once STREAM.INFO names a leader and lists
every other replica as current (`cluster.leader`, `cluster.replicas[].current`, as nats-server
reports them): before that a publish may wait for an election or a catch-up, and the run would
measure that instead. The leader's server name maps to one of our nodes; "client on the leader"
connects there, "client on a follower" to another node of the stream's group.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Literal

from appliance.bench import jsapi
from appliance.bench.conn import Connection

ClientOn = Literal["leader", "follower"]
HEALTHY_TIMEOUT_S = 30.0
POLL_S = 0.05


class NotHealthy(Exception):
    """A replicated stream did not get a leader with every replica current in time; says what was missing."""


def health(info: dict[str, object], replicas: int) -> tuple[str | None, str]:
    """(leader's server name or None, what is missing: '' when ready) of a STREAM.INFO response."""
    cluster = info.get("cluster")
    leader = cluster.get("leader") if isinstance(cluster, dict) else None
    leader = leader if isinstance(leader, str) and leader else None
    if replicas <= 1:
        return leader, ""  # a single copy: its server answered the info, nothing to wait for
    if not isinstance(cluster, dict):
        return None, "no cluster information in STREAM.INFO"
    if leader is None:
        return None, "no leader"
    peers = cluster.get("replicas")
    peers = peers if isinstance(peers, list) else []
    if len(peers) < replicas - 1:
        return leader, f"{len(peers)} of {replicas - 1} replicas besides the leader {leader}"
    behind = [str(p.get("name", "?")) for p in peers if isinstance(p, dict) and p.get("current") is not True]
    if behind:
        return leader, f"replicas not current: {', '.join(behind)}"
    return leader, ""


def group_of(info: dict[str, object]) -> tuple[str, ...]:
    """The server names of a stream's group: the leader first, then the other replicas."""
    cluster = info.get("cluster")
    if not isinstance(cluster, dict):
        return ()
    leader = cluster.get("leader")
    peers = cluster.get("replicas")
    names = [leader] if isinstance(leader, str) and leader else []
    if isinstance(peers, list):
        names += [p["name"] for p in peers if isinstance(p, dict) and isinstance(p.get("name"), str)]
    return tuple(names)


def wait_healthy(conn: Connection, stream: str, replicas: int, *, consumer: str = "",
                 timeout_s: float = HEALTHY_TIMEOUT_S, api_timeout_s: float = 2.0) -> dict[str, object]:
    """Poll STREAM.INFO (CONSUMER.INFO with `consumer`) until it names a leader and every replica
    is current; its last answer. A request that times out or an API error (no leader yet) is
    polled again until the deadline; then NotHealthy says what was missing last."""
    subject, what = f"$JS.API.STREAM.INFO.{stream}", f"stream {stream}"
    if consumer:
        subject, what = f"$JS.API.CONSUMER.INFO.{stream}.{consumer}", f"consumer {stream} > {consumer}"
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    while True:
        try:
            info = jsapi.call(conn, subject, None, timeout_s=api_timeout_s)
            _, last = health(info, replicas)
            if not last:
                return info
        except (jsapi.ApiError, TimeoutError) as exc:
            last = f"{type(exc).__name__}: {exc}"
        if time.monotonic() >= deadline:
            raise NotHealthy(f"{what} R{replicas} not healthy after {timeout_s:g}s: {last}")
        time.sleep(POLL_S)


def node_for(names: Sequence[str], group: Sequence[str], client_on: ClientOn) -> int:
    """Index (into `names`, our nodes' server names) of the node a client connects to: the stream
    leader's (group[0]), or the first other member of the group that is one of our nodes."""
    if not group:
        raise NotHealthy("the stream has no leader")
    wanted = [group[0]] if client_on == "leader" else list(group[1:])
    for name in wanted:
        if name in names:
            return list(names).index(name)
    raise NotHealthy(f"no node of ours is the stream's {client_on} "
                     f"(group {list(group)}, nodes {list(names)})")
