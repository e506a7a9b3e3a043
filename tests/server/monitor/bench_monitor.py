"""Side-by-side throughput of the monitoring endpoints: appliance vs the real nats-server.

Not a test (pytest does not collect it). Run from the repository root:

    .venv/bin/python tests/server/monitor/bench_monitor.py [--connections 100] [--subs 10] [--requests 300]
    .venv/bin/python tests/server/monitor/bench_monitor.py --in-process   # render cost only, no HTTP

Both servers hold the same scene: `--connections` client connections with `--subs` subscriptions
each. nats-server gets real nats-py clients; appliance serves its endpoints from a FakeServerView in
that state (the endpoint and HTTP code under test is the same one the server uses). Each side runs
in its own process; one keep-alive HTTP client asks for every page `--requests` times, three rounds.
Prints requests per second per page (best of three rounds) and the ratio appliance / nats-server.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import http.client
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from appliance.testing.fake_view import FakeServerView

PAGES = ["/varz", "/connz", "/connz?subs=1", "/subsz?subs=1", "/healthz"]
ROUNDS = 3
NATS_SERVER = Path(sys.executable).parent / "nats-server"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def scene(http_port: int, connections: int, subs: int) -> FakeServerView:
    from appliance.server.monitor.view import SublistStats, SubscriptionInfo
    from appliance.testing.fake_view import FakeServerView

    view = FakeServerView(http_port=http_port)
    for cid in range(1, connections + 1):
        view.connect(
            cid,
            name=f"c{cid}",
            lang="python3",
            version="2.16.0",
            subscriptions=tuple(SubscriptionInfo(f"bench.{cid}.{i}", str(i), cid, "$G") for i in range(subs)),
        )
    # fixed sublist counters, so the fake view does not recount subscriptions on every request
    view.stats_by_account = {"$G": SublistStats(num_subscriptions=connections * subs), "$SYS": SublistStats()}
    return view


def render_only(connections: int, subs: int, requests: int) -> None:
    """CPU milliseconds to render each page (best of ROUNDS), without sockets: the cost on the worker loop.

    CPU time, not wall time: on a shared machine the wall clock mostly measures the neighbours.
    """
    from appliance.server.monitor import MonitorApp

    app = MonitorApp(scene(0, connections, subs))
    print(f"{connections} connections x {subs} subscriptions, render CPU time, best of {ROUNDS} x {requests}")
    for page in PAGES:
        path, _, query = page.partition("?")
        best = min(_timed(functools.partial(app.respond, path, query), requests) for _ in range(ROUNDS))
        print(f"{page:<16}{best * 1000:>10.3f} ms")


def _timed(action: Callable[[], object], count: int) -> float:
    started = time.process_time()
    for _ in range(count):
        action()
    return (time.process_time() - started) / count


def serve_appliance(http_port: int, connections: int, subs: int) -> None:
    from appliance.server.monitor import MonitorApp, MonitorServer

    view = scene(http_port, connections, subs)
    listener = socket.create_server(("127.0.0.1", http_port))

    async def main() -> None:
        server = MonitorServer(MonitorApp(view), listener)
        await server.start()
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        await server.close()

    asyncio.run(main())


def hold_clients(client_port: int, connections: int, subs: int) -> None:
    import nats

    async def main() -> None:
        clients = [
            await nats.connect(f"nats://127.0.0.1:{client_port}", name=f"c{i}") for i in range(connections)
        ]
        for index, client in enumerate(clients):
            for i in range(subs):
                await client.subscribe(f"bench.{index}.{i}")
            await client.flush()
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        for client in clients:
            await client.close()

    asyncio.run(main())


def wait_ready(process: subprocess.Popen[str]) -> None:
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line.strip() == "ready", f"helper failed: {line!r}"


def measure(http_port: int, requests: int) -> dict[str, float]:
    best: dict[str, float] = {}
    for _ in range(ROUNDS):
        connection = http.client.HTTPConnection("127.0.0.1", http_port, timeout=30)
        for page in PAGES:
            started = time.perf_counter()
            for _ in range(requests):
                connection.request("GET", page)
                answer = connection.getresponse()
                answer.read()
                assert answer.status == 200, (page, answer.status)
            rate = requests / (time.perf_counter() - started)
            best[page] = max(best.get(page, 0.0), rate)
        connection.close()
    return best


def run_nats_server(args: argparse.Namespace) -> dict[str, float]:
    client_port, http_port = free_port(), free_port()
    server = subprocess.Popen(
        [str(NATS_SERVER), "-a", "127.0.0.1", "-p", str(client_port), "-m", str(http_port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    holder = None
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                socket.create_connection(("127.0.0.1", http_port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "nats-server did not start"
                time.sleep(0.05)
        holder = subprocess.Popen(
            [sys.executable, __file__, "--hold", str(client_port), *helper_args(args)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        wait_ready(holder)
        return measure(http_port, args.requests)
    finally:
        if holder is not None:
            holder.communicate("", timeout=30)
        server.kill()
        server.wait()


def run_appliance(args: argparse.Namespace) -> dict[str, float]:
    http_port = free_port()
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(http_port), *helper_args(args)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        wait_ready(server)
        return measure(http_port, args.requests)
    finally:
        server.communicate("", timeout=30)


def helper_args(args: argparse.Namespace) -> list[str]:
    return ["--connections", str(args.connections), "--subs", str(args.subs)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=100)
    parser.add_argument("--subs", type=int, default=10)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--hold", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--in-process", action="store_true", help="render cost only, no HTTP, no nats-server")
    args = parser.parse_args()
    if args.in_process:
        render_only(args.connections, args.subs, args.requests)
        return
    if args.serve:
        serve_appliance(args.serve, args.connections, args.subs)
        return
    if args.hold:
        hold_clients(args.hold, args.connections, args.subs)
        return
    theirs = run_nats_server(args)
    ours = run_appliance(args)
    scene = f"{args.connections} connections x {args.subs} subscriptions"
    print(f"{scene}, {args.requests} requests x {ROUNDS} rounds")
    print(f"{'page':<16}{'nats-server req/s':>20}{'appliance req/s':>18}{'ratio':>8}")
    for page in PAGES:
        print(f"{page:<16}{theirs[page]:>20.0f}{ours[page]:>18.0f}{ours[page] / theirs[page]:>8.2f}")


if __name__ == "__main__":
    main()
