"""The pull delivery run (consumer._deliver_run, the common case in one loop) and the general
delivery path produce the same deliveries: ack subjects with consecutive consumer sequences,
pending counts, redeliveries interleaved, max_bytes and filtered requests on the general path."""

from __future__ import annotations

import json

from nats.aio.client import Client
from nats.js import JetStreamContext

from appliance.testing.inproc import InProcessServer
from .conftest import api, run_with


async def pull(
    nc: Client, stream: str, consumer: str, body: dict[str, object], want: int
) -> list[tuple[str, str]]:
    """(subject, reply) of the messages one pull request brings (until `want` or a status)."""
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    await nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}", json.dumps(body).encode(), reply=inbox)
    got: list[tuple[str, str]] = []
    while len(got) < want:
        msg = await sub.next_msg(timeout=5)
        if msg.headers and msg.headers.get("Status"):
            break
        got.append((msg.subject, msg.reply))
    await sub.unsubscribe()
    return got


def ack_fields(reply: str) -> tuple[int, int, int, int]:
    """(delivered count, stream seq, consumer seq, pending) of a v1 ack subject."""
    tokens = reply.split(".")
    assert tokens[:2] == ["$JS", "ACK"] and len(tokens) == 9
    return int(tokens[4]), int(tokens[5]), int(tokens[6]), int(tokens[8])


def test_runs_and_the_general_path_deliver_the_same_sequence(js_server: InProcessServer) -> None:
    async def scenario(nc: Client, js: JetStreamContext) -> None:
        await js.add_stream(name="R", subjects=["r.>"])
        for index in range(40):
            await js.publish(f"r.{index % 2}", b"m%02d" % index)
        await api(nc, "$JS.API.CONSUMER.CREATE.R.D", json.dumps(
            {"stream_name": "R", "config": {"durable_name": "D", "ack_policy": "explicit"}}).encode())
        first = await pull(nc, "R", "D", {"batch": 10, "expires": 2_000_000_000}, 10)  # a run
        assert [ack_fields(r) for _, r in first] == [(1, s, s, 40 - s) for s in range(1, 11)]
        await nc.publish(first[0][1], b"-NAK")  # a redelivery waits: the next pull takes the general path
        await nc.flush()
        second = await pull(nc, "R", "D", {"batch": 5, "expires": 2_000_000_000}, 5)
        assert ack_fields(second[0][1]) == (2, 1, 11, 30)
        assert [ack_fields(r) for _, r in second[1:]] == [(1, s, s + 1, 40 - s) for s in range(11, 15)]
        sized = await pull(nc, "R", "D", {"batch": 100, "max_bytes": 400, "expires": 2_000_000_000}, 100)
        assert 0 < len(sized) < 10  # max_bytes: the general path ends the request
        rest = await pull(nc, "R", "D", {"batch": 100, "expires": 2_000_000_000}, 40)
        fields = [ack_fields(r) for _, r in sized + rest]
        assert [f[1] for f in fields] == list(range(15, 41))
        assert [f[2] for f in fields] == list(range(16, 42))  # consumer sequences stay consecutive
        assert [f[3] for f in fields] == [40 - s for s in range(15, 41)]
        assert [subject for subject, _ in rest][-1] == "r.1"
        info = await api(nc, "$JS.API.CONSUMER.INFO.R.D")
        assert (info["delivered"]["consumer_seq"], info["delivered"]["stream_seq"]) == (41, 40)
        assert info["num_pending"] == 0 and info["num_ack_pending"] == 40

    run_with(js_server.url, scenario)


def test_ack_all_and_ack_none_runs_keep_the_floors(js_server: InProcessServer) -> None:
    async def scenario(nc: Client, js: JetStreamContext) -> None:
        await js.add_stream(name="A", subjects=["a"])
        for index in range(30):
            await js.publish("a", b"%d" % index)
        for name, policy in (("ALL", "all"), ("NONE", "none")):
            await api(nc, f"$JS.API.CONSUMER.CREATE.A.{name}", json.dumps(
                {"stream_name": "A", "config": {"durable_name": name, "ack_policy": policy}}).encode())
            got = await pull(nc, "A", name, {"batch": 30, "expires": 2_000_000_000}, 30)
            assert [ack_fields(r)[1:3] for _, r in got] == [(s, s) for s in range(1, 31)]
            if policy == "all":
                await nc.publish(got[19][1], b"+ACK")  # acks 1..20
                await nc.flush()
            info = await api(nc, f"$JS.API.CONSUMER.INFO.A.{name}")
            floor = info["ack_floor"]["stream_seq"]
            pending = info["num_ack_pending"]
            for _ in range(50):
                if policy == "none" or floor == 20:
                    break
                info = await api(nc, f"$JS.API.CONSUMER.INFO.A.{name}")
                floor, pending = info["ack_floor"]["stream_seq"], info["num_ack_pending"]
            assert (floor, pending) == ((20, 10) if policy == "all" else (30, 0))

    run_with(js_server.url, scenario)
