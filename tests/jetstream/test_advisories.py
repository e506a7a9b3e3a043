"""Advisories on `$JS.EVENT.ADVISORY.>` and consumer pause/resume: one scenario against nats-server
2.15.1 and against appliance; the API answers and the advisories (subjects and JSON, with ids,
timestamps and connection details masked) must be the same."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime, timedelta

import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg


pytestmark = pytest.mark.integration

TIME_KEYS = {"created", "ts", "first_ts", "last_ts", "last_active", "time", "timestamp", "id"}
# connection details are not known to appliance's API audit
MASKED = {"server", "client", "pause_remaining", "ack_time"}
DEADLINE_S = 10.0
FIXED_TIMES = {"2099-01-01T00:00:00.5Z", "2000-01-01T00:00:00Z", "0001-01-01T00:00:00Z"}


def mask(value: object) -> object:
    if isinstance(value, dict):
        out: dict[str, object] = {}
        for key, item in value.items():
            if key in TIME_KEYS or key in MASKED:
                out[key] = "<masked>"
            elif key == "pause_until" and item not in FIXED_TIMES:
                out[key] = "<soon>"  # a pause that ends during the test
            elif key in ("request", "response") and isinstance(item, str):
                out[key] = mask(_json_or_text(item))
            else:
                out[key] = mask(item)
        return out
    if isinstance(value, list):
        return [mask(v) for v in value]
    return value


def _json_or_text(text: str) -> object:
    try:
        return json.loads(text)
    except ValueError:
        return text


class Recorder:
    def __init__(self, nc: Client) -> None:
        self.nc = nc
        self.answers: list[object] = []
        self.events: list[tuple[str, object]] = []

    async def on_event(self, msg: Msg) -> None:
        self.events.append((msg.subject, mask(json.loads(msg.data))))

    async def api(self, subject: str, body: object = b"") -> dict[str, object]:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        msg = await self.nc.request(subject, data, timeout=5)
        answer = json.loads(msg.data)
        self.answers.append(mask(answer))
        return answer

    async def wait_events(self, predicate: str, count: int = 1) -> None:
        deadline = time.monotonic() + DEADLINE_S
        while sum(1 for subject, _ in self.events if predicate in subject) < count:
            assert time.monotonic() < deadline, f"no {predicate} advisory; seen: {[e[0] for e in self.events]}"
            await asyncio.sleep(0.01)


def _in(seconds: float) -> str:
    return (datetime.now(UTC) + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


async def scenario(url: str) -> tuple[list[object], list[tuple[str, object]], list[object]]:
    nc = await nats.connect(url, allow_reconnect=False)
    rec = Recorder(nc)
    deliveries: list[object] = []
    try:
        await nc.subscribe("$JS.EVENT.>", cb=rec.on_event)
        await nc.flush()
        await rec.api("$JS.API.STREAM.CREATE.ADV", {"name": "ADV", "subjects": ["adv.>"],
                                                    "storage": "memory"})
        await rec.api("$JS.API.STREAM.UPDATE.ADV", {"name": "ADV", "subjects": ["adv.>"], "storage": "memory",
                                                    "max_msgs": 10})
        await rec.api("$JS.API.STREAM.INFO.NOPE")
        await rec.api("$JS.API.CONSUMER.CREATE.ADV.D1", {"stream_name": "ADV", "config": {
            "durable_name": "D1", "ack_policy": "explicit", "max_deliver": 2, "ack_wait": 300_000_000}})
        for index in range(3):
            await nc.publish(f"adv.{index}", str(index).encode())
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        await nc.publish("$JS.API.CONSUMER.MSG.NEXT.ADV.D1", b'{"batch":3,"expires":2000000000}', reply=inbox)
        got = [await sub.next_msg(timeout=5) for _ in range(3)]
        await nc.publish(got[0].reply, b"-NAK")
        await nc.publish(got[1].reply, b"+TERM")
        await nc.publish(got[2].reply, b"+TERM no longer wanted")
        await rec.wait_events("MSG_TERMINATED", 2)
        await rec.wait_events("MSG_NAKED")
        await nc.publish("$JS.API.CONSUMER.MSG.NEXT.ADV.D1", b'{"batch":1,"expires":2000000000}', reply=inbox)
        again = await sub.next_msg(timeout=5)
        deliveries.append([again.subject, again.data.decode(), again.reply.split(".")[4:7]])
        # not acked within ack_wait: the next pull finds max_deliver 2 reached
        await nc.publish("$JS.API.CONSUMER.MSG.NEXT.ADV.D1", b'{"batch":1,"expires":1000000000}', reply=inbox)
        await rec.wait_events("MAX_DELIVERIES")
        timeout = await sub.next_msg(timeout=5)
        deliveries.append([timeout.headers, timeout.data.decode()])
        # pause and resume
        await rec.api("$JS.API.CONSUMER.PAUSE.ADV.D1", {"pause_until": "2099-01-01T00:00:00.5Z"})
        await rec.api("$JS.API.CONSUMER.INFO.ADV.D1")
        await nc.publish("adv.late", b"late")
        await nc.publish("$JS.API.CONSUMER.MSG.NEXT.ADV.D1", b'{"batch":1,"no_wait":true}', reply=inbox)
        held = await sub.next_msg(timeout=5)
        deliveries.append([held.headers, held.data.decode()])
        await rec.api("$JS.API.CONSUMER.PAUSE.ADV.D1", b"")
        await rec.api("$JS.API.CONSUMER.INFO.ADV.D1")
        await rec.api("$JS.API.CONSUMER.PAUSE.ADV.D1", {"pause_until": "2000-01-01T00:00:00Z"})
        await rec.api("$JS.API.CONSUMER.INFO.ADV.D1")
        await rec.api("$JS.API.CONSUMER.PAUSE.ADV.D1", b"{bad")
        await rec.api("$JS.API.CONSUMER.PAUSE.ADV.D1", {"pause_until": "bad"})
        await rec.api("$JS.API.CONSUMER.PAUSE.ADV.D1", {"x": 1})
        await rec.api("$JS.API.CONSUMER.PAUSE.ADV.NOPE", b"")
        await rec.api("$JS.API.CONSUMER.PAUSE.NOPE.D1", b"")
        # created paused: nothing is delivered until the pause ends, then the waiting pull is served
        await rec.api("$JS.API.CONSUMER.CREATE.ADV.D2", {"stream_name": "ADV", "config": {
            "durable_name": "D2", "ack_policy": "explicit", "pause_until": _in(0.5)}})
        await nc.publish("$JS.API.CONSUMER.MSG.NEXT.ADV.D2", b'{"batch":1,"expires":5000000000}', reply=inbox)
        resumed = await sub.next_msg(timeout=5)
        deliveries.append([resumed.subject, resumed.data.decode()])
        await rec.wait_events("CONSUMER.PAUSE.ADV.D2", 2)
        # a create/update of an existing consumer keeps its pause (only the PAUSE API changes it)
        await rec.api("$JS.API.CONSUMER.CREATE.ADV.D2", {"stream_name": "ADV", "config": {
            "durable_name": "D2", "ack_policy": "explicit", "pause_until": "2099-01-01T00:00:00.5Z"}})
        await rec.api("$JS.API.CONSUMER.INFO.ADV.D2")
        # ack sampling: bad sample_freq values, then one sampled ack
        for bad in ("abc", "-5"):
            await rec.api("$JS.API.CONSUMER.CREATE.ADV.BAD", {"stream_name": "ADV", "config": {
                "durable_name": "BAD", "ack_policy": "explicit", "sample_freq": bad}})
        await rec.api("$JS.API.CONSUMER.CREATE.ADV.S", {"stream_name": "ADV", "config": {
            "durable_name": "S", "ack_policy": "explicit", "sample_freq": "100%",
            "filter_subject": "adv.late"}})
        await nc.publish("$JS.API.CONSUMER.MSG.NEXT.ADV.S", b'{"batch":1,"expires":2000000000}', reply=inbox)
        sampled = await sub.next_msg(timeout=5)
        await nc.publish(sampled.reply, b"+ACK")
        await rec.wait_events("METRIC.CONSUMER.ACK")
        # an ephemeral consumer nobody pulls from is removed after inactive_threshold
        await rec.api("$JS.API.CONSUMER.CREATE.ADV.EPH", {"stream_name": "ADV", "config": {
            "name": "EPH", "inactive_threshold": 200_000_000}})
        await rec.wait_events("CONSUMER.DELETED.ADV.EPH")
        await rec.api("$JS.API.CONSUMER.DELETE.ADV.D1")
        deleted = await rec.api("$JS.API.STREAM.DELETE.ADV")
        assert deleted.get("success") is True, deleted
        await rec.wait_events("STREAM.DELETED")
        await rec.wait_events("ADVISORY.API", len(rec.answers))
    finally:
        await nc.close()
    return rec.answers, sorted(rec.events, key=lambda e: (e[0], json.dumps(e[1], sort_keys=True))), deliveries


REFERENCE_ATTEMPTS = 3


def reference(url: str) -> tuple[list[object], list[tuple[str, object]], list[object]]:
    """The scenario against nats-server. 2.15.1 now and then (about 1 run in 10 here) answers the
    stream delete with success and sends the consumers' DELETED advisories but never the stream's
    STREAM.DELETED; such a run is not a reference and is run again. Appliance gets no retry."""
    for _ in range(REFERENCE_ATTEMPTS - 1):
        try:
            return asyncio.run(asyncio.wait_for(scenario(url), 60))
        except AssertionError as exc:
            if not str(exc).startswith("no STREAM.DELETED advisory"):
                raise
    return asyncio.run(asyncio.wait_for(scenario(url), 60))


def test_advisories_and_pause_as_nats_server(servers: tuple[str, str]) -> None:
    real_url, our_url = servers
    want_answers, want_events, want_deliveries = reference(real_url)
    answers, events, deliveries = asyncio.run(asyncio.wait_for(scenario(our_url), 60))
    for index, (want, have) in enumerate(zip(want_answers, answers, strict=True)):
        assert have == want, f"answer {index}"
    assert deliveries == want_deliveries
    assert [subject for subject, _ in events] == [subject for subject, _ in want_events]
    for (subject, have), (_, want) in zip(events, want_events, strict=True):
        assert have == want, subject
