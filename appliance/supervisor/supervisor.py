"""The supervisor: one per host, no client traffic, small and always alive (DESIGN.md §2).

Theory of operation:
- Start: logging, the nats-server start-up banner, listening sockets (opened once, inherited by
  every worker), the status table and (with more than one worker) the fabric mesh of rings in
  shared memory (appliance/fabric/mesh.py; both unlinked at creation, passed as fds), the control
  socket, then one worker process per placement (core, NUMA node).
- Loop: signal handlers only record the signal and wake the selector; the loop then acts on
  recorded signals, worker exits (pidfd), ready bytes (ready pipe), control-socket requests and
  timers (restarts due, heartbeat checks, psutil samples, systemd watchdog).
- A worker that dies is restarted after an exponential backoff; a restart beyond the budget stops
  the supervisor with exit code 1 (systemd restarts the service). A worker that stops
  heartbeating for `heartbeat_dead_s` is killed and restarted.
- SIGTERM/SIGINT: stop workers in order (highest index first, worker 0 — monitoring, meta group —
  last) with one grace period shared by all, then SIGKILL; exit 0. SIGUSR2: forwarded to every
  worker (lame duck mode); workers that then exit are not restarted, and the supervisor exits 0
  when the last one has.
"""

from __future__ import annotations

import hashlib
import logging
import os
import pickle
import selectors
import signal
import subprocess
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

import psutil  # type: ignore[import-untyped]

from appliance import NATS_VERSION, __version__, limits
from appliance.clock import Clock, SystemClock
from appliance.config.options import ServerOptions
from appliance.errors import ConfigError, StartupError
from appliance.fabric.mesh import RingMesh, create_mesh
from appliance.log import setup_logging
from appliance.server.reload import diff_options
from appliance.supervisor import topology
from appliance.supervisor.control import ControlServer, JsonObject, server_socket_path
from appliance.supervisor.health import Health, assess_health
from appliance.supervisor.route_status import account_gate_path, read_route_status, routes_status_path
from appliance.supervisor.identity import generate_server_id
from appliance.supervisor.notify import Notifier
from appliance.supervisor.ports_file import host_addresses, ports_json, remove_ports_file, write_ports_file
from appliance.supervisor.registry import Registration, register, unregister
from appliance.supervisor.report import ProcessSample, status_report, worker_entry
from appliance.supervisor.restart import RestartPolicy, RestartTracker, failures_after_exit, restart_delay_s
from appliance.store.store_dir import store_dir_problem, store_root_of
from appliance.supervisor.sockets import Listeners, join_host_port, open_listeners
from appliance.supervisor.spawn import SpawnedWorker, spawn_worker
from appliance.supervisor.status_table import StatusTable, WorkerState
from appliance.worker.process import WorkerBootstrap

logger = logging.getLogger(__name__)

DEFAULT_WORKER_TARGET = "appliance.worker.main:serve_worker"
EXIT_OK = 0
EXIT_FAILURE = 1
HANDLED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR2, signal.SIGHUP, signal.SIGUSR1)
# Go's names for signals, as nats-server prints them in `Trapped "..." signal`
GO_SIGNAL_NAMES = {signal.SIGTERM: "terminated", signal.SIGINT: "interrupt",
                   signal.SIGUSR2: "user defined signal 2", signal.SIGHUP: "hangup",
                   signal.SIGUSR1: "user defined signal 1"}
PENDING_SIGNALS_MAX = 64
EventHandler = Callable[[int], None]
ReloadOptions = Callable[[], ServerOptions]  # the config file and flags read again (raises ConfigError)
RELOAD_FAILED = "Failed to reload server configuration: %s"


@dataclass(slots=True)
class WorkerSlot:
    placement: topology.Placement
    worker: SpawnedWorker | None = None
    state: WorkerState = WorkerState.EMPTY
    restarts: int = 0
    failures: int = 0  # consecutive, for the backoff
    started_mono_s: float = 0.0
    restart_at_mono_s: float = 0.0
    sampler: psutil.Process | None = None
    sample: ProcessSample = field(default_factory=ProcessSample)
    generation: int = 0  # reload generation of the options it was started with

    @property
    def index(self) -> int:
        return self.placement.worker_index


def run_supervisor(
    options: ServerOptions,
    *,
    worker_target: str = DEFAULT_WORKER_TARGET,
    restart_policy: RestartPolicy | None = None,
    sysfs_node_root: Path = topology.SYSFS_NODE_ROOT,
    reload_options: ReloadOptions | None = None,
) -> int:
    """Run the server (supervisor + workers) until stopped; returns the process exit code."""
    setup_logging(**options.logging_settings())
    supervisor = Supervisor(options, worker_target=worker_target, policy=restart_policy or RestartPolicy(),
                            sysfs_node_root=sysfs_node_root, reload_options=reload_options)
    return supervisor.run()


class Supervisor:
    def __init__(
        self,
        options: ServerOptions,
        *,
        worker_target: str,
        policy: RestartPolicy,
        sysfs_node_root: Path,
        notifier: Notifier | None = None,
        clock: Clock | None = None,
        reload_options: ReloadOptions | None = None,
    ) -> None:
        self.clock: Clock = clock or SystemClock()  # CLOCK_MONOTONIC: the workers' heartbeats use it too
        self.options = options
        self.worker_target = worker_target
        self.policy = policy
        self.sysfs_node_root = sysfs_node_root
        self.notifier = notifier or Notifier()
        self.server_id = generate_server_id()
        self.server_name = options.server_name or self.server_id
        self.start_wall_s = self.clock.wall()
        self.exit_code = EXIT_OK
        self.stopping = False
        self.lame_duck = False
        self.announced_ready = False
        self.slots: list[WorkerSlot] = []
        self.tracker = RestartTracker(policy)
        self.selector = selectors.DefaultSelector()
        self.pending_signals: deque[int] = deque(maxlen=PENDING_SIGNALS_MAX)
        self.listeners: Listeners | None = None
        self.table: StatusTable | None = None
        self.control: ControlServer | None = None
        self.registration: Path | None = None  # our entry in the run dir (appliance/supervisor/registry.py)
        self.ports_file: Path | None = None  # ports_file_dir's <executable>_<pid>.ports
        self.mesh: RingMesh | None = None  # the local links between workers (none with one worker)
        self.own_process = psutil.Process()
        self.own_sample = ProcessSample()
        self.next_sample_mono_s = 0.0
        self.next_watchdog_mono_s = 0.0
        self.start_mono_s = self.clock.monotonic()
        self.next_extend_mono_s = 0.0
        self.told_status = ""
        self.reload_options = reload_options
        self.reload_generation = 0  # of the options in the reload file workers read on SIGHUP
        self._wake_read, self._wake_write = os.pipe()

    # --- the main loop --------------------------------------------------------------------------

    def run(self) -> int:
        self._install_signal_handlers()
        try:
            self._start()
        except (StartupError, OSError) as exc:
            logger.critical("%s", exc)
            self.exit_code = EXIT_FAILURE
            self.stopping = True
        while not self._finished():
            self._wait_for_events()
            self._handle_pending_signals()  # before reaping: a stop signal explains worker exits
            if self.stopping:
                break
            self._reap_dead_workers()
            self._start_due_workers()
            self._maybe_announce_ready()  # before the watchdog: systemd hears READY=1 first
            self._tell_systemd_while_starting()
            self._watch_heartbeats()
            if self.control is not None:
                self.control.expire()
        self._stop_workers()
        self._teardown()
        return self.exit_code

    def _finished(self) -> bool:
        if self.stopping:
            return True
        if self.lame_duck and all(slot.worker is None for slot in self.slots):
            logger.info("Initiating Shutdown...")  # nats-server's line when lame duck mode ends
            return True
        return False

    # --- start and stop -------------------------------------------------------------------------

    def _start(self) -> None:
        self._log_banner()
        usable = topology.usable_cpus()
        count = topology.worker_count(self.options.appliance.workers, usable)
        if count > limits.STATUS_ROWS_MAX:
            raise StartupError(f"appliance.workers: {count} is more than {limits.STATUS_ROWS_MAX}")
        nodes = topology.read_topology(self.sysfs_node_root, all_cpus=usable)
        placements = topology.place_workers(count, topology=nodes, usable=usable)
        for node in sorted(set(self.options.appliance.numa_store_dirs) - set(nodes.nodes)):
            logger.warning("appliance.numa_store_dirs names NUMA node %d, which this host does not have", node)
        if self.options.jetstream.enabled:
            self._check_store_dirs(placements)
        self.listeners = open_listeners(self.options)
        self._write_pid_file()
        self._write_ports_file()
        self.table = StatusTable.create(count)
        if count > 1:
            self.mesh = create_mesh(count, ring_bytes=self.options.appliance.ring_bytes)
        self.control = ControlServer(server_socket_path(self.listeners.client_port), self._answer)
        self.control.register(self.selector)
        try:
            self.registration = register(self._registration())
        except OSError as exc:  # the server runs; only a bare `appliance status` will not find it
            logger.warning("Could not register in %s: %s", self.control.path.parent, exc)
        on_wake: EventHandler = lambda mask: self._drain_wake_pipe()
        self.selector.register(self._wake_read, selectors.EVENT_READ, on_wake)
        cores = [p.core for p in placements]
        node_ids = sorted({p.numa_node for p in placements})
        logger.info("Supervisor pid %d: %d worker(s) on cores %s, NUMA node(s) %s; control socket %s",
                    os.getpid(), count, cores, node_ids, self.control.path)
        if self.mesh is not None:
            logger.debug("Workers linked by %s (%d bytes per ring)", self.mesh.transport, self.mesh.ring_bytes)
        now = self.clock.monotonic()
        self.slots = [WorkerSlot(placement=p) for p in placements]
        for slot in self.slots:
            self._spawn(slot, now)

    def _check_store_dirs(self, placements: list[topology.Placement]) -> None:
        """Every store dir a worker will use exists (created if missing), is a directory and takes
        a written, fsynced page; else the server does not start (nats-server's words, and the path)."""
        configured = self.options.jetstream.store_dir
        bases = {topology.store_dir_for_node(self.options.appliance.numa_store_dirs, p.numa_node, configured)
                 for p in placements}
        for base in sorted(bases):
            for path in ([base] if base else []) + [store_root_of(base)]:
                problem = store_dir_problem(path)
                if problem is not None:
                    raise StartupError(f"Can't start JetStream: {problem}: {path}")

    def _log_banner(self) -> None:
        # what runs, for an operator reading journald; the lines after keep nats-server's shape
        logger.info("Starting appliance %s (nats-server %s protocol)", __version__, NATS_VERSION)
        logger.info("  Version:  %s", NATS_VERSION)
        logger.info("  Git:      [appliance %s]", __version__)
        logger.info("  Name:     %s", self.server_name)
        logger.info("  ID:       %s", self.server_id)

    def _stop_workers(self) -> None:
        """SIGTERM in order (worker 0 last), one shared grace period, then SIGKILL."""
        live = [slot for slot in reversed(self.slots) if slot.worker is not None]
        if not live:
            return
        self.notifier.stopping("stopping workers")
        deadline = self.clock.monotonic() + self.policy.stop_grace_s
        for slot in live:
            assert slot.worker is not None
            self._set_state(slot, WorkerState.STOPPING)
            _signal(slot.worker.pid, signal.SIGTERM)
            _signal(slot.worker.pid, signal.SIGCONT)  # a stopped (SIGSTOP) worker must see it
            try:
                slot.worker.process.wait(timeout=max(0.0, deadline - self.clock.monotonic()))
            except subprocess.TimeoutExpired:
                pass  # killed below
        for slot in live:
            assert slot.worker is not None
            if slot.worker.process.poll() is None:
                logger.warning("Worker %d (pid %d) did not stop in %gs, killing it", slot.index,
                               slot.worker.pid, self.policy.stop_grace_s)
                _signal(slot.worker.pid, signal.SIGKILL)
            slot.worker.process.wait()
            self._forget_process(slot, WorkerState.STOPPED)

    def _registration(self) -> Registration:
        assert self.listeners is not None and self.control is not None
        cluster_port = self.options.cluster.port
        return Registration(
            pid=os.getpid(), server_name=self.server_name,
            client_url=join_host_port(self.options.host, self.listeners.client_port),
            client_port=self.listeners.client_port, http_port=self.listeners.http_port,
            cluster_port=cluster_port if cluster_port > 0 else None,
            config_file=str(Path(self.options.config_file).resolve()) if self.options.config_file else "",
            control_socket=str(self.control.path),
            started=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.start_wall_s)))

    def _teardown(self) -> None:
        if self.registration is not None:
            unregister(self.registration)
        if self.control is not None:
            for path in (self._reload_path(), account_gate_path(self.control.path)):
                try:
                    path.unlink()
                except FileNotFoundError:
                    pass
            self.control.close()
        if self.table is not None:
            self.table.close()
        if self.mesh is not None:
            self.mesh.close()
        if self.listeners is not None:
            self.listeners.close()
        self.selector.close()
        signal.set_wakeup_fd(-1)  # before closing: the fd number could be reused at once
        os.close(self._wake_read)
        os.close(self._wake_write)
        self._remove_pid_file()
        if self.ports_file is not None:
            remove_ports_file(self.ports_file)
        self.notifier.close()
        logger.info("Server Exiting..")

    def _write_pid_file(self) -> None:
        if self.options.pid_file:
            Path(self.options.pid_file).write_text(str(os.getpid()))

    def _write_ports_file(self) -> None:
        if not self.options.ports_file_dir or self.listeners is None:
            return
        data = ports_json(client_host=self.options.host, client_port=self.listeners.client_port,
                          http_host=self.options.http_host, http_port=self.listeners.http_port,
                          addresses=host_addresses())
        self.ports_file = write_ports_file(self.options.ports_file_dir, data)

    def _remove_pid_file(self) -> None:
        if self.options.pid_file:
            try:
                Path(self.options.pid_file).unlink()
            except FileNotFoundError:
                pass

    # --- signals --------------------------------------------------------------------------------

    def _install_signal_handlers(self) -> None:
        os.set_blocking(self._wake_read, False)
        os.set_blocking(self._wake_write, False)
        signal.set_wakeup_fd(self._wake_write, warn_on_full_buffer=False)
        for signum in HANDLED_SIGNALS:
            signal.signal(signum, self._record_signal)

    def _record_signal(self, signum: int, frame: FrameType | None) -> None:
        self.pending_signals.append(signum)

    def _drain_wake_pipe(self) -> None:
        try:
            while os.read(self._wake_read, 4096):
                pass
        except BlockingIOError:
            pass

    def _handle_pending_signals(self) -> None:
        while self.pending_signals:
            signum = self.pending_signals.popleft()
            logger.info('Trapped "%s" signal', GO_SIGNAL_NAMES.get(signal.Signals(signum), str(signum)))
            if signum in (signal.SIGTERM, signal.SIGINT):
                logger.info("Initiating Shutdown...")
                self.stopping = True
            elif signum == signal.SIGUSR2:
                self._enter_lame_duck()
            elif signum == signal.SIGHUP:
                self.reload()
            elif signum == signal.SIGUSR1:
                self._reopen_log_file()

    # --- configuration reload (SIGHUP, `appliance reload`) -----------------------------------------

    def reload(self) -> JsonObject:
        """Re-read the config as nats-server does on SIGHUP: apply what changes live or refuse it all,
        keeping the running config. Returns the outcome (for `appliance reload`)."""
        if self.reload_options is None or not self.options.config_file:
            error = "can only reload config when a file is provided using -c or --config"
            logger.error(RELOAD_FAILED, error)
            return {"error": error}
        self.notifier.reloading(int(self.clock.monotonic() * 1_000_000))
        try:
            try:
                new = self.reload_options()
            except ConfigError as exc:
                error = "\n".join(exc.problems)
                logger.error(RELOAD_FAILED, error)
                return {"error": error}
            diff = diff_options(self.options, new)
            if diff.error is not None:
                logger.error(RELOAD_FAILED, diff.error)
                return {"error": diff.error}
            self._apply_reload(new, diff.changes)
            return {"reloaded": diff.changes}
        finally:
            if self.announced_ready and not self.stopping:
                serving = sum(1 for slot in self.slots if slot.state == WorkerState.READY)
                self.notifier.ready(f"{serving} worker(s) serving")

    def _apply_reload(self, new: ServerOptions, changes: list[str]) -> None:
        old = self.options
        new.port, new.host = old.port, old.host  # the listeners stay the ones bound at start
        if new.logging_settings() != old.logging_settings():
            setup_logging(**new.logging_settings())
        for line in changes:
            logger.info("%s", line)
        self.options = new  # workers restarted from now on start with it
        if new.pid_file != old.pid_file:
            self._write_pid_file()
        if new.ports_file_dir != old.ports_file_dir:  # nats-server moves the file
            if self.ports_file is not None:
                remove_ports_file(self.ports_file)
                self.ports_file = None
            self._write_ports_file()
        self.reload_generation += 1
        if self.control is not None and changes:
            self._write_reload_file()
            for slot in self.slots:
                if slot.worker is not None and slot.state in (WorkerState.READY, WorkerState.LAME_DUCK):
                    _signal(slot.worker.pid, signal.SIGHUP)
        digest = hashlib.sha256(Path(new.config_file).read_bytes()).hexdigest() if new.config_file else ""
        logger.info("Reloaded server configuration %s", f"(sha256:{digest})" if digest else "")

    def _reload_path(self) -> Path:
        assert self.control is not None
        return reload_file_path(self.control.path)

    def _write_reload_file(self) -> None:
        """The new options for the workers: (generation, options), pickled, written atomically, 0600."""
        path = self._reload_path()
        scratch = path.with_name(f".{path.name}.{os.getpid()}")
        fd = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out:
            pickle.dump((self.reload_generation, self.options), out)
        os.replace(scratch, path)

    def _reopen_log_file(self) -> None:
        """SIGUSR1 as nats-server (logrotate's postrotate): reopen log_file, in every process."""
        if not self.options.log_file:
            logger.info("File log re-open ignored, not a file logger")
            return
        setup_logging(**self.options.logging_settings())
        for slot in self.slots:
            if slot.worker is not None and slot.state in (WorkerState.READY, WorkerState.LAME_DUCK):
                _signal(slot.worker.pid, signal.SIGUSR1)
        logger.info("File log re-opened")

    def _enter_lame_duck(self) -> None:
        if self.lame_duck:
            return
        self.lame_duck = True
        # the stop has begun (systemctl stop sends SIGUSR2: KillSignal=): clients are moved off first
        self.notifier.stopping("lame duck mode: moving clients off, then stopping")
        # the stop takes lame_duck_duration (whatever the config says) plus the workers' stop grace
        options = self.options
        self.notifier.extend_timeout(options.lame_duck_duration_s + options.lame_duck_grace_period_s
                                     + self.policy.stop_grace_s + limits.LAME_DUCK_STOP_MARGIN_S,
                                     f"lame duck mode for {options.lame_duck_duration_s:g}s")
        for slot in self.slots:
            if slot.worker is not None:
                _signal(slot.worker.pid, signal.SIGUSR2)
                self._set_state(slot, WorkerState.LAME_DUCK)
            elif slot.state == WorkerState.BACKOFF:
                self._set_state(slot, WorkerState.STOPPED)

    # --- workers --------------------------------------------------------------------------------

    def _spawn(self, slot: WorkerSlot, now_mono_s: float) -> None:
        assert self.listeners is not None and self.table is not None
        placement = slot.placement
        extra: dict[str, object] = {
            "store_dir": topology.store_dir_for_node(self.options.appliance.numa_store_dirs, placement.numa_node,
                                                     self.options.jetstream.store_dir),
            # the server's CPUs (/varz cores, nats-server's runtime.NumCPU), not the one a worker is pinned to
            "server_cores": len(topology.usable_cpus()),
            "reload_path": str(reload_file_path(self.control.path)) if self.control is not None else "",
        }
        if slot.index == 0 and self.control is not None:
            extra["routes_status_path"] = str(routes_status_path(self.control.path))
        if self.options.trust.enabled and self.control is not None:  # accounts' `conn` limits, host-wide
            extra["account_gate_path"] = str(account_gate_path(self.control.path))
        extra_fds: tuple[int, ...] = ()
        if self.mesh is not None:
            # rings: the same fds again for a restarted worker; socketpairs: fresh ones, handed to siblings too
            mesh_spec, refused = self.mesh.prepare_spawn(slot.index)
            extra["mesh_spec"] = mesh_spec.to_json()
            extra_fds = tuple(mesh_spec.fds())
            self._restart_unreachable(refused)
        bootstrap = WorkerBootstrap(
            options=self.options, target=self.worker_target, worker_index=slot.index,
            worker_count=len(self.slots), server_id=self.server_id, start_wall_s=self.start_wall_s,
            supervisor_pid=os.getpid(), client_fd=self.listeners.client.fileno(), ready_fd=-1,
            http_fd=self.listeners.http.fileno() if self.listeners.http is not None and slot.index == 0 else None,
            cluster_fd=self.listeners.cluster.fileno() if self.listeners.cluster is not None and slot.index == 0 else None,
            websocket_fd=self.listeners.websocket.fileno() if self.listeners.websocket is not None else None,
            status_fd=self.table.fd, core=placement.core, numa_node=placement.numa_node, extra=extra,
            extra_fds=extra_fds,
        )
        try:
            worker = spawn_worker(bootstrap)
        except StartupError as exc:
            logger.error("%s", exc)
            self._on_failure(slot, now_mono_s, uptime_s=0.0)
            return
        if self.mesh is not None:
            self.mesh.spawned(slot.index)
        slot.worker = worker
        slot.generation = self.reload_generation
        slot.started_mono_s = now_mono_s
        slot.sampler = _sampler(worker.pid)
        slot.sample = ProcessSample()
        self.table.reset_row(slot.index, pid=worker.pid, core=placement.core, numa_node=placement.numa_node,
                             restarts=slot.restarts, now_mono_s=now_mono_s)
        slot.state = WorkerState.STARTING
        on_ready: EventHandler = lambda mask: self._read_ready(slot)
        self.selector.register(worker.ready_fd, selectors.EVENT_READ, on_ready)
        if worker.pidfd is not None:
            on_exit: EventHandler = lambda mask: None  # wakes the loop; _reap_dead_workers does the work
            self.selector.register(worker.pidfd, selectors.EVENT_READ, on_exit)

    def _restart_unreachable(self, indexes: list[int]) -> None:
        """Siblings alive but not reading their rejoin channel cannot get their fresh link to a
        restarted worker: kill them, so they restart with fresh links too (the budget applies)."""
        for index in indexes:
            worker = self.slots[index].worker
            if worker is not None:
                logger.error("Worker %d (pid %d) does not take its link to a restarted sibling: killing it", index,
                             worker.pid)
                _signal(worker.pid, signal.SIGKILL)

    def _read_ready(self, slot: WorkerSlot) -> None:
        assert slot.worker is not None
        try:
            data = os.read(slot.worker.ready_fd, 64)
        except BlockingIOError:
            return
        if not data:  # the worker is exiting; stop watching until it is reaped
            self.selector.unregister(slot.worker.ready_fd)
            return
        if slot.state == WorkerState.STARTING:
            self._set_state(slot, WorkerState.READY)
            if slot.generation < self.reload_generation:  # started before a reload: it reads the new options
                _signal(slot.worker.pid, signal.SIGHUP)
            if self.announced_ready:
                logger.info("Worker %d (pid %d) is serving again", slot.index, slot.worker.pid)
                serving = sum(1 for other in self.slots if other.state == WorkerState.READY)
                self.notifier.status(f"{serving}/{len(self.slots)} worker(s) serving")

    def _reap_dead_workers(self) -> None:
        now = self.clock.monotonic()
        for slot in self.slots:
            if slot.worker is None:
                continue
            code = slot.worker.process.poll()
            if code is None:
                continue
            pid = slot.worker.pid
            uptime_s = now - slot.started_mono_s
            self._forget_process(slot, WorkerState.STOPPED)
            if self.lame_duck:
                logger.info("Worker %d (pid %d) %s after lame duck mode", slot.index, pid, _describe_exit(code))
                continue
            logger.error("Worker %d (pid %d) %s", slot.index, pid, _describe_exit(code))
            self._on_failure(slot, now, uptime_s=uptime_s)

    def _on_failure(self, slot: WorkerSlot, now_mono_s: float, *, uptime_s: float) -> None:
        slot.failures = failures_after_exit(self.policy, previous_failures=slot.failures, uptime_s=uptime_s)
        if not self.tracker.maybe_spend(now_mono_s):
            logger.critical("Worker restart budget exhausted (%d restarts in %gs): stopping the server",
                            self.policy.budget_count, self.policy.budget_window_s)
            self._set_state(slot, WorkerState.STOPPED)
            self.exit_code = EXIT_FAILURE
            self.stopping = True
            return
        delay_s = restart_delay_s(self.policy, slot.failures)
        slot.restart_at_mono_s = now_mono_s + delay_s
        self._set_state(slot, WorkerState.BACKOFF)
        self.notifier.status(f"worker {slot.index} restarting")
        logger.warning("Restarting worker %d in %.2fs (failure %d in a row)", slot.index, delay_s, slot.failures)

    def _start_due_workers(self) -> None:
        if self.stopping or self.lame_duck:
            return
        now = self.clock.monotonic()
        for slot in self.slots:
            if slot.state == WorkerState.BACKOFF and now >= slot.restart_at_mono_s:
                slot.restarts += 1
                self._spawn(slot, now)

    def _forget_process(self, slot: WorkerSlot, state: WorkerState) -> None:
        assert slot.worker is not None
        for fd in (slot.worker.ready_fd, slot.worker.pidfd):
            if fd is not None and fd in self.selector.get_map():
                self.selector.unregister(fd)
        slot.worker.close_fds()
        slot.worker = None
        if self.table is not None:
            self.table.release_admitted(slot.index)  # its connections are gone: max_connections counts them no more
        slot.sampler = None
        self._set_state(slot, state)

    def _set_state(self, slot: WorkerSlot, state: WorkerState) -> None:
        slot.state = state
        if self.table is not None:
            self.table.set_state(slot.index, state)

    # --- health, readiness, sampling ------------------------------------------------------------

    def _watch_heartbeats(self) -> None:
        """Kill wedged workers; feed the systemd watchdog only while every worker heartbeats."""
        now = self.clock.monotonic()
        fresh = bool(self.slots)
        for slot in self.slots:
            if slot.worker is None or slot.state not in (WorkerState.READY, WorkerState.LAME_DUCK):
                fresh = False
                continue
            assert self.table is not None
            age_s = now - self.table.snapshot(slot.index).heartbeat_mono_s
            fresh = fresh and age_s <= self.policy.heartbeat_late_s
            if age_s > self.policy.heartbeat_dead_s:
                logger.error("Worker %d (pid %d) has not heartbeat for %.1fs: killing it", slot.index,
                             slot.worker.pid, age_s)
                _signal(slot.worker.pid, signal.SIGKILL)
        interval_s = self.notifier.watchdog_interval_s
        if fresh and interval_s is not None and now >= self.next_watchdog_mono_s:
            self.notifier.watchdog()
            self.next_watchdog_mono_s = now + interval_s
        if now >= self.next_sample_mono_s:
            self._sample_processes()
            self.next_sample_mono_s = now + limits.WORKER_SAMPLE_INTERVAL_S

    def _sample_processes(self) -> None:
        self.own_sample = _sample(self.own_process)
        for slot in self.slots:
            if slot.sampler is not None:
                slot.sample = _sample(slot.sampler)

    def _maybe_announce_ready(self) -> None:
        if self.announced_ready or not self.slots:
            return
        if all(slot.state == WorkerState.READY for slot in self.slots):
            self.announced_ready = True
            logger.info("Server is ready")
            self.notifier.ready(f"{len(self.slots)} worker(s) serving")

    def _tell_systemd_while_starting(self) -> None:
        """Until READY=1: STATUS= when it changes, and EXTEND_TIMEOUT_USEC= every few seconds while a
        worker (worker 0: JetStream recovering its store) is still starting, so a large store does not
        hit TimeoutStartSec=; after STARTUP_EXTEND_MAX_S the start is considered stuck and not extended."""
        if self.announced_ready or self.stopping or self.lame_duck or not self.notifier.enabled or not self.slots:
            return
        now = self.clock.monotonic()
        serving = sum(1 for slot in self.slots if slot.state == WorkerState.READY)
        status = f"starting: {serving}/{len(self.slots)} worker(s) serving"
        first = self.slots[0]
        if self.options.jetstream.enabled and first.state == WorkerState.STARTING:
            status += f"; JetStream recovering its store in {self._store_dir_of(first)}"
        if now >= self.next_extend_mono_s and now - self.start_mono_s < limits.STARTUP_EXTEND_MAX_S:
            self.notifier.extend_timeout(limits.STARTUP_EXTEND_S, status)
            self.next_extend_mono_s = now + limits.STARTUP_EXTEND_EVERY_S
        elif status != self.told_status:
            self.notifier.status(status)
        self.told_status = status

    def _store_dir_of(self, slot: WorkerSlot) -> str:
        return store_root_of(topology.store_dir_for_node(self.options.appliance.numa_store_dirs,
                                                          slot.placement.numa_node, self.options.jetstream.store_dir))

    def _wait_for_events(self) -> None:
        now = self.clock.monotonic()
        timeout_s = limits.SUPERVISOR_TICK_S
        for slot in self.slots:
            if slot.state == WorkerState.BACKOFF:
                timeout_s = min(timeout_s, max(0.0, slot.restart_at_mono_s - now))
        for key, mask in self.selector.select(timeout_s):
            handler: EventHandler = key.data
            handler(mask)

    # --- the control socket's answer --------------------------------------------------------------

    def health(self) -> Health:
        assert self.table is not None
        return assess_health(self.table.snapshots(), now_mono_s=self.clock.monotonic(),
                             heartbeat_late_s=self.policy.heartbeat_late_s, stopping=self.stopping)

    def _answer(self, message: JsonObject) -> JsonObject:
        if message.get("request") == "reload":
            return self.reload()
        if message.get("request") != "status":
            return {"error": f"unknown request {message.get('request')!r}"}
        return self.status()

    def status(self) -> JsonObject:
        assert self.table is not None and self.listeners is not None and self.control is not None
        now = self.clock.monotonic()
        workers = [worker_entry(self.table.snapshot(slot.index), slot.sample, now_mono_s=now)
                   for slot in self.slots]
        http_port = self.listeners.http_port
        identity: JsonObject = {
            "server_name": self.server_name, "server_id": self.server_id, "version": NATS_VERSION,
            "appliance_version": __version__,
            "client_url": join_host_port(self.options.host, self.listeners.client_port),
            "http_url": None if http_port is None else join_host_port(self.options.http_host, http_port),
            "control_socket": str(self.control.path),
        }
        state = "stopping" if self.stopping else "lame_duck" if self.lame_duck else "running"
        supervisor: JsonObject = {
            "pid": os.getpid(), "state": state, "cpu_percent": round(self.own_sample.cpu_percent, 1),
            "rss_bytes": self.own_sample.rss_bytes, "restarts_in_window": self.tracker.restarts_in_window(now),
            "restart_budget": self.policy.budget_count, "restart_window_s": self.policy.budget_window_s,
        }
        routes, route_reasons = read_route_status(routes_status_path(self.control.path), now_wall_s=self.clock.wall(),
                                                  clustered=bool(self.options.cluster.routes))
        health = self.health()
        if route_reasons and health.level == "ok":
            health = Health("degraded", route_reasons)
        elif route_reasons:
            health = Health(health.level, [*health.reasons, *route_reasons])
        return status_report(identity=identity, health=health, supervisor=supervisor, workers=workers,
                             start_wall_s=self.start_wall_s, now_wall_s=self.clock.wall(), routes=routes)


def reload_file_path(control_socket: Path) -> Path:
    """Where the supervisor leaves reloaded options for its workers: next to its control socket."""
    return control_socket.with_suffix(".reload")


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def _sampler(pid: int) -> psutil.Process | None:
    try:
        process = psutil.Process(pid)
        process.cpu_percent(None)  # the first call starts the measurement
        return process
    except psutil.Error:
        return None


def _sample(process: psutil.Process) -> ProcessSample:
    try:
        return ProcessSample(cpu_percent=process.cpu_percent(None), rss_bytes=process.memory_info().rss)
    except psutil.Error:
        return ProcessSample()
