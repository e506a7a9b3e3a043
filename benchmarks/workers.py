"""Core NATS across workers, side by side with nats-server (a benchmark, not a test).

    .venv/bin/python benchmarks/workers.py [--msgs N] [--rounds R] [--cpu] [--only NAME]
    .venv/bin/python benchmarks/workers.py --latency [--requests N] [--rounds R]

--cpu adds, per run, the CPU microseconds per message of each process (utime+stime from
/proc over the run): the appliance workers (w0, w1), the publisher and the subscriber client.
--only keeps the scenarios whose name contains NAME (e.g. "cross").
--latency instead measures core request/reply round trips (one request in flight, raw sockets,
TCP_NODELAY): the requester on worker 1 and the responder on worker 0 ("cross"), the other way
round, both on worker 0 / worker 1 ("same"), and nats-server; p50/p99 per round, medians printed.
--appliance-bench instead runs `appliance bench pub` and `appliance bench pubsub` (the project's
own load generator, clients landing on any worker) against 2 workers, 1 worker and nats-server.

Scenarios, each at 128 B and 1 KiB, alternating targets every round (medians reported):
  - appliance, 2 workers: publisher and subscriber pinned to different workers ("cross")
  - appliance, 2 workers: both on the same worker ("same")
  - appliance, 1 worker; nats-server 2.15.1
A connection's worker is read from its INFO client_id (worker k of n hands out k+1, k+1+n, ...).
Raw protocol clients in separate processes; the publisher ends with PING/PONG, the subscriber
counts bytes, so neither parses more than it must. A run reports a rate only when every message
arrived (the subscriber received exactly msgs × the size of one MSG); otherwise it fails with
what arrived, and so does an `appliance bench` run with errors or a short count.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psutil  # noqa: E402

from appliance.testing.natsserver import NatsServer  # noqa: E402
from appliance.testing.process import ApplianceProcess, free_port  # noqa: E402

CONNECT = b'CONNECT {"verbose":false,"pedantic":false}\r\n'


def own_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def cpu_s(pids: list[int]) -> list[float]:
    """utime+stime of each process, seconds (0 for one that is gone)."""
    tick = os.sysconf("SC_CLK_TCK")
    seconds = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            seconds.append((int(fields[11]) + int(fields[12])) / tick)
        except (FileNotFoundError, ProcessLookupError):
            seconds.append(0.0)
    return seconds


def worker_pids(supervisor_pid: int | None) -> list[int]:
    if supervisor_pid is None:
        return []
    children = psutil.Process(supervisor_pid).children()
    return [child.pid for child in sorted(children, key=lambda c: c.create_time())]


def connect(port: int, worker: int | None, workers: int) -> socket.socket:
    for _ in range(400):
        sock = socket.create_connection(("127.0.0.1", port))
        info = b""
        while not info.endswith(b"\r\n"):
            info += sock.recv(4096)
        cid = json.loads(info[5:].strip())["client_id"]
        if worker is None or (cid - 1) % workers == worker:
            sock.sendall(CONNECT + b"PING\r\n")
            got = b""
            while b"PONG" not in got:
                got += sock.recv(4096)
            return sock
        sock.close()
    raise RuntimeError(f"no connection landed on worker {worker}")


class Incomplete(RuntimeError):
    """Not every message arrived: no rate is reported for such a run."""


def arrived_rate(received_bytes: int, per_msg: int, msgs: int, elapsed_s: float) -> float:
    """Messages per second of a subscriber that read `received_bytes` of MSG frames `per_msg` bytes
    each, when exactly `msgs` arrived; Incomplete otherwise."""
    if received_bytes != per_msg * msgs:
        raise Incomplete(f"{received_bytes // per_msg:,} of {msgs:,} messages arrived "
                         f"({received_bytes:,} of {per_msg * msgs:,} bytes)")
    if elapsed_s <= 0:
        raise Incomplete(f"no measurable time for {msgs:,} messages")
    return msgs / elapsed_s


def publisher(port: int, worker: int | None, workers: int, msgs: int, size: int, go: mp.Event, out: mp.Queue) -> None:
    sock = connect(port, worker, workers)
    one = b"PUB bench.w %d\r\n%s\r\n" % (size, b"x" * size)
    batch_msgs = max(1, 65536 // len(one))
    batch = one * batch_msgs
    go.wait(30)
    start = time.perf_counter()
    sent = 0
    while sent < msgs:
        n = min(batch_msgs, msgs - sent)
        sock.sendall(batch if n == batch_msgs else one * n)
        sent += n
    sock.sendall(b"PING\r\n")
    got = b""
    while b"PONG" not in got:
        got += sock.recv(4096)
    out.put(("pub", msgs / (time.perf_counter() - start)))
    out.put(("pub_cpu", own_cpu_s()))
    sock.close()


def subscriber(port: int, worker: int | None, workers: int, msgs: int, size: int, ready: mp.Event,
               out: mp.Queue) -> None:
    sock = connect(port, worker, workers)
    sock.sendall(b"SUB bench.w 1\r\nPING\r\n")
    got = b""
    while b"PONG" not in got:
        got += sock.recv(4096)
    ready.set()
    per = len(b"MSG bench.w 1 %d\r\n" % size) + size + 2
    total, received, start = per * msgs, 0, None
    sock.settimeout(30)
    try:
        while received < total:
            chunk = sock.recv(1 << 20)
            if not chunk:
                break
            if start is None:
                start = time.perf_counter()
            received += len(chunk)
    except TimeoutError:
        pass  # nothing for 30 s: reported below with what arrived
    elapsed = time.perf_counter() - (start or time.perf_counter())
    try:
        out.put(("sub", arrived_rate(received, per, msgs, elapsed)))
    except Incomplete as exc:
        out.put(("sub_failed", str(exc)))
    out.put(("sub_cpu", own_cpu_s()))
    sock.close()


def pubsub(port: int, *, pub_worker: int | None, sub_worker: int | None, workers: int, msgs: int, size: int,
           server_pids: list[int]) -> tuple[float, dict[str, float]]:
    """Subscriber rate, and CPU µs per message of each process when server_pids are given."""
    ready, out = mp.Event(), mp.Queue()
    sub = mp.Process(target=subscriber, args=(port, sub_worker, workers, msgs, size, ready, out))
    sub.start()
    ready.wait(30)
    go = mp.Event()
    pub = mp.Process(target=publisher, args=(port, pub_worker, workers, msgs, size, go, out))
    pub.start()
    time.sleep(0.2)  # the publisher connects (and its interest settles) before the clock starts
    before = cpu_s(server_pids)
    go.set()
    results = dict(out.get(timeout=120) for _ in range(4))
    after = cpu_s(server_pids)
    pub.join(30)
    sub.join(30)
    if "sub_failed" in results:
        raise Incomplete(f"port {port}: {results['sub_failed']}")
    per_msg = {f"w{i}": (a - b) * 1e6 / msgs for i, (a, b) in enumerate(zip(after, before, strict=True))}
    per_msg["pub"] = results["pub_cpu"] * 1e6 / msgs
    per_msg["sub"] = results["sub_cpu"] * 1e6 / msgs
    return float(results["sub"]), per_msg


def responder(port: int, worker: int | None, workers: int, ready: mp.Event) -> None:
    """Answers every request on lat.svc with "ok" to its reply subject, until the socket closes."""
    sock = connect(port, worker, workers)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.sendall(b"SUB lat.svc 1\r\nPING\r\n")
    got = b""
    while b"PONG" not in got:
        got += sock.recv(4096)
    ready.set()
    pending = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return
        pending += chunk
        answers = []
        while (end := pending.find(b"\r\n")) >= 0:
            line = pending[:end]
            if line.startswith(b"MSG "):
                fields = line.split()  # MSG lat.svc 1 <reply> <size>
                after = end + 2 + int(fields[-1]) + 2
                if len(pending) < after:
                    break
                answers.append(b"PUB %s 2\r\nok\r\n" % fields[3])
                pending = pending[after:]
            else:
                if line == b"PING":
                    answers.append(b"PONG\r\n")
                pending = pending[end + 2:]
        if answers:
            sock.sendall(b"".join(answers))


def request_latency(port: int, *, requester_worker: int | None, responder_worker: int | None, workers: int,
                    requests: int) -> tuple[float, float]:
    """p50 and p99 (µs) of `requests` request/reply round trips, one in flight."""
    ready = mp.Event()
    answering = mp.Process(target=responder, args=(port, responder_worker, workers, ready), daemon=True)
    answering.start()
    try:
        if not ready.wait(30):
            raise RuntimeError("the responder did not subscribe")
        sock = connect(port, requester_worker, workers)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(b"SUB lat.inbox.> 2\r\nPING\r\n")
        got = b""
        while b"PONG" not in got:
            got += sock.recv(4096)
        sock.settimeout(30)
        rtts = []
        for n in range(requests + requests // 10):  # the first tenth warms up, not counted
            start = time.perf_counter()
            sock.sendall(b"PUB lat.svc lat.inbox.%d 2\r\nhi\r\n" % n)
            got = b""
            while not got.endswith(b"ok\r\n"):
                chunk = sock.recv(4096)
                if not chunk:
                    raise RuntimeError("the server closed the requester")
                got += chunk
            if n >= requests // 10:
                rtts.append(time.perf_counter() - start)
        sock.close()
    finally:
        answering.terminate()
        answering.join(10)
    rtts.sort()
    return rtts[len(rtts) // 2] * 1e6, rtts[min(len(rtts) - 1, int(len(rtts) * 0.99))] * 1e6


def latency_main(args: argparse.Namespace, two_port: int, real_port: int) -> None:
    runs = {
        "cross: requester w1, responder w0": (two_port, 1, 0, 2),
        "cross: requester w0, responder w1": (two_port, 0, 1, 2),
        "same: both on w0": (two_port, 0, 0, 2),
        "same: both on w1": (two_port, 1, 1, 2),
        "nats-server": (real_port, None, None, 1),
    }
    rows: dict[str, list[tuple[float, float]]] = {}
    print(f"load average before {os.getloadavg()[0]:.2f}")
    for _ in range(args.rounds):
        for name, (port, requester_worker, responder_worker, workers) in runs.items():
            if args.only not in name:
                continue
            p50, p99 = request_latency(port, requester_worker=requester_worker, responder_worker=responder_worker,
                                       workers=workers, requests=args.requests)
            rows.setdefault(name, []).append((p50, p99))
            print(f"{name:36} p50 {p50:8.0f} µs   p99 {p99:8.0f} µs", flush=True)
    print(f"\nload average after {os.getloadavg()[0]:.2f}")
    real = rows.get("nats-server")
    print("\n| request/reply | p50 µs | p99 µs | p50 / nats-server |\n|---|---:|---:|---:|")
    for name, values in rows.items():
        p50 = statistics.median(v[0] for v in values)
        p99 = statistics.median(v[1] for v in values)
        ratio = f"{p50 / statistics.median(v[0] for v in real):.2f}" if real else "-"
        print(f"| {name} | {p50:,.0f} | {p99:,.0f} | {ratio} |")


def appliance_bench(verb: str, port: int, msgs: int, size: int) -> float:
    """`appliance bench VERB` against 127.0.0.1:port: the publisher's rate (pub) or the subscriber's (pubsub)."""
    done = subprocess.run([sys.executable, "-m", "appliance", "bench", verb, "-s", f"nats://127.0.0.1:{port}",
                           "--msgs", str(msgs), "--size", str(size), "--json", "--no-progress"],
                          capture_output=True, check=True, timeout=300)
    report = json.loads(done.stdout)
    wanted = "pub #0" if verb == "pub" else "sub #0"
    client = next(c for c in report["clients"] if c["client"] == wanted)
    if report["errors"] or client["msgs"] != msgs:
        raise Incomplete(f"appliance bench {verb} on port {port}: {client['msgs']:,} of {msgs:,} messages, "
                         f"{report['errors']} errors ({report.get('first_error', '')})")
    return float(client["msgs_per_s"])


def bench_main(args: argparse.Namespace, ports: dict[str, int]) -> None:
    rows: dict[tuple[str, str, int], list[float]] = {}
    for _ in range(args.rounds):
        for verb in ("pub", "pubsub"):
            for size in (128, 1024):
                for name, port in ports.items():
                    rate = appliance_bench(verb, port, args.msgs, size)
                    rows.setdefault((verb, name, size), []).append(rate)
                    print(f"{verb:7} {name:22} {size:5} B  {rate:12,.0f} msgs/s", flush=True)
    print(f"\nload average {os.getloadavg()[0]:.2f}")
    print("\n| appliance bench | " + " | ".join(f"{n} 128 B | {n} 1 KiB" for n in ports) + " |")
    print("|---|" + "---:|" * (2 * len(ports)))
    for verb in ("pub", "pubsub"):
        cells = [f"{statistics.median(rows[(verb, n, size)]):,.0f}" for n in ports for size in (128, 1024)]
        print(f"| {verb} | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--msgs", type=int, default=500_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cpu", action="store_true", help="CPU µs per message of each process")
    parser.add_argument("--only", default="", help="only the scenarios whose name contains this")
    parser.add_argument("--latency", action="store_true", help="request/reply round trips across workers")
    parser.add_argument("--requests", type=int, default=5_000, help="round trips per --latency run")
    parser.add_argument("--appliance-bench", action="store_true",
                        help="appliance bench pub / pubsub against 2 workers, 1 worker, nats-server")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        two_port, one_port = free_port(), free_port()
        conf2 = Path(tmp) / "two.conf"
        conf2.write_text(f"listen: 127.0.0.1:{two_port}\nappliance {{ workers: 2 }}\n")
        conf1 = Path(tmp) / "one.conf"
        conf1.write_text(f"listen: 127.0.0.1:{one_port}\nappliance {{ workers: 1 }}\n")
        with ApplianceProcess(["-c", str(conf2)], log_dir=Path(tmp)) as two, \
                ApplianceProcess(["-c", str(conf1)], log_dir=Path(tmp)) as one, NatsServer() as real:
            pids = {two_port: worker_pids(two.process.pid if two.process else None),
                    one_port: worker_pids(one.process.pid if one.process else None),
                    real.port: [real.process.pid]}
            if args.latency:
                latency_main(args, two_port, real.port)
                return
            if args.appliance_bench:
                bench_main(args, {"appliance 2 workers": two_port, "appliance 1 worker": one_port,
                                  "nats-server": real.port})
                return
            rows: dict[tuple[str, int], list[float]] = {}
            for _ in range(args.rounds):
                for size in (128, 1024):
                    runs = {
                        "appliance 2 workers, cross": (two_port, 0, 1, 2),
                        "appliance 2 workers, same": (two_port, 0, 0, 2),
                        "appliance 1 worker": (one_port, None, None, 1),
                        "nats-server": (real.port, None, None, 1),
                    }
                    for name, (port, pw, sw, n) in runs.items():
                        if args.only not in name:
                            continue
                        rate, cpu = pubsub(port, pub_worker=pw, sub_worker=sw, workers=n, msgs=args.msgs,
                                           size=size, server_pids=pids[port] if args.cpu else [])
                        rows.setdefault((name, size), []).append(rate)
                        line = f"{name:28} {size:5} B  {rate:12,.0f} msgs/s"
                        if args.cpu:
                            line += "  cpu µs/msg " + " ".join(f"{k}={v:.2f}" for k, v in cpu.items())
                        print(line, flush=True)
    print(f"\nload average {os.getloadavg()[0]:.2f}")
    print("\n| scenario | 128 B msgs/s | 1 KiB msgs/s |\n|---|---:|---:|")
    names = dict.fromkeys(name for name, _ in rows)
    for name in names:
        print(f"| {name} | {statistics.median(rows[(name, 128)]):,.0f} | {statistics.median(rows[(name, 1024)]):,.0f} |")
    for size in (128, 1024):
        cross = rows.get(("appliance 2 workers, cross", size))
        same = rows.get(("appliance 2 workers, same", size))
        if cross and same:
            per_round = [c / s for c, s in zip(cross, same, strict=True)]
            print(f"cross / same ({size} B): {statistics.median(cross) / statistics.median(same):.2f} of medians,"
                  f" {statistics.median(per_round):.2f} median of the rounds' ratios"
                  f" ({', '.join(f'{r:.2f}' for r in per_round)})")


if __name__ == "__main__":
    main()
