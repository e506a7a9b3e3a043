"""What operators do to a running cluster, as chaos faults (appliance/testing/chaos.py): a leader
step-down of the stream, of its consumer or of the meta group, and a peer-remove of one of the
stream's servers, each on a real cluster under load and timed.

- A step-down asks the group's leader to hand over (`$JS.API.STREAM.LEADER.STEPDOWN.<s>`,
  `$JS.API.CONSUMER.LEADER.STEPDOWN.<s>.<c>`, `$JS.API.META.LEADER.STEPDOWN` as the system
  account's user) and polls until another server answers as the leader: STREAM.INFO and
  CONSUMER.INFO are answered by the asset's leader, `$SYS.REQ.SERVER.PING.JSZ {"leader_only":
  true}` by the meta leader. Its time runs from the request to that answer. A refused request
  (no leader yet after an earlier fault, no peer seen lately) or an accepted one after which the
  same leader still leads NEW_LEADER_S later is asked again, up to STEPDOWN_TIMEOUT_S; then the
  run fails, naming what it saw last.
- A peer-remove (`$JS.API.STREAM.PEER.REMOVE.<s> {"peer": name}`) takes one of the stream's
  servers (the fault's victim indexes its peers, the leader first) out of the stream's group and
  waits until STREAM.INFO no longer lists it. With a spare server (5 nodes) the meta leader places
  a replacement, which catches up; on 3 nodes the stream goes on under-replicated. After the
  fault's hold the removed server restarts (a graceful stop, then start on its store): a server
  PEER.REMOVE took off a stream is placed on it again only once it restarted. The fault ends when
  the stream and its consumer have every replica current again (REGAIN_TIMEOUT_S, or the run
  fails): `regained_s` runs from the request with a spare, from the restart without one.

The chaos cluster needs a system account user for the meta step-down: `ACCOUNTS_CONF` gives it
one (`sys`), and the workload's account `APP` (JetStream enabled) a user `app` that every client
without credentials is (`no_auth_user`), so the load's connections need no credentials.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass

from appliance.bench import jsapi, replicas, servers
from appliance.bench.conn import Connection, Endpoint
from appliance.bench.failover import FailoverFailed
from appliance.errors import ApplianceError
from appliance.testing import chaos_plan

ACCOUNTS_CONF = """
accounts {
  SYS: { users: [ { user: sys, password: sys } ] }
  APP: { jetstream: enabled, users: [ { user: app, password: app } ] }
}
system_account: SYS
no_auth_user: app
"""
SYS_USER = ("sys", "sys")
CONNECT_TIMEOUT_S = 2.0
API_TIMEOUT_S = 2.0
POLL_ANSWER_S = 0.1  # while waiting for the new leader: a poll unanswered this long is sent again
# (no server answers PING.JSZ leader_only between the old leader's step-down and the election: a
# poll that waited API_TIMEOUT_S for it measured 2 s where the new leader answered in 50 ms); a
# step-down's time can so be up to this much late
POLL_S = 0.02
NEW_LEADER_S = 10.0  # an accepted step-down whose leader still leads this long after is asked again
STEPDOWN_TIMEOUT_S = 45.0
REMOVED_TIMEOUT_S = 30.0  # PEER.REMOVE asked, and the stream's group without the peer, within this
REGAIN_TIMEOUT_S = 90.0
FAILURES = (FailoverFailed, replicas.NotHealthy, servers.ServerStartFailed, OSError, TimeoutError,
            ApplianceError)


@dataclass(frozen=True, slots=True)
class StepDown:
    old: str  # the leader asked to step down
    new: str  # the server that answered as leader next
    seconds: float  # from the (last) request to the new leader's answer
    attempts: int  # requests it took


@dataclass(frozen=True, slots=True)
class PeerRemoval:
    peer: str  # the server taken off the stream
    was_leader: bool
    removed_s: float  # from the request to STREAM.INFO without the peer
    regained_s: float  # to every replica current again: from the request with a spare server,
    # from the removed server's restart without one


def live(server: servers.RunningServer) -> list[int]:
    """Indexes of the nodes whose process runs."""
    return [i for i, node in enumerate(server.nodes) if node.proc.poll() is None]


def live_url(server: servers.RunningServer) -> str:
    up = live(server)
    if not up:
        raise FailoverFailed("no server is running")
    return server.urls[up[0]]


def connect(server: servers.RunningServer, name: str, *, system: bool = False) -> Connection:
    """A connection to the first live node that answers (as the system account's user with
    `system`)."""
    last = "no server is running"
    for index in live(server):
        endpoint = Endpoint.parse(server.urls[index])
        if system:
            endpoint = Endpoint(endpoint.host, endpoint.port, *SYS_USER)
        try:
            return Connection(endpoint, name=name, timeout_s=CONNECT_TIMEOUT_S)
        except FAILURES as exc:
            last = f"{type(exc).__name__}: {exc}"
    raise FailoverFailed(f"no server took a connection ({last})")


def _leader(info: dict[str, object]) -> str:
    cluster = info.get("cluster")
    leader = cluster.get("leader") if isinstance(cluster, dict) else None
    return leader if isinstance(leader, str) else ""


def meta_leader(conn: Connection, timeout_s: float = API_TIMEOUT_S) -> str:
    """The meta leader's name as it answers `$SYS.REQ.SERVER.PING.JSZ` itself ("" if none does)."""
    msg = conn.request(b"$SYS.REQ.SERVER.PING.JSZ", b'{"leader_only":true}', timeout_s)
    data = json.loads(msg.payload or b"{}").get("data")
    meta = data.get("meta_cluster") if isinstance(data, dict) else None
    leader = meta.get("leader") if isinstance(meta, dict) else None
    return leader if isinstance(leader, str) else ""


def _group_leader(conn: Connection, kind: str, stream: str, consumer: str,
                  timeout_s: float = API_TIMEOUT_S) -> str:
    """The current leader of the group a step-down of `kind` moves ("" when none answers)."""
    try:
        if kind == chaos_plan.STEPDOWN_META:
            return meta_leader(conn, timeout_s)
        subject = (f"$JS.API.STREAM.INFO.{stream}" if kind == chaos_plan.STEPDOWN_STREAM
                   else f"$JS.API.CONSUMER.INFO.{stream}.{consumer}")
        return _leader(jsapi.call(conn, subject, None, timeout_s=timeout_s))
    except (jsapi.ApiError, TimeoutError, ValueError):
        return ""


def stepdown_subject(kind: str, stream: str, consumer: str) -> str:
    if kind == chaos_plan.STEPDOWN_STREAM:
        return f"$JS.API.STREAM.LEADER.STEPDOWN.{stream}"
    if kind == chaos_plan.STEPDOWN_CONSUMER:
        return f"$JS.API.CONSUMER.LEADER.STEPDOWN.{stream}.{consumer}"
    if kind == chaos_plan.STEPDOWN_META:
        return "$JS.API.META.LEADER.STEPDOWN"
    raise ValueError(f"not a step-down: {kind}")


def step_down(server: servers.RunningServer, kind: str, stream: str, consumer: str) -> StepDown:
    """Ask the leader of the stream's, the consumer's or the meta group to step down; until
    another server answers as its leader (module doc)."""
    subject = stepdown_subject(kind, stream, consumer)
    deadline = time.monotonic() + STEPDOWN_TIMEOUT_S
    attempts = 0
    last = "no leader named"
    while time.monotonic() < deadline:
        try:
            conn = connect(server, f"chaos-{kind}", system=kind == chaos_plan.STEPDOWN_META)
        except FAILURES as exc:
            last = f"{type(exc).__name__}: {exc}"
            time.sleep(POLL_S * 5)
            continue
        try:
            old = _group_leader(conn, kind, stream, consumer)
            if not old:
                last = "no leader named"
                time.sleep(POLL_S * 5)
                continue
            attempts += 1
            sent = time.monotonic()
            jsapi.call(conn, subject, None, timeout_s=API_TIMEOUT_S)
            while (now := time.monotonic()) < min(deadline, sent + NEW_LEADER_S):
                new = _group_leader(conn, kind, stream, consumer, POLL_ANSWER_S)
                if new and new != old:
                    return StepDown(old, new, time.monotonic() - sent, attempts)
                time.sleep(POLL_S)
            last = f"{old} still led {now - sent:.1f}s after its step-down was accepted"
        except FAILURES as exc:
            last = f"{type(exc).__name__}: {exc}"
            time.sleep(POLL_S * 5)
        finally:
            conn.close()
    raise FailoverFailed(f"{kind}: no new leader within {STEPDOWN_TIMEOUT_S:g}s "
                         f"({attempts} requests; {last})")


def stream_peers(info: dict[str, object]) -> list[str]:
    """The stream's servers, its leader first, then the others by name (a seed's victim index
    means the same role whatever order STREAM.INFO lists the replicas in)."""
    group = replicas.group_of(info)
    return [group[0], *sorted(group[1:])] if group else []


def peer_remove(server: servers.RunningServer, fault: chaos_plan.Fault, stream: str, consumer: str,
                wanted_replicas: int, log: Callable[[str], None]) -> PeerRemoval:
    """Remove one of the stream's peers, restart it after the fault's hold, and wait until the
    stream and its consumer have every replica again (module doc)."""
    conn = connect(server, "chaos-peer-remove")
    try:
        peers = _peers_under_a_leader(conn, stream)
        victim = peers[fault.victim % len(peers)]
        log(f"  {fault.describe()} -> {victim} (of {', '.join(peers)})")
        sent = time.monotonic()
        _request_removal(conn, stream, victim)
        _wait_removed(conn, stream, victim)
        removed_s = time.monotonic() - sent
        index = server.index_of(victim)
        if index is None:
            raise FailoverFailed(f"peer-remove: {victim} is none of our servers")
        spare = len(server.nodes) > wanted_replicas
        regained_s = 0.0
        if spare:  # a replacement was placed: it catches up while the removed server is still out
            _wait_all_current(conn, stream, consumer, wanted_replicas)
            regained_s = time.monotonic() - sent
        time.sleep(fault.hold_s)
    finally:
        conn.close()
    server.terminate(index)
    server.restart(index, servers.START_TIMEOUT_S * 3)
    restarted = time.monotonic()
    conn = connect(server, "chaos-peer-remove")
    try:
        _wait_all_current(conn, stream, consumer, wanted_replicas)
    finally:
        conn.close()
    if not spare:
        regained_s = time.monotonic() - restarted
    return PeerRemoval(victim, victim == peers[0], removed_s, regained_s)


def _peers_under_a_leader(conn: Connection, stream: str) -> list[str]:
    deadline = time.monotonic() + REMOVED_TIMEOUT_S
    last = "no answer"
    while time.monotonic() < deadline:
        try:
            info = jsapi.call(conn, f"$JS.API.STREAM.INFO.{stream}", None, timeout_s=API_TIMEOUT_S)
            if _leader(info):
                return stream_peers(info)
            last = "no leader"
        except (jsapi.ApiError, TimeoutError) as exc:
            last = f"{type(exc).__name__}: {exc}"
        time.sleep(POLL_S * 5)
    raise FailoverFailed(f"peer-remove: the stream had no leader within {REMOVED_TIMEOUT_S:g}s ({last})")


def _request_removal(conn: Connection, stream: str, victim: str) -> None:
    """PEER.REMOVE until the meta leader accepts it (none may be elected yet after an earlier fault)."""
    deadline = time.monotonic() + REMOVED_TIMEOUT_S
    body: dict[str, object] = {"peer": victim}
    while True:
        try:
            jsapi.call(conn, f"$JS.API.STREAM.PEER.REMOVE.{stream}", body, timeout_s=API_TIMEOUT_S)
            return
        except (jsapi.ApiError, TimeoutError) as exc:
            if time.monotonic() >= deadline:
                raise FailoverFailed(f"peer-remove of {victim} not accepted within "
                                     f"{REMOVED_TIMEOUT_S:g}s: {exc}") from None
            time.sleep(POLL_S * 10)


def _wait_removed(conn: Connection, stream: str, victim: str) -> None:
    deadline = time.monotonic() + REMOVED_TIMEOUT_S
    last: list[str] = []
    while time.monotonic() < deadline:
        try:
            info = jsapi.call(conn, f"$JS.API.STREAM.INFO.{stream}", None, timeout_s=API_TIMEOUT_S)
            last = stream_peers(info)
            if last and _leader(info) and victim not in last:
                return
        except (jsapi.ApiError, TimeoutError):
            pass
        time.sleep(POLL_S * 2)
    raise FailoverFailed(f"peer-remove: {victim} still among the stream's peers {last} "
                         f"after {REMOVED_TIMEOUT_S:g}s")


def _wait_all_current(conn: Connection, stream: str, consumer: str, wanted: int) -> None:
    replicas.wait_healthy(conn, stream, wanted, timeout_s=REGAIN_TIMEOUT_S, api_timeout_s=API_TIMEOUT_S)
    replicas.wait_healthy(conn, stream, wanted, consumer=consumer, timeout_s=REGAIN_TIMEOUT_S,
                          api_timeout_s=API_TIMEOUT_S)
