"""Seeded faults against a real cluster of `appliance run` processes under a synchronous-publish
workload, then the verdict: every acknowledged message stored exactly once on every replica, the
replicas identical, the consumer's ack floor never ahead of what it was delivered nor behind the
acks the server confirmed (AckSync).

One run (`run_chaos`):
1. start `nodes` servers (appliance/bench/servers.py: own process groups, free ports, temp dir);
   create an R3 file stream with a durable pull consumer (R3, explicit acks) and wait until both
   have a leader with every replica current;
2. `publishers` threads publish synchronously, each message with its own Nats-Msg-Id, retrying the
   same id (on the same or another server) until its PubAck comes: an acknowledged id is one the
   cluster promised to keep. One consumer thread pulls one message at a time and acks it (AckSync);
3. the seed's faults (chaos_plan.plan) fire one after another: kill -9 or SIGSTOP of the stream
   leader or of another server, a graceful restart, or kill -9 of every server at once; each is
   healed (SIGCONT, start again on its store) after its hold time, then load runs for the next gap.
   A route partition cuts the leader or another server off from the rest (route_faults.py: a run
   with partitions in its plan has every route go through our proxies) until its hold time ends.
   An operator's fault (chaos_ops.py) is a leader step-down of the stream, the consumer or the
   meta group (timed: request to the new leader's answer), or a peer-remove of one of the
   stream's servers, restarted after its hold so the stream regains its replicas (timed too).
   The cluster has a system account for the meta step-down; the load runs in account APP.
   A power loss kills every server, then drops every write each did not fsync: a run with one in
   its plan starts its servers with APPLIANCE_FAULT_FS (appliance/store/powerloss.py journals
   what each fsync made durable), and the cut puts every file back to that (an odd victim also
   leaves half of each file's unsynced tail, a torn write) before the servers start again;
4. heal: every server running, stream and consumer healthy; the workload stops; CONSUMER.INFO's
   ack floor is read; every server is stopped gracefully and each one's copy of the stream is read
   from its store directory (as `appliance store inspect --dump` does) and judged
   (chaos_plan.judge).

A run keeps its directory (configs, logs, stores) when its verdict is not clean or it failed, and
says where; otherwise the directory is removed.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from appliance.bench import jsapi, replicas, servers, wire
from appliance.bench.conn import Connection, Endpoint
from appliance.bench.failover import MSG_ID, FailoverFailed, header_value, publish_until_acked
from appliance.store import inspect as store_inspect
from appliance.testing import chaos_ops, chaos_plan
from appliance.testing.chaos_ops import PeerRemoval, live, live_url
from appliance.testing.chaos_plan import Fault, Record, Verdict
from appliance.testing.route_faults import Partitions

STREAM = "CHAOS"
SUBJECT = "chaos.m"
CONSUMER = "C"
REPLICAS = 3
PAYLOAD = b"c" * 64
CONNECT_TIMEOUT_S = 2.0  # a paused server takes the connection but never answers INFO
ID_WINDOW_S = 5.0  # one id tried on one server this long, then on the next one
ATTEMPT_TIMEOUT_S = 0.25  # a publish attempt waits this long for its PubAck before it is sent again
LEADER_TIMEOUT_S = 30.0  # a fault aimed at the leader waits this long for one to be named
HEAL_TIMEOUT_S = 90.0  # after the last fault: stream and consumer healthy again within this
DRAIN_S = 10.0  # the consumer's time to catch up with the stream after the load stopped
API_TIMEOUT_S = 2.0
START_TIMEOUT_S = 90.0
FAILURES = chaos_ops.FAILURES
Log = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class ChaosOptions:
    seed: int
    nodes: int = 3
    faults: int = 6
    kinds: tuple[str, ...] = chaos_plan.FAULT_KINDS
    publishers: int = 2
    workers: int = 1  # worker processes per server
    keep: bool = False  # keep the run's directory (configs, logs, stores) even when it is clean


@dataclass(slots=True)
class RunResult:
    seed: int
    verdict: Verdict = field(default_factory=Verdict)
    faults: list[Fault] = field(default_factory=list)  # the faults that fired
    unacked: int = 0  # ids given up on when the load stopped (neither promised nor counted)
    delivered: int = 0  # messages the consumer received
    failure: str = ""  # the run could not finish (a server that did not start, no leader, ...)
    kept: str = ""  # its directory, kept for a look at the logs
    failovers: list[float] = field(default_factory=list)  # per leader kill: seconds to the first PubAck of a
    # publish begun after it (chaos_plan.failover_times)
    stepdowns: dict[str, list[float]] = field(default_factory=dict)  # per step-down kind: seconds from
    # the request to the new leader's answer (chaos_ops.step_down)
    peer_removals: list[PeerRemoval] = field(default_factory=list)
    power_cuts: list[int] = field(default_factory=list)  # per power loss: files its cut put back (all servers)

    @property
    def clean(self) -> bool:
        return self.verdict.clean and not self.failure


class Workload:
    """The publishers and the consumer, in threads, against whichever servers are up."""

    def __init__(self, server: servers.RunningServer, publishers: int) -> None:
        self.server = server
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.acked: set[str] = set()
        self.unacked = 0
        self.delivered: set[int] = set()
        self.confirmed: set[int] = set()  # stream sequences whose AckSync the server answered
        self.ack_times: list[tuple[float, float]] = []  # per acked id: (its first attempt, its PubAck)
        self.bad_deliveries: list[str] = []  # deliveries a client cannot take as they came (left unacked)
        self.threads = [threading.Thread(target=self._publish, args=(i,), name=f"chaos-pub-{i}", daemon=True)
                        for i in range(publishers)]
        self.threads.append(threading.Thread(target=self._consume, name="chaos-consumer", daemon=True))

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def finish(self) -> None:
        self.stop.set()
        for thread in self.threads:
            if thread.ident is not None:  # a run whose setup failed never started them
                thread.join(ID_WINDOW_S * 3)

    def _connect(self, start: int, name: str) -> tuple[Connection, int]:
        """A connection to the first server from `start` on that is up and answers."""
        count = len(self.server.nodes)
        while not self.stop.is_set():
            for step in range(count):
                index = (start + step) % count
                if self.server.nodes[index].proc.poll() is not None:
                    continue
                try:
                    conn = Connection(Endpoint.parse(self.server.urls[index]), name=name,
                                      timeout_s=CONNECT_TIMEOUT_S)
                    conn.timeout_s = ID_WINDOW_S
                    return conn, index
                except FAILURES:
                    continue
            time.sleep(0.1)
        raise FailoverFailed("stopped")

    def _publish(self, number: int) -> None:
        conn: Connection | None = None
        where = number
        sent = 0
        try:
            while not self.stop.is_set():
                msg_id = f"p{number}-{sent}"
                began = time.monotonic()
                while True:
                    if self.stop.is_set():
                        with self.lock:
                            self.unacked += 1
                        return
                    try:
                        if conn is None:
                            conn, where = self._connect(where, f"chaos-pub-{number}")
                        publish_until_acked(conn, SUBJECT, msg_id, PAYLOAD,
                                            deadline=time.monotonic() + ID_WINDOW_S,
                                            attempt_timeout_s=ATTEMPT_TIMEOUT_S)
                        break
                    except FAILURES:
                        if conn is not None:
                            conn.close()
                        conn, where = None, where + 1
                with self.lock:
                    self.acked.add(msg_id)
                    self.ack_times.append((began, time.monotonic()))
                sent += 1
        except FailoverFailed:
            return  # stopped while connecting
        finally:
            if conn is not None:
                conn.close()

    def _consume(self) -> None:
        conn: Connection | None = None
        where = 0
        next_subject = f"$JS.API.CONSUMER.MSG.NEXT.{STREAM}.{CONSUMER}".encode()
        pull = jsapi.pull_request(1, expires_ns=1_000_000_000)
        try:
            while not self.stop.is_set():
                try:
                    if conn is None:
                        conn, where = self._connect(where, "chaos-consumer")
                        conn.ensure_inbox()
                    self._pull_one(conn, next_subject, pull)
                except FAILURES:
                    if conn is not None:
                        conn.close()
                    conn, where = None, where + 1
        except FailoverFailed:
            return
        finally:
            if conn is not None:
                conn.close()

    def _pull_one(self, conn: Connection, next_subject: bytes, pull: bytes) -> None:
        """One pull request of one message; what arrives for it (or late, for an earlier one) is
        recorded as delivered and acked with AckSync (answered once the ack is replicated)."""
        inbox = conn.inbox_prefix + b".pull"
        conn.send(wire.pub(next_subject, pull, inbox))
        deadline = time.monotonic() + API_TIMEOUT_S
        while (remaining := deadline - time.monotonic()) > 0:
            msg = conn.next_msg(remaining)
            if msg.reply is not None and msg.reply.startswith(b"$JS.ACK."):
                try:
                    seq = delivery_seq(msg.subject, msg.reply)
                except ValueError as exc:
                    with self.lock:
                        self.bad_deliveries.append(str(exc))
                    return
                with self.lock:
                    self.delivered.add(seq)
                answer = conn.request(msg.reply, b"+ACK", API_TIMEOUT_S)
                if answer.status is None:
                    with self.lock:
                        self.confirmed.add(seq)
                return
            if msg.subject == inbox:
                return  # a status: 404/408 nothing now, 409/503 no consumer leader yet
        raise TimeoutError("pull request unanswered")


def delivery_seq(subject: bytes, reply: bytes) -> int:
    """The stream sequence of a consumer's delivery as a client receives it: the message's own
    subject and a well-formed ack subject; ValueError names what is wrong."""
    if subject != SUBJECT.encode():
        raise ValueError(f"delivery on subject {subject!r}, not {SUBJECT} (reply {reply!r})")
    return ack_stream_seq(reply.decode())


def ack_stream_seq(reply: str) -> int:
    """The stream sequence in a delivery's ack subject: `$JS.ACK.<stream>.<consumer>.<delivered>.
    <sseq>.<cseq>.<ts>.<pending>`, or the newer form with domain and account hash after `$JS.ACK`."""
    tokens = reply.split(".")
    numbers = tokens[4:9] if len(tokens) == 9 else tokens[6:11] if len(tokens) in (11, 12) else []
    if len(numbers) != 5 or not all(t.isdigit() for t in numbers):
        raise ValueError(f"not an ack subject: {reply!r}")
    return int(numbers[1])  # delivered count, stream seq, consumer seq, timestamp, pending


def run_chaos(options: ChaosOptions, *, log: Log = print) -> RunResult:
    result = RunResult(options.seed)
    faults = chaos_plan.plan(options.seed, options.faults, options.kinds)
    kind = servers.ServerKind("appliance chaos", "appliance", workers=options.workers,
                              extra_conf=chaos_ops.ACCOUNTS_CONF,
                              fault_fs=any(f.kind == chaos_plan.POWER_LOSS for f in faults))
    net = Partitions(options.nodes) if any(f.kind in chaos_plan.PARTITIONS for f in faults) else None
    try:
        server = servers.start(kind, nodes=options.nodes, timeout_s=START_TIMEOUT_S,
                               wiring=net.wiring if net is not None else None)
    except FAILURES as exc:
        result.failure = f"cluster did not start: {type(exc).__name__}: {exc}"
        if net is not None:
            net.close()
        return result
    try:
        workload, ack_floor = _under_faults(server, net, faults, options, result, log)
    finally:  # an interrupted run (Ctrl-C, SIGTERM) leaves no server behind either
        server.stop_nodes()
        if net is not None:
            net.close()
    copies = _read_copies(server)
    result.verdict = chaos_plan.judge(workload.acked, copies)
    if ack_floor is not None and copies:
        stored = [r.seq for r in next(iter(copies.values()))]
        ahead = chaos_plan.ack_floor_ahead(ack_floor, workload.delivered, stored)
        if ahead:
            result.verdict.ack_floor_ahead = 1
            result.verdict.examples.append(f"ack floor {ack_floor} covers undelivered seqs {ahead[:5]}")
        floor_min = chaos_plan.confirmed_floor(workload.confirmed, stored)
        if ack_floor < floor_min:
            result.verdict.acks_lost = 1
            result.verdict.examples.append(f"ack floor {ack_floor} behind confirmed acks up to {floor_min}")
    if result.clean and not options.keep:
        shutil.rmtree(server.workdir, ignore_errors=True)
    else:
        result.kept = str(server.workdir)
    return result


def _under_faults(server: servers.RunningServer, net: Partitions | None, faults: list[Fault],
                  options: ChaosOptions, result: RunResult, log: Log) -> tuple[Workload, int | None]:
    """The load and the faults, the heal, the consumer drained: (the load's record, the ack floor)."""
    workload = Workload(server, options.publishers)
    leader_kills: list[float] = []
    try:
        _setup(server)
        workload.start()
        for fault in faults:
            time.sleep(fault.gap_s)
            if fault.kind in chaos_plan.STEPDOWNS or fault.kind == chaos_plan.PEER_REMOVE:
                fired_at = _operate(server, fault, result, log)
            else:
                fired_at = _fire(server, net, fault, log, result)
            result.faults.append(fault)
            if fault.kind == chaos_plan.KILL_LEADER:
                leader_kills.append(fired_at)
        _heal(server, net)
        time.sleep(0.5)  # some load on the healed cluster
    except FAILURES as exc:
        result.failure = f"{type(exc).__name__}: {exc}".replace("\n", " ")[:300]
        log(f"chaos seed {options.seed}: {result.failure}")
        _heal_quietly(server, net)
    finally:
        workload.stop.set()
        workload.finish()
    result.unacked, result.delivered = workload.unacked, len(workload.delivered)
    if workload.bad_deliveries:
        result.failure = (f"{len(workload.bad_deliveries)} malformed deliveries to the consumer's client, "
                          f"first: {workload.bad_deliveries[0]}")
        log(f"chaos seed {options.seed}: {result.failure}")
    result.failovers = chaos_plan.failover_times(leader_kills, workload.ack_times)
    try:
        return workload, _drained_ack_floor(server, workload)
    except FAILURES as exc:
        result.failure = result.failure or f"consumer not read: {type(exc).__name__}: {exc}"[:300]
        return workload, None


def _setup(server: servers.RunningServer) -> None:
    conn = Connection(Endpoint.parse(server.url), name="chaos-setup")
    try:
        config = jsapi.stream_config(STREAM, [SUBJECT], storage="file", replicas=REPLICAS)
        jsapi.create_stream(conn, config)  # asked again while there is no meta leader
        replicas.wait_healthy(conn, STREAM, REPLICAS, timeout_s=HEAL_TIMEOUT_S)
        consumer = jsapi.consumer_config(CONSUMER, ack="explicit")
        jsapi.create_consumer(conn, STREAM, consumer)
        replicas.wait_healthy(conn, STREAM, REPLICAS, consumer=CONSUMER, timeout_s=HEAL_TIMEOUT_S)
    finally:
        conn.close()


def _stream_leader(server: servers.RunningServer, *, exclude: int = -1) -> int:
    """Index of the node that leads the stream now (asked on any live node but `exclude` until one
    names it)."""
    deadline = time.monotonic() + LEADER_TIMEOUT_S
    names = [node.name for node in server.nodes]
    last = "no answer"
    while time.monotonic() < deadline:
        for index in live(server):
            if index == exclude:
                continue
            try:
                conn = Connection(Endpoint.parse(server.urls[index]), name="chaos-leader",
                                  timeout_s=CONNECT_TIMEOUT_S)
            except FAILURES as exc:
                last = f"{type(exc).__name__}: {exc}"
                continue
            try:
                leader, _ = replicas.health(jsapi.stream_info(conn, STREAM), REPLICAS)
                if leader in names:
                    return names.index(leader)
                last = f"leader {leader!r}"
            except FAILURES as exc:
                last = f"{type(exc).__name__}: {exc}"
            finally:
                conn.close()
        time.sleep(0.1)
    raise FailoverFailed(f"no stream leader named within {LEADER_TIMEOUT_S:g}s ({last})")


def _fire(server: servers.RunningServer, net: Partitions | None, fault: Fault, log: Log,
          result: RunResult) -> float:
    """Fire one fault and heal it after its hold time; the moment it hit (time.monotonic)."""
    leader = _stream_leader(server)
    hit = time.monotonic()
    if fault.kind in (chaos_plan.KILL_ALL, chaos_plan.POWER_LOSS):
        log(f"  {fault.describe()} -> every server")
        for index in range(len(server.nodes)):
            server.kill9(index)
        if fault.kind == chaos_plan.POWER_LOSS:
            torn = fault.victim % 2 == 1
            changed = [server.power_cut(index, torn=torn) for index in range(len(server.nodes))]
            log(f"    power cut{' (torn writes)' if torn else ''}: files reverted per server {changed}")
            result.power_cuts.append(sum(changed))
        time.sleep(fault.hold_s)
        for index in range(len(server.nodes)):
            server.restart(index, START_TIMEOUT_S)
        return hit
    if fault.kind in (chaos_plan.KILL_LEADER, chaos_plan.PAUSE_LEADER):
        victim = leader
    else:
        others = [i for i in range(len(server.nodes)) if i != leader]
        victim = others[fault.victim % len(others)]
    name = server.nodes[victim].name
    log(f"  {fault.describe()} -> {name}")
    hit = time.monotonic()
    if fault.kind in chaos_plan.PARTITIONS:
        assert net is not None, "a run with partitions is wired through the proxies"
        net.isolate(victim)
        time.sleep(fault.hold_s)
        during = _stream_leader(server, exclude=victim)
        net.heal()
        log(f"    leader while {name} was cut off: {server.nodes[during].name}")
        return hit
    if fault.kind in (chaos_plan.PAUSE_LEADER, chaos_plan.PAUSE_OTHER):
        server.pause(victim)
        time.sleep(fault.hold_s)
        server.resume(victim)
        return hit
    if fault.kind == chaos_plan.RESTART:
        server.terminate(victim)
    else:
        server.kill9(victim)
    hit = time.monotonic()  # it is gone now (reaped): a publish begun from here on needs its successor
    time.sleep(fault.hold_s)
    server.restart(victim, START_TIMEOUT_S)
    return hit


def _operate(server: servers.RunningServer, fault: Fault, result: RunResult, log: Log) -> float:
    """A step-down or a peer-remove (chaos_ops.py), its timing kept in `result`; the moment it began."""
    began = time.monotonic()
    if fault.kind == chaos_plan.PEER_REMOVE:
        try:
            removal = chaos_ops.peer_remove(server, fault, STREAM, CONSUMER, REPLICAS, log)
        except FAILURES as exc:  # the run's failure names the fault it happened in
            raise FailoverFailed(f"{fault.describe()}: {type(exc).__name__}: {exc}") from exc
        result.peer_removals.append(removal)
        leader = " (the leader)" if removal.was_leader else ""
        log(f"    {removal.peer}{leader} out of the stream's group after {removal.removed_s * 1e3:,.0f} ms; "
            f"every replica current again after {removal.regained_s:.2f}s")
        return began
    done = chaos_ops.step_down(server, fault.kind, STREAM, CONSUMER)
    result.stepdowns.setdefault(fault.kind, []).append(done.seconds)
    log(f"  {fault.describe()} -> {done.old}: new leader {done.new} after {done.seconds * 1e3:,.0f} ms"
        f"{f' ({done.attempts} requests)' if done.attempts > 1 else ''}")
    return began


def _heal(server: servers.RunningServer, net: Partitions | None) -> None:
    if net is not None:
        net.heal()
    for index in range(len(server.nodes)):
        server.resume(index)
        if server.nodes[index].proc.poll() is not None:
            server.restart(index, START_TIMEOUT_S)
    conn = Connection(Endpoint.parse(live_url(server)), name="chaos-heal")
    try:
        replicas.wait_healthy(conn, STREAM, REPLICAS, timeout_s=HEAL_TIMEOUT_S, api_timeout_s=API_TIMEOUT_S)
        replicas.wait_healthy(conn, STREAM, REPLICAS, consumer=CONSUMER, timeout_s=HEAL_TIMEOUT_S,
                              api_timeout_s=API_TIMEOUT_S)
    finally:
        conn.close()


def _heal_quietly(server: servers.RunningServer, net: Partitions | None) -> None:
    try:
        _heal(server, net)
    except FAILURES:
        pass


def _drained_ack_floor(server: servers.RunningServer, workload: Workload) -> int:
    """Let a consumer pull the rest of the stream (up to DRAIN_S), then CONSUMER.INFO's ack floor."""
    drain = Workload(server, 0)
    drain.delivered, drain.confirmed = workload.delivered, workload.confirmed
    drain.start()
    conn = Connection(Endpoint.parse(live_url(server)), name="chaos-drain")
    info_subject = f"$JS.API.CONSUMER.INFO.{STREAM}.{CONSUMER}"
    try:
        deadline = time.monotonic() + DRAIN_S
        while time.monotonic() < deadline:
            info = _consumer_info(conn, info_subject, deadline)
            if info.get("num_pending") == 0 and info.get("num_ack_pending") == 0:
                break
            time.sleep(0.2)
        drain.finish()
        info = _consumer_info(conn, info_subject, time.monotonic() + HEAL_TIMEOUT_S)
        floor = info.get("ack_floor")
        seq = floor.get("stream_seq") if isinstance(floor, dict) else None
        if not isinstance(seq, int):
            raise FailoverFailed(f"CONSUMER.INFO without ack_floor.stream_seq: {json.dumps(info)[:200]}")
        return seq
    finally:
        conn.close()


def _consumer_info(conn: Connection, subject: str, deadline: float) -> dict[str, object]:
    """CONSUMER.INFO, asked again while unanswered until `deadline` (routes that re-formed right
    after the heal, a leader elected again: a moment without an answer is not a lost ack)."""
    while True:
        try:
            return jsapi.call(conn, subject, None, timeout_s=API_TIMEOUT_S)
        except (jsapi.ApiError, TimeoutError):
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.2)


def _read_copies(server: servers.RunningServer) -> dict[str, list[Record]]:
    """Each stopped server's copy of the stream, read from its store directory."""
    copies: dict[str, list[Record]] = {}
    for node in server.nodes:
        store_dir = server.workdir / f"store-{node.name}"
        found = [s for s in store_inspect.find_streams(str(store_dir)) if s.label.endswith(f"> {STREAM}")]
        if not found:
            continue  # not a member of the stream's group (5 nodes, R3)
        copies[node.name] = [Record.of(msg, header_value(msg.headers, MSG_ID)) if msg.headers
                             else Record.of(msg, None) for msg in store_inspect.dump(found[0].directory)]
    return copies
