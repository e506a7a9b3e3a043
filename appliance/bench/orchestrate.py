"""Runs a plan: one process per client, started together, measured together.

Theory of operation: the orchestrator runs the plan's setup, spawns every client process, and
waits until each has connected and done its own setup (subscribed, created its consumer) and said
"ready". Then it samples the server's CPU and opens the start gate; clients run their loop,
publish their progress into a shared array (drawn as a progress bar here) and send back a
ClientResult (with their own CPU time). Responders without a message budget run until the other
clients are done. Any client error or death fails the run with its reason; children that are
still alive at the end are terminated by pid (they are ours).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue as queue_module
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.sharedctypes import SynchronizedArray
from typing import Any

import psutil

from appliance.bench import core, js, probe, sync
from appliance.bench.conn import Connection, Endpoint
from appliance.bench.plan import Plan
from appliance.bench.progress import ProgressView
from appliance.bench.spec import ClientResult, ClientSpec
from appliance.errors import ApplianceError

READY_TIMEOUT_S = 60.0  # clients spawn (imports), connect and set up within this
POLL_S = 0.1
JOIN_TIMEOUT_S = 5.0
LAST_WORDS_S = 2.0  # a client found dead: how long its already-sent result may take to arrive

Runner = Callable[[Connection, ClientSpec, core.Progress], ClientResult]
RUNNERS: dict[str, Runner] = {
    "pub": core.run_pub, "sub": core.run_sub, "request": sync.run_request,
    "js-pub": js.run_js_pub, "js-fetch": js.run_js_fetch, "js-push": js.run_js_push,
    "kv-put": js.run_kv_put, "kv-get": js.run_kv_get,
}
SETUPS: dict[str, Callable[[Connection, ClientSpec], object]] = {
    "sub": core.setup_sub, "reply": core.setup_reply, "js-push": js.setup_js_push,
}


class BenchFailed(ApplianceError):
    """A client could not connect, set up or finish; the message says which and why."""


@dataclass(slots=True)
class Outcome:
    clients: list[ClientResult]
    wall_s: float
    server_cpu_s: float | None


def client_main(spec: ClientSpec, slot: int, progress: Any, go: Any, stop: Any, results: Any) -> None:
    """Entry point of a client process (spawned: arguments are pickled)."""
    try:
        conn = Connection(Endpoint.parse(spec.url), name=f"bench-{spec.role}-{spec.index}", timeout_s=spec.timeout_s)
        setup = SETUPS.get(spec.role)
        if setup is not None:
            setup(conn, spec)
        if spec.probe:
            (probe.answer_probe if spec.role in ("sub", "reply") else probe.await_probe_answers)(conn, spec)
        results.put(("ready", slot, None))
        if not go.wait(READY_TIMEOUT_S):
            return

        def report(done: int) -> None:
            progress[slot] = done

        cpu_start = time.process_time()
        if spec.role == "reply":
            result = core.run_reply(conn, spec, report, stop.is_set)
        else:
            result = RUNNERS[spec.role](conn, spec, report)
        result.cpu_s = time.process_time() - cpu_start
        result.client_id = client_id(conn.info)
        if result.ended_s is None:  # a loop that does not know better ended its measurement just now
            result.ended_s = time.clock_gettime(time.CLOCK_MONOTONIC)
        conn.close()
        results.put(("result", slot, result))
    except Exception as exc:  # noqa: BLE001 - every failure goes back to the orchestrator as text
        results.put(("error", slot, f"{spec.role} #{spec.index}: {type(exc).__name__}: {exc}"))


def client_id(info: dict[str, object]) -> int:
    """INFO's client_id (0 when the server sent none or not a number)."""
    value = info.get("client_id", 0)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def server_cpu_s(pids: tuple[int, ...]) -> float | None:
    """CPU seconds used so far by the server processes (all nodes, and their workers); None if unknown."""
    if not pids:
        return None
    total = 0.0
    try:
        for pid in pids:
            process = psutil.Process(pid)
            for each in [process, *process.children(recursive=True)]:
                times = each.cpu_times()
                total += times.user + times.system
    except psutil.Error:
        return None
    return total


def run_plan(plan: Plan, *, server_pids: tuple[int, ...] = (), view: ProgressView | None = None,
             settle: bool = False) -> Outcome:
    """Set up, run the clients, tear down. `settle`: write every dirty page of the machine to disk
    (sync(2)) between the setup and the clients, so that a run does not pay for the writeback of
    what an earlier run (maybe of another server) or the prefill left behind: a durable server
    waits for its fsyncs, and those queue behind that writeback."""
    endpoint = Endpoint.parse(plan.request.url)
    conn = Connection(endpoint, name="bench-setup")
    try:
        plan.setup(conn)
    finally:
        conn.close()
    if settle:
        os.sync()
    try:
        return _run_clients(plan, server_pids, view)
    finally:
        conn = Connection(endpoint, name="bench-teardown")
        try:
            plan.teardown(conn)
        finally:
            conn.close()


def _measured(spec: ClientSpec) -> bool:
    """Clients the run waits for; budget-less responders only serve the others."""
    return spec.role != "reply" or spec.msgs > 0


def _context() -> Any:
    """forkserver: children start from a clean, single-threaded server that has our modules loaded."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["appliance.bench.orchestrate"])
    return ctx


def _run_clients(plan: Plan, server_pids: tuple[int, ...], view: ProgressView | None) -> Outcome:
    ctx = _context()
    n = len(plan.clients)
    progress: SynchronizedArray[int] = ctx.Array("q", n, lock=False)
    go, stop = ctx.Event(), ctx.Event()
    results = ctx.Queue(maxsize=2 * n + 1)
    procs = [ctx.Process(target=client_main, args=(spec, slot, progress, go, stop, results), daemon=True)
             for slot, spec in enumerate(plan.clients)]
    try:
        for proc in procs:
            proc.start()
        _wait_ready(procs, results)
        cpu_before = server_cpu_s(server_pids)
        start = time.perf_counter()
        go.set()
        done, wall_s = _collect(plan, procs, results, progress, stop, view, start)
        cpu_after = server_cpu_s(server_pids)
    finally:
        stop.set()
        _reap(procs)
    server_cpu = None if cpu_before is None or cpu_after is None else cpu_after - cpu_before
    return Outcome([done[i] for i in range(n)], wall_s, server_cpu)


def _next(results: Any, procs: list[Any], waiting: set[int]) -> tuple[str, int, Any] | None:
    try:
        kind, slot, value = results.get(timeout=POLL_S)
    except queue_module.Empty:
        dead = [i for i in waiting if not procs[i].is_alive()]
        if not dead:
            return None
        # A client puts its result and exits: the result may have reached the queue after the
        # get above gave up and before the liveness check. Only a dead client whose queue stays
        # empty after that went without a result.
        try:
            kind, slot, value = results.get(timeout=LAST_WORDS_S)
        except queue_module.Empty:
            raise BenchFailed(
                f"client process {dead[0]} exited (code {procs[dead[0]].exitcode}) without a result") from None
    if kind == "error":
        raise BenchFailed(str(value))
    return kind, slot, value


def _wait_ready(procs: list[Any], results: Any) -> None:
    waiting = set(range(len(procs)))
    deadline = time.monotonic() + READY_TIMEOUT_S
    while waiting:
        if time.monotonic() > deadline:
            raise BenchFailed(f"{len(waiting)} clients not ready after {READY_TIMEOUT_S:.0f}s")
        item = _next(results, procs, waiting)
        if item is not None and item[0] == "ready":
            waiting.discard(item[1])


def _collect(plan: Plan, procs: list[Any], results: Any, progress: Any, stop: Any,
             view: ProgressView | None, start: float) -> tuple[dict[int, ClientResult], float]:
    waiting = set(range(len(procs)))
    measured = {i for i, spec in enumerate(plan.clients) if _measured(spec)}
    total = sum(plan.clients[i].msgs for i in measured)
    done: dict[int, ClientResult] = {}
    wall_s = 0.0
    while waiting:
        item = _next(results, procs, waiting)
        if view is not None:
            view.draw(sum(progress[i] for i in measured), total, time.perf_counter() - start)
        if item is None:
            continue
        _, slot, value = item
        done[slot] = value
        waiting.discard(slot)
        if not measured & waiting and not stop.is_set():
            wall_s = time.perf_counter() - start
            stop.set()
    if view is not None:
        view.finish(total, wall_s)
    return done, wall_s


def _reap(procs: list[Any]) -> None:
    for proc in procs:
        if proc.pid is not None:
            proc.join(JOIN_TIMEOUT_S)
    for proc in procs:
        if proc.is_alive():
            proc.terminate()
            proc.join(JOIN_TIMEOUT_S)
