"""max_deliver against nats-server 2.15.1: one pull scenario (ack_wait 0.5 s, max_deliver 2; some
messages acked, some left to exceed their deliveries; explicit and all ack policies; limits,
workqueue and interest retention) run on both servers. CONSUMER.INFO's counters and floors, the
deliveries, the stream's state and the advisories (subject, type, stream_seq, deliveries) must be
the same; times are masked. The explicit runs also restart the server: nothing given up on is
redelivered and the state reads the same."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol

import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from appliance.testing.inproc import InProcessServer
from appliance.testing.natsserver import NatsServer

pytestmark = pytest.mark.integration

DEADLINE_S = 10.0
INFO_KEYS = ("delivered", "ack_floor", "num_ack_pending", "num_redelivered", "num_pending", "num_waiting")


class Served(Protocol):
    @property
    def url(self) -> str: ...


Starter = Callable[[Path], AbstractContextManager[Served]]


def _info_view(info: dict[str, object]) -> dict[str, object]:
    out: dict[str, object] = {}
    for key in INFO_KEYS:
        value = info.get(key)
        if isinstance(value, dict):
            value = {k: v for k, v in value.items() if k != "last_active"}
        out[key] = value
    return out


class Run:
    """One client session: API calls, pulls and the consumer advisories it saw."""

    def __init__(self, nc: Client, log: list[object]) -> None:
        self.nc = nc
        self.log = log
        self.events: list[tuple[str, object, object, object]] = []
        self.inbox = nc.new_inbox()

    async def start(self) -> None:
        await self.nc.subscribe("$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.>", cb=self._on_event)
        self.sub = await self.nc.subscribe(self.inbox)
        await self.nc.flush()

    async def _on_event(self, msg: Msg) -> None:
        event = json.loads(msg.data)
        self.events.append((msg.subject, event.get("type"), event.get("stream_seq"), event.get("deliveries")))

    async def api(self, subject: str, body: object = b"") -> dict[str, object]:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        reply = await self.nc.request(subject, data, timeout=5)
        return json.loads(reply.data)  # type: ignore[no-any-return]

    async def info(self, tag: str) -> None:
        self.log.append((tag, _info_view(await self.api("$JS.API.CONSUMER.INFO.S.D"))))

    async def stream_state(self, tag: str) -> None:
        state = (await self.api("$JS.API.STREAM.INFO.S"))["state"]
        assert isinstance(state, dict)
        self.log.append((tag, state["messages"], state["first_seq"], state["last_seq"]))

    async def pull(self, tag: str, batch: int, expires_s: float) -> list[Msg]:
        """One pull request; its messages until the batch is full or a status (408) ends it."""
        request = {"batch": batch, "expires": int(expires_s * 1e9)}
        await self.nc.publish("$JS.API.CONSUMER.MSG.NEXT.S.D", json.dumps(request).encode(), reply=self.inbox)
        got: list[Msg] = []
        seen: list[object] = []
        while len(got) < batch:
            msg = await self.sub.next_msg(timeout=expires_s + DEADLINE_S)
            if msg.headers and msg.headers.get("Status"):
                seen.append(("status", msg.headers.get("Status")))
                break
            got.append(msg)
            seen.append((msg.data.decode(), msg.reply.split(".")[4:7]))
        self.log.append((tag, seen))
        return got

    async def ack(self, msg: Msg) -> None:
        await self.nc.request(msg.reply, b"+ACK", timeout=5)  # AckSync: applied when answered

    async def pull_until_given_up(self, tag: str, count: int) -> None:
        """Pull (short requests, deadline) until `count` max-deliveries advisories came: a message
        is given up on only when a delivery is attempted after its ack_wait. Logs what the pulls
        delivered besides (nothing is expected)."""
        deadline = asyncio.get_running_loop().time() + DEADLINE_S
        delivered: list[object] = []
        while len(self.events) < count:
            assert asyncio.get_running_loop().time() < deadline, f"advisories {self.events}"
            before = len(self.log)
            delivered += [m.data.decode() for m in await self.pull(tag, 5, 0.4)]
            del self.log[before:]
        self.log.append((tag, delivered))

    async def wait_events(self, count: int) -> None:
        deadline = asyncio.get_running_loop().time() + DEADLINE_S
        while len(self.events) < count:
            assert asyncio.get_running_loop().time() < deadline, f"advisories {self.events}"
            await asyncio.sleep(0.01)


async def _first_session(url: str, policy: str, retention: str, log: list[object]) -> list[object]:
    nc = await nats.connect(url, allow_reconnect=False)
    try:
        run = Run(nc, log)
        await run.start()
        await run.api("$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"], "retention": retention})
        await run.api("$JS.API.CONSUMER.CREATE.S.D", {"stream_name": "S", "config": {
            "durable_name": "D", "ack_policy": policy, "ack_wait": 500_000_000, "max_deliver": 2}})
        for index in range(1, 6):
            await nc.request(f"s.{index}", str(index).encode(), timeout=5)
        first = await run.pull("pull 1", 5, 1.0)
        await run.info("delivered once")
        await run.ack(first[0])
        if policy == "explicit":
            await run.ack(first[2])
        await run.info("acked")
        # ack_wait passes while this request waits: the unacked ones come again (delivery 2)
        second = await run.pull("pull 2 (redeliveries)", 3 if policy == "explicit" else 4, 3.0)
        await run.info("redelivered")
        await run.ack(next(m for m in second if m.data == b"4"))
        await run.info("acked 4")
        # max_deliver 2 reached: given up when the next pull looks for them, with the advisory
        await run.pull_until_given_up("pulls (given up)", 2 if policy == "explicit" else 1)
        await run.info("given up")
        await run.stream_state("stream after give-up")
        late = next(m for m in second if m.data == (b"2" if policy == "explicit" else b"5"))
        await run.ack(late)
        await run.info("late ack of a given-up message")
        await run.stream_state("stream after late ack")
        await nc.request("s.6", b"6", timeout=5)
        await run.pull("pull 4 (new message)", 1, 1.0)
        await run.info("delivered 6")
        return sorted(run.events, key=lambda e: json.dumps(e))
    finally:
        await nc.close()


async def _after_restart(url: str, log: list[object]) -> list[object]:
    nc = await nats.connect(url, allow_reconnect=False)
    try:
        run = Run(nc, log)
        await run.start()
        await run.info("after restart")
        await run.stream_state("stream after restart")
        # 6 is pending and its ack_wait passes: redelivered; the given-up 2 and 5 are not
        again = await run.pull("pull after restart", 1, 3.0)
        await run.info("after restart and pull")
        await run.pull("pull after restart (nothing more)", 5, 0.1)
        for msg in again:
            await run.ack(msg)
        await run.info("after restart, all acked")
        await run.stream_state("stream at the end")
        return sorted(run.events, key=lambda e: json.dumps(e))
    finally:
        await nc.close()


def _scenario(start: Starter, tmp: Path, policy: str, retention: str, restart: bool) -> list[object]:
    log: list[object] = []
    with start(tmp) as server:
        log.append(asyncio.run(asyncio.wait_for(_first_session(server.url, policy, retention, log), 60)))
    if restart:
        with start(tmp) as server:
            log.append(asyncio.run(asyncio.wait_for(_after_restart(server.url, log), 60)))
    return log


def _nats_server(path: Path) -> AbstractContextManager[Served]:
    return NatsServer(["-js", "-sd", str(path / "ns")])


def _appliance(path: Path) -> AbstractContextManager[Served]:
    return InProcessServer(jetstream_dir=str(path / "ours"))


CASES = [
    ("explicit", "limits", True),
    ("explicit", "workqueue", True),
    ("explicit", "interest", False),
    ("all", "limits", True),
    ("all", "interest", True),
]


@pytest.mark.parametrize(("policy", "retention", "restart"), CASES)
def test_max_deliver_as_nats_server(tmp_path: Path, policy: str, retention: str, restart: bool) -> None:
    want = _scenario(_nats_server, tmp_path, policy, retention, restart)
    have = _scenario(_appliance, tmp_path, policy, retention, restart)
    for index, (expected, actual) in enumerate(zip(want, have, strict=True)):
        assert actual == expected, f"step {index}: {expected!r}"


def test_given_up_messages_survive_kill_9(tmp_path: Path) -> None:
    """A message given up on stays given up when the JetStream worker is killed with SIGKILL:
    the restarted consumer reports the same state and never redelivers it."""
    import os
    import signal

    from appliance.testing.process import ApplianceProcess, free_port

    from .test_kill9 import _jetstream_worker, _wait_for_restart, _wait_until_serving

    port = free_port()
    url = f"nats://127.0.0.1:{port}"

    async def before(log: list[object]) -> None:
        nc = await nats.connect(url, allow_reconnect=False)
        try:
            run = Run(nc, log)
            await run.start()
            await run.api("$JS.API.STREAM.CREATE.S", {
                "name": "S", "subjects": ["s.>"], "retention": "workqueue"})
            await run.api("$JS.API.CONSUMER.CREATE.S.D", {"stream_name": "S", "config": {
                "durable_name": "D", "ack_policy": "explicit", "ack_wait": 300_000_000, "max_deliver": 2}})
            for index in (1, 2, 3):
                await nc.request(f"s.{index}", str(index).encode(), timeout=5)
            first = await run.pull("first", 3, 1.0)
            await run.ack(first[0])
            await run.pull("redelivered", 2, 3.0)
            await run.pull_until_given_up("given up", 2)
            await run.info("before kill")
        finally:
            await nc.close()

    async def after(log: list[object]) -> None:
        nc = await nats.connect(url, allow_reconnect=False)
        try:
            run = Run(nc, log)
            await run.start()
            await run.info("after kill")
            await run.stream_state("stream after kill")
            await run.pull("nothing redelivered", 5, 0.6)
        finally:
            await nc.close()

    log: list[object] = []
    args = ["-js", "-sd", str(tmp_path / "store"), "-a", "127.0.0.1", "-p", str(port)]
    with ApplianceProcess(args, log_dir=tmp_path) as app:
        asyncio.run(asyncio.wait_for(before(log), 30))
        os.kill(_jetstream_worker(app.log()), signal.SIGKILL)
        _wait_for_restart(app)
        _wait_until_serving(port)
        asyncio.run(asyncio.wait_for(after(log), 30))
    info = {entry[0]: entry[1] for entry in log if isinstance(entry, tuple) and len(entry) == 2}
    held = {"delivered": {"consumer_seq": 5, "stream_seq": 3},
            "ack_floor": {"consumer_seq": 1, "stream_seq": 1},
            "num_ack_pending": 0, "num_redelivered": 2, "num_pending": 0, "num_waiting": 0}
    assert info["before kill"] == info["after kill"] == held
    assert log[-2] == ("stream after kill", 2, 2, 3)  # a workqueue stream keeps given-up messages
    assert log[-1] == ("nothing redelivered", [("status", "408")])


async def _max_deliver_one(url: str, log: list[object]) -> list[object]:
    """max_deliver 1: nats-server gives up when ack_wait expires (no pull needed), a -NAK'd
    message on the next delivery attempt, and reports num_redelivered 0."""
    nc = await nats.connect(url, allow_reconnect=False)
    try:
        run = Run(nc, log)
        await run.start()
        await run.api("$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"], "retention": "interest"})
        await run.api("$JS.API.CONSUMER.CREATE.S.D", {"stream_name": "S", "config": {
            "durable_name": "D", "ack_policy": "explicit", "ack_wait": 300_000_000, "max_deliver": 1}})
        for index in (1, 2, 3):
            await nc.request(f"s.{index}", str(index).encode(), timeout=5)
        first = await run.pull("pull", 3, 1.0)
        await run.ack(first[1])
        await nc.request(first[2].reply, b"-NAK", timeout=5)  # given up on the next attempt
        await run.info("nak'd")
        await run.pull_until_given_up("pulls", 2)  # 1 is given up at ack_wait, pull or not
        await run.info("given up at ack_wait")
        await run.stream_state("stream")
        await run.pull("nothing redelivered", 3, 0.5)
        await run.ack(first[0])
        await run.info("late ack")
        await run.stream_state("stream after late ack")
        return sorted(run.events, key=lambda e: json.dumps(e))
    finally:
        await nc.close()


def test_max_deliver_one_as_nats_server(tmp_path: Path) -> None:
    results = []
    for start in (_nats_server, _appliance):
        log: list[object] = []
        with start(tmp_path) as server:
            log.append(asyncio.run(asyncio.wait_for(_max_deliver_one(server.url, log), 30)))
        results.append(log)
    want, have = results
    for index, (expected, actual) in enumerate(zip(want, have, strict=True)):
        assert actual == expected, f"step {index}: {expected!r}"


async def _push(url: str, log: list[object]) -> list[object]:
    """A push consumer: given up on as soon as the redelivery is due (it always has a target)."""
    nc = await nats.connect(url, allow_reconnect=False)
    try:
        run = Run(nc, log)
        await run.start()
        got: list[Msg] = []

        async def on_msg(msg: Msg) -> None:
            got.append(msg)
            log.append(("push", msg.data.decode(), msg.reply.split(".")[4:7]))

        await nc.subscribe("deliver.here", cb=on_msg)
        await run.api("$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"], "retention": "workqueue"})
        await run.api("$JS.API.CONSUMER.CREATE.S.D", {"stream_name": "S", "config": {
            "durable_name": "D", "deliver_subject": "deliver.here", "ack_policy": "explicit",
            "ack_wait": 300_000_000, "max_deliver": 2}})
        for index in (1, 2):
            await nc.request(f"s.{index}", str(index).encode(), timeout=5)
        await run.wait_events(2)  # both delivered twice, then given up
        await run.ack(got[0])  # a late ack of 1 (its first delivery's ack subject)
        await run.info("push given up")
        await run.stream_state("push stream")
        return sorted(run.events, key=lambda e: json.dumps(e))
    finally:
        await nc.close()


def test_push_consumer_max_deliver_as_nats_server(tmp_path: Path) -> None:
    results = []
    for start in (_nats_server, _appliance):
        log: list[object] = []
        with start(tmp_path) as server:
            log.append(asyncio.run(asyncio.wait_for(_push(server.url, log), 30)))
        results.append(sorted(log, key=json.dumps))  # two pushes of one loop turn may interleave
    want, have = results
    assert have == want
