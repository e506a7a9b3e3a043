"""/jsz next to nats-server 2.15.1's, for the queries users run (`?accounts=true`,
`?streams=true&consumers=true&config=true`, `?acc=`): the same key sets in the same order and
the same values once ids, times and machine-derived limits are masked — with no JetStream usage
at all, with streams in the global account, and with an accounts block (where the global account
is not a JetStream account in nats-server, so /jsz does not list it)."""

from __future__ import annotations

import asyncio
import json
import socket
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import nats
import pytest

from appliance.config import options_from_text
from appliance.server.monitor_view import start_monitoring
from appliance.testing.inproc import InProcessServer
from appliance.testing.natsserver import NatsServer

pytestmark = pytest.mark.integration

GLOBAL_ONLY = """
server_name: S1
http: 127.0.0.1:%(http)d
jetstream { store_dir: "%(store)s" }
"""
WITH_ACCOUNTS = GLOBAL_ONLY + """
accounts { A { users: [{user: a, password: a}], jetstream: enabled }
           B { users: [{user: b, password: b}] } }
"""
QUERIES = [
    "/jsz",
    "/jsz?accounts=true",
    "/jsz?streams=true&consumers=true&config=true",
    "/jsz?accounts=true&streams=true&consumers=true&config=true",
    "/jsz?raft=true",  # streams_leader / consumers_leader: a standalone server leads everything
]
# Not compared: `?acc=` naming an account that is not a JetStream one. nats-server then leaves
# account_details out and reports total = its number of JetStream accounts; server/monitor/jsz.py
# sends `account_details: []` and total 0 (total = len(details) there).
VOLATILE = {"now", "server_id", "created", "ts", "first_ts", "last_ts", "last_active", "store_dir",
            "max_memory", "max_storage"}
# (config, user to fill with, queries): user None leaves JetStream unused
CASES = [
    (GLOBAL_ONLY, None, [*QUERIES, "/jsz?acc=$G"]),
    (GLOBAL_ONLY, "", [*QUERIES, "/jsz?acc=$G"]),
    (WITH_ACCOUNTS, "a", [*QUERIES, "/jsz?acc=A&streams=true&consumers=true"]),
]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def mask(value: object) -> object:
    if isinstance(value, dict):
        return {k: ("<masked>" if k in VOLATILE else mask(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [mask(v) for v in value]
    return value


async def fill(url: str, user: str | None) -> None:
    if user is None:
        return
    auth = {"user": user, "password": user} if user else {}
    nc = await nats.connect(url, allow_reconnect=False, **auth)  # type: ignore[arg-type]
    try:
        await nc.request("$JS.API.STREAM.CREATE.S", b'{"name":"S","subjects":["s"]}', timeout=5)
        await nc.request("s", b"hello", timeout=5)
        consumer = b'{"stream_name":"S","config":{"durable_name":"C","ack_policy":"explicit"}}'
        await nc.request("$JS.API.CONSUMER.CREATE.S.C", consumer, timeout=5)
    finally:
        await nc.close()


def read(port: int, queries: list[str]) -> list[object]:
    out: list[object] = []
    for query in queries:
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}{query}", timeout=5).read()
        out.append((query, mask(json.loads(body))))
    return out


@contextmanager
def ours(text: str) -> Iterator[tuple[str, int]]:
    options = options_from_text(text, filename="ours.conf")
    with InProcessServer(options) as server:
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        listener.setblocking(False)
        core = server.server
        assert core is not None
        monitor = server.call_async(lambda: start_monitoring(core, listener))
        try:
            yield server.url, listener.getsockname()[1]
        finally:
            server.call_async(monitor.close)
            listener.close()


@pytest.mark.parametrize(("config", "user", "queries"), CASES, ids=["unused", "global", "accounts"])
def test_jsz_as_nats_server(tmp_path: Path, config: str, user: str | None, queries: list[str]) -> None:
    http = free_port()
    real_conf = tmp_path / "real.conf"
    real_conf.write_text(config % {"http": http, "store": tmp_path / "ns"})
    with NatsServer(["-c", str(real_conf)]) as real:
        asyncio.run(asyncio.wait_for(fill(real.url, user), 20))
        expected = read(http, queries)
    with ours(config % {"http": free_port(), "store": tmp_path / "ours"}) as (url, port):
        asyncio.run(asyncio.wait_for(fill(url, user), 20))
        got = read(port, queries)
    for want, have in zip(expected, got, strict=True):
        assert have == want


NO_USERS = """
jetstream { store_dir: "%(store)s" }
accounts { A { jetstream: enabled } }
"""


async def global_account_info(url: str) -> object:
    nc = await nats.connect(url, allow_reconnect=False)  # no users: the client lands in $G
    try:
        return json.loads((await nc.request("$JS.API.INFO", b"", timeout=5)).data)
    finally:
        await nc.close()


def test_the_global_account_has_no_jetstream_beside_configured_accounts(tmp_path: Path) -> None:
    real_conf = tmp_path / "real.conf"
    real_conf.write_text(NO_USERS % {"store": tmp_path / "ns"})
    ours = options_from_text(NO_USERS % {"store": tmp_path / "ours"}, filename=str(tmp_path / "ours.conf"))
    with NatsServer(["-c", str(real_conf)]) as real, InProcessServer(ours) as mine:
        expected = asyncio.run(asyncio.wait_for(global_account_info(real.url), 20))
        got = asyncio.run(asyncio.wait_for(global_account_info(mine.url), 20))
    assert got == expected
    assert expected["error"]["err_code"] == 10039  # type: ignore[index]
