"""A pull request ends at its `expires` (408, millisecond timer) and is dropped; a request whose
client gave up (its reply inbox unsubscribed) never captures a message published later: the next
fetch gets it within milliseconds, as on nats-server 2.15.1. Both servers run the same steps;
outcomes are compared and the timings bounded."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client

from appliance.testing.process import ApplianceProcess, free_port

from .conftest import observe_with

pytestmark = pytest.mark.integration

SLACK_S = 0.5  # scheduling slack on a loaded test machine (the bugs it catches cost seconds)


async def api(nc: Client, subject: str, body: object) -> dict:
    data = b"" if body is None else json.dumps(body).encode()
    return json.loads((await nc.request(subject, data, timeout=5)).data)


async def pull_once(nc: Client, body: dict[str, object], timeout: float) -> tuple[object, float]:
    """The first answer to one pull request and how long it took."""
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    start = time.monotonic()
    await nc.publish("$JS.API.CONSUMER.MSG.NEXT.X.D", json.dumps(body).encode(), reply=inbox)
    try:
        msg = await sub.next_msg(timeout=timeout)
    except nats.errors.TimeoutError:
        return "nothing", time.monotonic() - start
    finally:
        await sub.unsubscribe()
    elapsed = time.monotonic() - start
    if msg.headers and msg.headers.get("Status"):
        return ("status", msg.headers["Status"], msg.headers.get("Description")), elapsed
    return ("message", msg.data), elapsed


async def scenario(nc: Client) -> list[object]:
    assert "error" not in await api(nc, "$JS.API.STREAM.CREATE.X", {"name": "X", "subjects": ["x"]})
    made = await api(nc, "$JS.API.CONSUMER.CREATE.X.D", {"stream_name": "X", "config": {"durable_name": "D", "ack_policy": "explicit"}})
    assert "error" not in made
    seen: list[object] = []

    # 1. expires 300 ms: the 408 comes at the deadline, not before, not long after
    answer, elapsed = await pull_once(nc, {"batch": 1, "expires": 300_000_000}, 3.0)
    seen.append(answer)
    seen.append(0.29 <= elapsed < 0.3 + SLACK_S)
    await nc.publish("x", b"after expiry")
    answer, elapsed = await pull_once(nc, {"batch": 1, "expires": 2_000_000_000}, 3.0)
    seen.extend([answer, elapsed < SLACK_S])  # the expired request took nothing

    # 2. a client gives up on a long request (its inbox unsubscribed); a later message goes to
    #    the next request at once
    abandoned = nc.new_inbox()
    sub = await nc.subscribe(abandoned)
    await nc.publish("$JS.API.CONSUMER.MSG.NEXT.X.D", b'{"batch":1,"expires":10000000000}', reply=abandoned)
    await nc.flush()
    await asyncio.sleep(0.4)  # the client's own timeout
    await sub.unsubscribe()
    await nc.flush()
    info = await api(nc, "$JS.API.CONSUMER.INFO.X.D", None)
    seen.append(("num_waiting", info["num_waiting"]))
    await nc.request("x", b"for the next fetch", timeout=5)
    answer, elapsed = await pull_once(nc, {"batch": 1, "expires": 2_000_000_000}, 3.0)
    seen.extend([answer, elapsed < SLACK_S])
    return seen


def observe(url: str) -> list[object]:
    return observe_with(url, scenario, 60)


def test_expired_and_abandoned_pull_requests_take_nothing(servers: tuple[str, str]) -> None:
    real_url, our_url = servers
    expected = observe(real_url)
    got = observe(our_url)
    assert expected[1] and expected[3] and expected[6], expected  # nats-server's timings hold here
    assert got == expected


def test_on_the_real_server_a_waiting_request_from_any_worker_is_served_and_an_abandoned_one_is_not(
    tmp_path: Path,
) -> None:
    """`appliance run` with its workers: a request older than the interest grace whose client (on
    whichever worker it landed) still listens gets the next message; one whose client left does not."""
    port = free_port()

    async def main() -> list[object]:
        admin = await nats.connect(f"nats://127.0.0.1:{port}", allow_reconnect=False)
        await api(admin, "$JS.API.STREAM.CREATE.X", {"name": "X", "subjects": ["x"]})
        await api(admin, "$JS.API.CONSUMER.CREATE.X.D", {"stream_name": "X", "config": {"durable_name": "D", "ack_policy": "explicit"}})
        seen: list[object] = []
        for index in range(6):
            nc = await nats.connect(f"nats://127.0.0.1:{port}", allow_reconnect=False)
            gone = nc.new_inbox()
            gone_sub = await nc.subscribe(gone)
            await nc.publish("$JS.API.CONSUMER.MSG.NEXT.X.D", b'{"batch":1,"expires":8000000000}', reply=gone)
            await nc.flush()
            await gone_sub.unsubscribe()
            inbox = nc.new_inbox()
            sub = await nc.subscribe(inbox)
            await nc.publish("$JS.API.CONSUMER.MSG.NEXT.X.D", b'{"batch":1,"expires":8000000000}', reply=inbox)
            await nc.flush()
            await asyncio.sleep(0.4)  # both requests are past the interest grace
            await admin.request("x", b"m%d" % index, timeout=5)
            msg = await sub.next_msg(timeout=5)
            seen.append(msg.data)
            await msg.ack_sync()
            await nc.close()
        await admin.close()
        return seen

    with ApplianceProcess(["-js", "-sd", str(tmp_path / "store"), "-a", "127.0.0.1", "-p", str(port)], log_dir=tmp_path):
        assert asyncio.run(asyncio.wait_for(main(), 60)) == [b"m%d" % i for i in range(6)]
