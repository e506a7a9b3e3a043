"""Failover of an R3 stream: time from `kill -9` of the stream's leader to the first PubAck.

Theory of operation, per kill: the stream is healthy (a leader, every replica current); a client
connects to a follower's node (which stays up), publishes MSGS_AROUND_KILL acknowledged messages,
then the leader's node is killed (SIGKILL to its process group) and the clock starts. The client
publishes one message again and again, each attempt waiting ATTEMPT_TIMEOUT_S for its PubAck
(an immediate refusal, 503 no responders or an API error while there is no leader, is tried again
after RETRY_PAUSE_S); the first PubAck stops the clock. It publishes MSGS_AROUND_KILL more, the
killed node is started again on its ports and store, and the next kill waits until the stream is
healthy again.

Every message carries a unique Nats-Msg-Id, and a retry reuses its message's id: the stream's
duplicate window makes a retry of a message that was stored after all a duplicate, not a second
copy. At the end every stored message is read back (STREAM.MSG.GET by sequence): an id acked but
not stored is lost, an id stored twice is duplicated; both must be empty.
"""

from __future__ import annotations

import base64
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from appliance.bench import jsapi, replicas, wire
from appliance.bench.conn import Connection, Endpoint
from appliance.bench.servers import RunningServer, ServerStartFailed
from appliance.bench.stats import percentile_rank
from appliance.errors import ApplianceError

STREAM = "benchfailover"
SUBJECT = "bench.failover"
ATTEMPT_TIMEOUT_S = 0.1  # one publish attempt's wait for its PubAck before it is sent again
RETRY_PAUSE_S = 0.01  # after an immediate refusal, before the next attempt
ACK_DEADLINE_S = 60.0  # no PubAck this long after a kill: the failover failed
HEALTHY_AGAIN_S = 60.0  # the killed node back and the stream healthy again within this
MSGS_AROUND_KILL = 20  # acknowledged publishes before and after each kill
MSG_ID = "Nats-Msg-Id"
LIST_MAX = 10  # lost / duplicated ids kept for the report
Log = Callable[[str], None]


class FailoverFailed(Exception):
    """A kill without a PubAck in time, or a stream that did not become healthy again."""


FAILURES = (FailoverFailed, replicas.NotHealthy, ServerStartFailed, OSError, TimeoutError, ApplianceError)


@dataclass(slots=True)
class FailoverResult:
    seconds: list[float] = field(default_factory=list)  # per kill: SIGKILL to the first PubAck
    attempts: list[int] = field(default_factory=list)  # publish attempts until that PubAck
    acked: int = 0  # distinct message ids acknowledged
    stored: int = 0  # messages in the stream at the end
    lost: int = 0  # ids acked but not stored
    duplicated: int = 0  # ids stored more than once
    unacked: int = 0  # stored messages whose id was never acked (allowed: a publish given up on)
    examples: list[str] = field(default_factory=list)  # the first lost / duplicated ids, for the report
    checked: bool = False  # the stream was read back and compared
    failure: str = ""

    def p50_s(self) -> float | None:
        return self._percentile(50)

    def p99_s(self) -> float | None:
        return self._percentile(99)

    def _percentile(self, q: float) -> float | None:
        """Nearest rank (stats.percentile_rank): always one of the measured times."""
        ordered = sorted(self.seconds)
        return ordered[percentile_rank(q, len(ordered))] if ordered else None


def delivery_check(acked: Iterable[str], stored: Sequence[str]) -> tuple[list[str], list[str]]:
    """(lost, duplicated): ids acknowledged but not stored, ids stored more than once; sorted."""
    counts = Counter(stored)
    return sorted(set(acked) - set(counts)), sorted(msg_id for msg_id, n in counts.items() if n > 1)


def header_value(block: bytes, name: str) -> str | None:
    """A header's first value in a `NATS/1.0` header block (names compare case-insensitively)."""
    wanted = name.lower()
    for line in block.split(b"\r\n")[1:]:
        key, sep, value = line.partition(b":")
        if sep and key.strip().decode("utf-8", "replace").lower() == wanted:
            return value.strip().decode("utf-8", "replace")
    return None


def stored_msg_id(response: dict[str, object]) -> str | None:
    """The Nats-Msg-Id of a STREAM.MSG.GET response (`message.hdrs` is base64), None without one."""
    message = response.get("message")
    hdrs = message.get("hdrs") if isinstance(message, dict) else None
    return header_value(base64.b64decode(hdrs), MSG_ID) if isinstance(hdrs, str) else None


def publish_until_acked(conn: Connection, subject: str, msg_id: str, payload: bytes, *, deadline: float,
                        attempt_timeout_s: float = ATTEMPT_TIMEOUT_S) -> tuple[jsapi.PubAck, int]:
    """Publish with Nats-Msg-Id until a PubAck for this id arrives: (the ack, attempts). An ack of
    any attempt counts (each has its own reply subject under the id); late acks of earlier ids are
    skipped. Raises FailoverFailed at `deadline`."""
    conn.ensure_inbox()
    mine = conn.inbox_prefix + b".%s_" % msg_id.encode()
    attempts = 0
    last = "no attempt"
    while time.monotonic() < deadline:
        attempts += 1
        conn.send(wire.hpub(subject.encode(), {MSG_ID: msg_id}, payload, mine + b"%d" % attempts))
        until = min(deadline, time.monotonic() + attempt_timeout_s)
        while (remaining := until - time.monotonic()) > 0:
            try:
                msg = conn.next_msg(remaining)
            except TimeoutError:
                last = f"no PubAck within {attempt_timeout_s:g}s"
                break
            if not msg.subject.startswith(mine):
                continue
            if msg.status is not None:
                last = f"status {msg.status} {msg.description}".strip()
            else:
                try:
                    return jsapi.parse_pub_ack(msg.payload), attempts
                except jsapi.ApiError as exc:
                    last = str(exc)
            time.sleep(RETRY_PAUSE_S)  # refused at once (no leader yet): pace the next attempt
            break
    raise FailoverFailed(f"no PubAck for {msg_id} after {attempts} attempts (last: {last})")


def run_failover(server: RunningServer, kills: int, *, log: Log = print) -> FailoverResult:
    """`kills` rounds of kill -9 of the stream leader on a running 3-node cluster (see module doc)."""
    result = FailoverResult()
    if len(server.nodes) < 3:
        result.failure = f"failed: failover needs a 3-node cluster, not {len(server.nodes)} node(s)"
        return result
    acked: set[str] = set()
    names = [node.name for node in server.nodes]
    try:
        setup = Connection(Endpoint.parse(server.url), name="bench-failover-setup")
        try:
            jsapi.delete_stream(setup, STREAM)
            jsapi.create_stream(setup, jsapi.stream_config(STREAM, [SUBJECT], storage="file", replicas=3))
        finally:
            setup.close()
        for round_number in range(1, kills + 1):
            _one_kill(server, names, round_number, result, acked, log)
    except FAILURES as exc:
        result.failure = failure_text(exc)
        log(f"failover {server.kind.name}: {result.failure}")
        if not acked:
            return result  # nothing was acknowledged: nothing to look for in the stream
    result.acked = len(acked)
    try:
        _check_stored(server, acked, result)
    except FAILURES as exc:
        result.failure = result.failure or failure_text(exc, "stream not read back: ")
    return result


def failure_text(exc: BaseException, what: str = "") -> str:
    return f"failed: {what}{type(exc).__name__}: {exc}".replace("\n", " ")[:300]


def _healthy_info(server: RunningServer, timeout_s: float) -> dict[str, object]:
    """STREAM.INFO once the stream is healthy, asked on any live node."""
    for index, node in enumerate(server.nodes):
        if node.proc.poll() is None:
            conn = Connection(Endpoint.parse(server.urls[index]), name="bench-failover-info")
            try:
                return replicas.wait_healthy(conn, STREAM, 3, timeout_s=timeout_s)
            finally:
                conn.close()
    raise FailoverFailed("no node is running")


def _one_kill(server: RunningServer, names: list[str], round_number: int, result: FailoverResult,
              acked: set[str], log: Log) -> None:
    group = replicas.group_of(_healthy_info(server, HEALTHY_AGAIN_S))
    leader = replicas.node_for(names, group, "leader")
    client = Connection(Endpoint.parse(server.urls[replicas.node_for(names, group, "follower")]),
                        name="bench-failover", timeout_s=ACK_DEADLINE_S)
    payload = b"x" * 128

    def publish(msg_id: str) -> int:
        """Publish one message until acked (within ACK_DEADLINE_S); the attempts it took."""
        _, attempts = publish_until_acked(client, SUBJECT, msg_id, payload,
                                          deadline=time.monotonic() + ACK_DEADLINE_S)
        acked.add(msg_id)
        return attempts

    try:
        for i in range(MSGS_AROUND_KILL):
            publish(f"k{round_number}b{i}")
        started = time.perf_counter()
        server.kill9(leader)
        attempts = publish(f"k{round_number}f")
        seconds = time.perf_counter() - started
        result.seconds.append(seconds)
        result.attempts.append(attempts)
        log(f"failover {server.kind.name} kill {round_number}: {names[leader]} killed, PubAck after "
            f"{seconds * 1e3:,.0f} ms ({attempts} attempts)")
        for i in range(MSGS_AROUND_KILL):
            publish(f"k{round_number}a{i}")
    finally:
        client.close()
        if server.nodes[leader].proc.poll() is not None:
            server.restart(leader)
    _healthy_info(server, HEALTHY_AGAIN_S)


def _check_stored(server: RunningServer, acked: set[str], result: FailoverResult) -> None:
    """Read every stored message's id back and compare with the acknowledged ones."""
    info = _healthy_info(server, HEALTHY_AGAIN_S)
    state = info.get("state")
    first = state.get("first_seq") if isinstance(state, dict) else None
    last = state.get("last_seq") if isinstance(state, dict) else None
    if not isinstance(first, int) or not isinstance(last, int):
        raise FailoverFailed(f"STREAM.INFO without state.first_seq/last_seq: {state!r:.200}")
    stored: list[str] = []
    conn = Connection(Endpoint.parse(server.url), name="bench-failover-check")
    try:
        for seq in range(max(1, first), last + 1):
            try:  # asked again while the stream's group elects (a restarted node rejoining)
                response = jsapi.until_available(
                    lambda seq=seq: jsapi.call(conn, f"$JS.API.STREAM.MSG.GET.{STREAM}", {"seq": seq}))
            except jsapi.ApiError as exc:
                if exc.err_code == jsapi.ERR_NO_MESSAGE_FOUND:
                    continue
                raise
            msg_id = stored_msg_id(response)
            stored.append(msg_id if msg_id is not None else f"(no id at seq {seq})")
        jsapi.delete_stream(conn, STREAM)
    finally:
        conn.close()
    lost, duplicated = delivery_check(acked, stored)
    result.stored, result.lost, result.duplicated = len(stored), len(lost), len(duplicated)
    result.unacked = len(set(stored) - acked)
    result.examples = ([f"lost {x}" for x in lost[:LIST_MAX]]
                       + [f"duplicated {x}" for x in duplicated[:LIST_MAX]])
    result.checked = True
