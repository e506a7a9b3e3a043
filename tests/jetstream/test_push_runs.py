"""Push consumers deliver new messages in runs (consumer._deliver_run, one loop per turn, as pull
requests do) and take the general path for redeliveries: the same ack subjects, consumer
sequences, pending counts, flow control points, queue-group spread and stored positions as one
delivery at a time."""

from __future__ import annotations

import asyncio
import json

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from appliance import limits
from appliance.testing.inproc import InProcessServer
from .conftest import api, run_with
from .test_perf_paths_fetch import ack_fields

WAIT_S = 10.0


async def create_push(nc: Client, stream: str, name: str, **config: object) -> dict:
    body = {"stream_name": stream, "config": {"durable_name": name, **config}}
    created = await api(nc, f"$JS.API.CONSUMER.CREATE.{stream}.{name}", json.dumps(body).encode())
    assert "error" not in created, created
    return created


async def info_once_acks_applied(nc: Client, stream: str, name: str) -> dict:
    """CONSUMER.INFO once no ack is pending, or the last answer at WAIT_S. Acks are applied by the
    consumer after the PUBs that carry them are handled (as in nats-server), and nats-py's flush()
    writes its PING ahead of the acks still in its buffer: one INFO right after may see some pending."""
    deadline = asyncio.get_running_loop().time() + WAIT_S
    while True:
        info = await api(nc, f"$JS.API.CONSUMER.INFO.{stream}.{name}")
        if info.get("num_ack_pending") == 0 or asyncio.get_running_loop().time() > deadline:
            return info
        await asyncio.sleep(0.02)


async def collect(sub, want: int) -> list[Msg]:  # type: ignore[no-untyped-def]
    """The next `want` messages of a subscription (status messages included)."""
    return [await sub.next_msg(timeout=WAIT_S) for _ in range(want)]


def is_status(msg: Msg) -> bool:
    return bool(msg.headers and msg.headers.get("Status"))


async def fill(js: JetStreamContext, subject: str, count: int) -> None:
    await asyncio.gather(*[js.publish(subject, b"m%d" % index) for index in range(count)])


def test_a_push_run_numbers_deliveries_as_one_at_a_time_and_a_nak_goes_the_general_path(
    js_server: InProcessServer,
) -> None:
    total = limits.JS_DELIVER_BATCH_MAX + 40  # more than one run (one loop turn each)

    async def scenario(nc: Client, js: JetStreamContext) -> None:
        await js.add_stream(name="P", subjects=["p.>"])
        for index in range(total):
            await js.publish(f"p.{index % 3}", b"m%d" % index)
        sub = await nc.subscribe("deliver.p")
        await create_push(
            nc, "P", "D", deliver_subject="deliver.p", ack_policy="explicit", ack_wait=30_000_000_000
        )
        first = await collect(sub, total)
        assert [ack_fields(m.reply) for m in first] == [(1, s, s, total - s) for s in range(1, total + 1)]
        assert [m.subject for m in first[:4]] == ["p.0", "p.1", "p.2", "p.0"]
        assert [m.data for m in first[-2:]] == [b"m%d" % (total - 2), b"m%d" % (total - 1)]
        await nc.publish(first[4].reply, b"-NAK")  # redelivered at once, through the general path
        redelivered = (await collect(sub, 1))[0]
        assert ack_fields(redelivered.reply) == (2, 5, total + 1, 0)
        await js.publish("p.9", b"late")  # a new message after the redelivery: a run again
        late = (await collect(sub, 1))[0]
        assert (late.subject, ack_fields(late.reply)) == ("p.9", (1, total + 1, total + 2, 0))
        for msg in [*first, late]:
            await nc.publish(msg.reply, b"+ACK")
        await nc.publish(redelivered.reply, b"+ACK")
        await nc.flush()
        info = await info_once_acks_applied(nc, "P", "D")
        assert info["delivered"] == {**info["delivered"], "consumer_seq": total + 2, "stream_seq": total + 1}
        assert info["num_ack_pending"] == 0 and info["num_redelivered"] == 0 and info["num_pending"] == 0

    run_with(js_server.url, scenario)


def test_flow_control_stops_a_run_at_the_same_message_and_delivery_resumes_on_the_reply(
    js_server: InProcessServer,
) -> None:
    per_request = limits.JS_FLOW_CONTROL_MSGS
    total = per_request * 2 + 5

    async def scenario(nc: Client, js: JetStreamContext) -> None:
        await js.add_stream(name="F", subjects=["f"])
        await fill(js, "f", total)
        sub = await nc.subscribe("deliver.f")  # a core subscriber: flow control is answered by hand
        await create_push(nc, "F", "C", deliver_subject="deliver.f", ack_policy="none", flow_control=True,
                          idle_heartbeat=30_000_000_000)
        for round_number in range(2):
            data = await collect(sub, per_request)
            assert not any(is_status(m) for m in data)
            assert ack_fields(data[0].reply)[2] == round_number * per_request + 1
            request = (await collect(sub, 1))[0]  # right after the last message of the run
            assert request.headers is not None and request.headers["Status"] == "100"
            assert request.headers["Description"] == "FlowControl Request"
            assert request.reply.startswith("$JS.FC.F.C.")
            try:  # held: nothing more until the request is answered
                extra = await sub.next_msg(timeout=0.3)
                raise AssertionError(f"delivered while held by flow control: {extra}")
            except TimeoutError:
                pass
            await nc.publish(request.reply, b"")
        rest = await collect(sub, 5)
        assert [ack_fields(m.reply)[2] for m in rest] == list(range(2 * per_request + 1, total + 1))

    run_with(js_server.url, scenario)


def test_a_deliver_group_spreads_a_run_over_its_members_each_message_once(js_server: InProcessServer) -> None:
    total = 300

    async def scenario(nc: Client, js: JetStreamContext) -> None:
        await js.add_stream(name="G", subjects=["g"])
        await fill(js, "g", total)
        members = [await nc.subscribe("deliver.g", queue="workers") for _ in range(2)]
        await create_push(
            nc, "G", "Q", deliver_subject="deliver.g", deliver_group="workers", ack_policy="none"
        )
        seen: list[int] = []
        deadline = asyncio.get_running_loop().time() + WAIT_S
        while len(seen) < total and asyncio.get_running_loop().time() < deadline:
            for member in members:
                while member.pending_msgs:
                    seen.append(ack_fields((await member.next_msg(timeout=WAIT_S)).reply)[1])
            await asyncio.sleep(0.01)
        assert sorted(seen) == list(range(1, total + 1))
        assert all(member.delivered > 0 for member in members)

    run_with(js_server.url, scenario)


def test_ack_none_runs_store_the_delivered_position_across_a_restart(store_dir: str) -> None:
    total = limits.JS_DELIVER_BATCH_MAX * 2 + 7

    async def first_life(nc: Client, js: JetStreamContext) -> None:
        await js.add_stream(name="N", subjects=["n"])
        await fill(js, "n", total)
        sub = await nc.subscribe("deliver.n")
        await create_push(nc, "N", "D", deliver_subject="deliver.n", ack_policy="none")
        got = await collect(sub, total)
        assert [ack_fields(m.reply)[1:3] for m in got] == [(s, s) for s in range(1, total + 1)]
        await sub.unsubscribe()
        info = await api(nc, "$JS.API.CONSUMER.INFO.N.D")
        positions = {"consumer_seq": total, "stream_seq": total}
        assert {k: info["delivered"][k] for k in positions} == positions
        assert {k: info["ack_floor"][k] for k in positions} == positions
        await js.publish("n", b"after")

    async def second_life(nc: Client, js: JetStreamContext) -> None:
        info = await api(nc, "$JS.API.CONSUMER.INFO.N.D")
        assert (info["delivered"]["consumer_seq"], info["delivered"]["stream_seq"]) == (total, total)
        assert (info["ack_floor"]["consumer_seq"], info["ack_floor"]["stream_seq"]) == (total, total)
        sub = await nc.subscribe("deliver.n")
        only = (await collect(sub, 1))[0]
        assert (only.data, ack_fields(only.reply)[1:3]) == (b"after", (total + 1, total + 1))

    with InProcessServer(jetstream_dir=store_dir) as server:
        run_with(server.url, first_life)
    with InProcessServer(jetstream_dir=store_dir) as server:
        run_with(server.url, second_life)
