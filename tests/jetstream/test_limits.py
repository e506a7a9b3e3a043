"""Account and server resource limits: the same requests to nats-server 2.15.1 and to appliance,
both started from one config file; every answer must be equal once times are masked."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest

from appliance.config import options_from_text
from appliance.jetstream.resources import server_limits
from appliance.testing.inproc import InProcessServer
from appliance.testing.natsserver import NatsServer

pytestmark = pytest.mark.integration

CONFIG = """
server_name: S1
jetstream { store_dir: "%(store)s", max_memory_store: 200000, max_file_store: 10MB }
accounts {
  A { users: [{user: a, password: a}],
      jetstream: { max_mem: 100000, max_file: 200000, max_streams: 2, max_consumers: 2, max_ack_pending: 5 } }
  B { users: [{user: b, password: b}],
      jetstream: { max_mem: 100000, max_file: 200000, max_bytes_required: true } }
  C { users: [{user: c, password: c}], jetstream: enabled }
  D { users: [{user: d, password: d}],
      jetstream: { mem_max_stream_bytes: 5000, disk_max_stream_bytes: 6000, cluster_traffic: owner } }
}
"""
TIME_KEYS = {"created", "ts", "first_ts", "last_ts", "last_active", "time"}
Step = tuple[str, bytes]


def _create(name: str, **config: object) -> Step:
    return f"$JS.API.STREAM.CREATE.{name}", json.dumps({"name": name, **config}).encode()


def _body(name: str, **config: object) -> bytes:
    return json.dumps({"name": name, "subjects": [name.lower()], **config}).encode()


def _consumer(stream: str, name: str, **config: object) -> Step:
    body = {"stream_name": stream, "config": {"durable_name": name, **config}}
    return f"$JS.API.CONSUMER.CREATE.{stream}.{name}", json.dumps(body).encode()


INFO: Step = ("$JS.API.INFO", b"")
BIG = b"x" * 2000

ACCOUNT_A: list[Step] = [
    INFO,
    _create("S0", subjects=["s0"], storage="memory", max_consumers=5),  # above the account's 2
    _create("S1", subjects=["s1"], storage="memory", max_bytes=50000),
    _create("S2", subjects=["s2"], storage="memory", max_bytes=60000),  # 10028: 50000+60000 > 100000
    _create("S2", subjects=["s2"], storage="memory"),  # unlimited reserves nothing
    _create("S3", subjects=["s3"], storage="file", max_bytes=300000),  # 10027 before 10047
    _create("S1", subjects=["s1"], storage="memory", max_bytes=50000),  # idempotent: no limit check
    ("$JS.API.STREAM.UPDATE.S1", json.dumps({"name": "S1", "subjects": ["s1"], "storage": "memory",
                                             "max_bytes": 150000}).encode()),
    ("$JS.API.STREAM.UPDATE.S1", json.dumps({"name": "S1", "subjects": ["s1"], "storage": "memory",
                                             "max_bytes": 40000}).encode()),
    INFO,
    _consumer("S1", "C0", ack_policy="explicit"),  # max_ack_pending defaults to the account's 5
    _consumer("S1", "C1", ack_policy="none"),
    _consumer("S1", "C2", ack_policy="explicit"),  # 10026: two consumers per stream
    _consumer("S1", "X", ack_policy="explicit", max_ack_pending=10),  # 10121
    ("$JS.API.CONSUMER.DELETE.S1.C1", b""),
    _consumer("S1", "X", ack_policy="explicit", max_ack_pending=4),
    ("$JS.API.CONSUMER.INFO.S1.X", b""),
    ("$JS.API.STREAM.DELETE.S1", b""),
    *[("s2", BIG)] * 52,  # 10002 once memory + the message would pass 100000
    ("s2", b"x"),
    INFO,
    ("$JS.API.STREAM.DELETE.S2", b""),
    _create("F", subjects=["f"], storage="file"),
    *[("f", BIG)] * 100,
    ("f", b"y"),
    INFO,
]

ACCOUNT_B: list[Step] = [
    _create("B1", subjects=["b1"], storage="memory"),  # 10113
    _create("B1", subjects=["b1"], storage="memory", max_bytes=1000),
    _create("B2", subjects=["b2"], storage="file", max_bytes=300000),  # 10047
    ("$JS.API.STREAM.UPDATE.B1", _body("B1", storage="memory")),
    ("$JS.API.STREAM.UPDATE.B1", json.dumps({"name": "B1", "subjects": ["b1"], "storage": "memory",
                                             "max_bytes": 2000}).encode()),
    INFO,
]

ACCOUNT_C: list[Step] = [
    INFO,
    _create("C1", subjects=["c1"], storage="memory", max_bytes=300000),  # 10028: server max_memory_store
    _create("C1", subjects=["c1"], storage="memory", max_bytes=150000),
    _create("C2", subjects=["c2"], storage="memory", max_bytes=100000),  # 10028: 150000 reserved + 100000
    _create("C2", subjects=["c2"], storage="memory"),
    ("$JS.API.STREAM.DELETE.C1", b""),
    *[("c2", BIG)] * 103,  # 10023 once the server's memory is over 200000
    INFO,
]


ACCOUNT_D: list[Step] = [
    INFO,
    _create("M1", subjects=["m1"], storage="memory"),
    _create("M2", subjects=["m2"], storage="memory", max_bytes=6000),  # 10122
    _create("M3", subjects=["m3"], storage="memory", max_bytes=4000),
    _create("F1", subjects=["f1"], storage="file", max_bytes=7000),  # 10122
    ("$JS.API.STREAM.UPDATE.M3", json.dumps({"name": "M3", "subjects": ["m3"], "storage": "memory",
                                             "max_bytes": 9000}).encode()),  # 10122
    ("$JS.API.STREAM.UPDATE.M3", _body("M3", storage="memory")),
    INFO,
]


def mask(value: object) -> object:
    if isinstance(value, dict):
        return {k: ("<time>" if k in TIME_KEYS else mask(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [mask(v) for v in value]
    return value


async def replay(url: str, user: str, script: list[Step]) -> list[object]:
    nc = await nats.connect(url, user=user, password=user, allow_reconnect=False)
    answers: list[object] = []
    try:
        for subject, body in script:
            msg = await nc.request(subject, body, timeout=5)
            answers.append(mask(json.loads(msg.data)))
    finally:
        await nc.close()
    return answers


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[tuple[str, str]]:
    real_conf = tmp_path / "real.conf"
    real_conf.write_text(CONFIG % {"store": tmp_path / "ns"})
    ours = options_from_text(CONFIG % {"store": tmp_path / "ours"}, filename=str(tmp_path / "ours.conf"))
    with NatsServer(["-c", str(real_conf)]) as real, InProcessServer(ours) as mine:
        yield real.url, mine.url


def test_limits_answer_as_nats_server(servers: tuple[str, str]) -> None:
    real_url, our_url = servers
    for user, script in (("a", ACCOUNT_A), ("b", ACCOUNT_B), ("c", ACCOUNT_C), ("d", ACCOUNT_D)):
        expected = asyncio.run(asyncio.wait_for(replay(real_url, user, script), 60))
        got = asyncio.run(asyncio.wait_for(replay(our_url, user, script), 60))
        for index, (step, want, have) in enumerate(zip(script, expected, got, strict=True)):
            assert have == want, f"account {user} step {index}: {step[0]} {step[1][:80]!r}"


def test_every_stream_is_guarded_by_the_server_limit(tmp_path: Path) -> None:
    """nats-server checks every publish against the server limit (derived when not configured)."""
    text = """
jetstream { store_dir: "%(store)s", max_file_store: 10MB }
accounts { A { users: [{user: a, password: a}], jetstream: { max_mem: 100000 } }
           C { users: [{user: c, password: c}], jetstream: enabled } }
"""
    options = options_from_text(text % {"store": tmp_path / "s"}, filename=str(tmp_path / "x.conf"))

    async def create(url: str, user: str, name: str, storage: str) -> None:
        nc = await nats.connect(url, user=user, password=user, allow_reconnect=False)
        try:
            body = json.dumps({"name": name, "storage": storage}).encode()
            answer = json.loads((await nc.request(f"$JS.API.STREAM.CREATE.{name}", body, timeout=5)).data)
            assert "error" not in answer
        finally:
            await nc.close()

    with InProcessServer(options) as server:
        for user, name, storage in (("a", "AM", "memory"), ("a", "AF", "file"), ("c", "CM", "memory"),
                                    ("c", "CF", "file")):
            asyncio.run(create(server.url, user, name, storage))
        assert server.server is not None
        service = server.server.jetstream_monitor.service  # type: ignore[attr-defined]
        guards = {name: (stream.guard.account_max, stream.guard.server_max)
                  for ajs in service.accounts.values() for name, stream in ajs.streams.items()}
    derived_memory = server_limits(service)[0]
    assert guards == {"AM": (100000, derived_memory), "AF": (-1, 10 * 1024 * 1024),
                      "CM": (-1, derived_memory), "CF": (-1, 10 * 1024 * 1024)}


def test_a_burst_stops_exactly_at_the_account_limit(tmp_path: Path) -> None:
    """Publishes batched into one RAFT entry are checked one by one once the batch would not fit:
    49 messages of 2017 stored bytes fit in max_mem 100000, the rest get 10002."""
    text = """
jetstream { store_dir: "%(store)s" }
accounts { A { users: [{user: a, password: a}], jetstream: { max_mem: 100000 } } }
"""
    options = options_from_text(text % {"store": tmp_path / "s"}, filename=str(tmp_path / "x.conf"))

    async def burst(url: str) -> list[dict[str, object]]:
        nc = await nats.connect(url, user="a", password="a", allow_reconnect=False)
        try:
            body = json.dumps({"name": "M", "subjects": ["m"], "storage": "memory"}).encode()
            await nc.request("$JS.API.STREAM.CREATE.M", body, timeout=5)
            inbox = nc.new_inbox()
            sub = await nc.subscribe(inbox)
            for _ in range(60):
                await nc.publish("m", BIG, reply=inbox)  # no waiting: they arrive in few batches
            return [json.loads((await sub.next_msg(timeout=5)).data) for _ in range(60)]
        finally:
            await nc.close()

    with InProcessServer(options) as server:
        acks = asyncio.run(asyncio.wait_for(burst(server.url), 30))
    assert [ack.get("seq") for ack in acks[:49]] == list(range(1, 50))
    refused = {"code": 400, "err_code": 10002, "description": "resource limits exceeded for account"}
    assert all(ack["error"] == refused for ack in acks[49:])


def test_jsz_reservations_as_nats_server(tmp_path: Path) -> None:
    """/jsz: the server's reservations at the top, each account's limits as its `reserved_*`."""
    text = """
server_name: S1
http: 127.0.0.1:%(http)d
jetstream { store_dir: "%(store)s" }
accounts { A { users: [{user: a, password: a}], jetstream: enabled }
           B { users: [{user: b, password: b}], jetstream: { max_file: 5000 } } }
"""
    import socket
    import urllib.request

    from appliance.server.monitor_view import start_monitoring

    def free_port() -> int:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            return int(probe.getsockname()[1])

    async def fill(url: str) -> None:
        for user in ("a", "b"):
            nc = await nats.connect(url, user=user, password=user, allow_reconnect=False)
            try:
                body = b'{"name":"S","storage":"memory","max_bytes":500}'
                await nc.request("$JS.API.STREAM.CREATE.S", body, timeout=5)
            finally:
                await nc.close()

    def reservations(port: int) -> tuple[object, ...]:
        url = f"http://127.0.0.1:{port}/jsz?accounts=true"
        jsz = json.loads(urllib.request.urlopen(url, timeout=5).read())
        details = sorted(
            (a["name"], a["reserved_memory"], a["reserved_storage"]) for a in jsz["account_details"]
        )
        return jsz["reserved_memory"], jsz["reserved_storage"], details

    found = []
    for name in ("real", "ours"):
        http = free_port()
        conf = text % {"http": http, "store": tmp_path / name}
        if name == "real":
            (tmp_path / "real.conf").write_text(conf)
            with NatsServer(["-c", str(tmp_path / "real.conf")]) as real:
                asyncio.run(asyncio.wait_for(fill(real.url), 20))
                found.append(reservations(http))
        else:
            options = options_from_text(conf, filename=str(tmp_path / "ours.conf"))
            with InProcessServer(options) as ours:
                listener = socket.socket()
                listener.bind(("127.0.0.1", 0))
                listener.listen(16)
                listener.setblocking(False)
                core = ours.server
                assert core is not None
                monitor = ours.call_async(lambda: start_monitoring(core, listener))
                try:
                    asyncio.run(asyncio.wait_for(fill(ours.url), 20))
                    found.append(reservations(listener.getsockname()[1]))
                finally:
                    ours.call_async(monitor.close)
                    listener.close()
    assert found[1] == found[0]
