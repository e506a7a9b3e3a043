"""`$JS.API.CONSUMER.RESET.<stream>.<consumer>` as nats-server 2.15.1 answers it: back to just
above the ack floor (no body) or to a sequence, consumer sequences starting again at 1, refused
below where the deliver policy starts (10204), bad JSON 10025, and no answer at all for a
consumer that does not exist (nats-server answers on the consumer's own subscription). The same
requests go to both servers; answers and the deliveries after each reset are compared."""

from __future__ import annotations

import asyncio
import json

import nats
import pytest
from nats.aio.client import Client

from appliance.jetstream import consumer_state

from .conftest import observe_with

pytestmark = pytest.mark.integration


async def api(nc: Client, subject: str, body: bytes = b"") -> dict | str:
    try:
        return json.loads((await nc.request(subject, body, timeout=1.5)).data)
    except nats.errors.TimeoutError:
        return "no reply"


def answer(reply: dict | str) -> object:
    """The parts of a reset answer that must agree (times and ids left out)."""
    if isinstance(reply, str):
        return reply
    if "error" in reply:
        error = reply["error"]
        return ("error", error["code"], error["err_code"], None if error["err_code"] == 10025 else error["description"])
    return (reply["type"], reply.get("reset_seq"), reply["name"],
            {k: reply["delivered"][k] for k in ("consumer_seq", "stream_seq")},
            {k: reply["ack_floor"][k] for k in ("consumer_seq", "stream_seq")},
            reply["num_ack_pending"], reply["num_redelivered"], reply["num_pending"], reply["num_waiting"])


async def fetch(nc: Client, consumer: str, batch: int = 10) -> list[tuple[int, int, int]]:
    """(stream seq, consumer seq, delivery count) of what a no_wait pull brings."""
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    body = json.dumps({"batch": batch, "no_wait": True}).encode()
    await nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.R.{consumer}", body, reply=inbox)
    got = []
    while True:
        msg = await sub.next_msg(timeout=5)
        if msg.headers and msg.headers.get("Status"):
            break
        tokens = msg.reply.split(".")
        got.append((int(tokens[5]), int(tokens[6]), int(tokens[4])))
        if len(got) >= batch:
            break
    await sub.unsubscribe()
    return got


async def scenario(nc: Client) -> list[object]:
    created = await api(nc, "$JS.API.STREAM.CREATE.R", b'{"name":"R","subjects":["r"]}')
    assert isinstance(created, dict) and "error" not in created
    for _ in range(5):
        await nc.request("r", b"x", timeout=5)
    consumers = {
        "ALL": {"ack_policy": "explicit"},
        "SEQ": {"ack_policy": "explicit", "deliver_policy": "by_start_sequence", "opt_start_seq": 3},
        "NEW": {"ack_policy": "explicit", "deliver_policy": "new"},
        "LAST": {"ack_policy": "explicit", "deliver_policy": "last"},
        "TIME": {"ack_policy": "explicit", "deliver_policy": "by_start_time", "opt_start_time": "2000-01-01T00:00:00Z"},
        "NONE": {"ack_policy": "none"},
    }
    for name, config in consumers.items():
        body = json.dumps({"stream_name": "R", "config": {"durable_name": name, **config}}).encode()
        made = await api(nc, f"$JS.API.CONSUMER.CREATE.R.{name}", body)
        assert isinstance(made, dict) and "error" not in made, made
    seen: list[object] = []
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    await nc.publish("$JS.API.CONSUMER.MSG.NEXT.R.ALL", b'{"batch":3,"no_wait":true}', reply=inbox)
    first = [await sub.next_msg(timeout=5) for _ in range(3)]
    await first[0].ack_sync()
    await first[1].nak()  # pending again, with a redelivery count
    await sub.unsubscribe()
    await asyncio.sleep(0)  # the acks are ordered before the next request on this connection
    steps: list[tuple[str, bytes]] = [
        ("ALL", b""),
        ("ALL", b'{"seq":4}'),
        ("ALL", b'{"seq":0}'),
        ("ALL", b'{"seq":99}'),
        ("ALL", b'{"seq":1,"other":true}'),
        ("SEQ", b'{"seq":2}'),
        ("SEQ", b'{"seq":3}'),
        ("SEQ", b""),
        ("NEW", b'{"seq":1}'),
        ("NEW", b""),
        ("LAST", b'{"seq":5}'),
        ("TIME", b'{"seq":1}'),
        ("NONE", b'{"seq":2}'),
        ("ALL", b'{"seq":-1}'),
        ("ALL", b'{"seq":"2"}'),
        ("ALL", b"{bad"),
        ("ALL", b"null"),
        ("MISSING", b""),
    ]
    for name, body in steps:
        seen.append((name, body, answer(await api(nc, f"$JS.API.CONSUMER.RESET.R.{name}", body))))
        if name in ("ALL", "SEQ", "NEW", "NONE"):
            seen.append(("fetched", await fetch(nc, name, 2)))
    seen.append(("stream missing", answer(await api(nc, "$JS.API.CONSUMER.RESET.NOPE.ALL", b""))))
    info = await api(nc, "$JS.API.CONSUMER.INFO.R.ALL")
    assert isinstance(info, dict)
    seen.append(("info after", answer({**info, "reset_seq": None})))
    return seen


def observe(url: str) -> list[object]:
    return observe_with(url, scenario, 90)


def test_consumer_reset_answers_as_nats_server(servers: tuple[str, str]) -> None:
    real_url, our_url = servers
    expected = observe(real_url)
    got = observe(our_url)
    differences = [(e, g) for e, g in zip(expected, got) if e != g]
    assert not differences, "\n".join(f"nats-server {e}\nappliance   {g}" for e, g in differences)
    assert len(got) == len(expected)


def test_a_reset_operation_replays_to_the_same_state() -> None:
    state = consumer_state.ConsumerState("explicit")
    state.apply(consumer_state.op_delivered_flat([1, 1, 1, 10, 2, 2, 1, 11, 3, 3, 1, 12]))
    state.apply(consumer_state.op_acked([1], 13))
    state.apply(consumer_state.op_reset(2))
    assert (state.delivered_sseq, state.delivered_cseq, state.floor_sseq, state.floor_cseq) == (1, 0, 1, 0)
    assert not state.pending and not state.redelivered
    copy = consumer_state.ConsumerState("explicit")
    copy.restore(state.snapshot())
    assert copy.snapshot() == state.snapshot()


async def interest_scenario(nc: Client) -> list[object]:
    """On an interest stream, messages a reset skips over count as acknowledged by the consumer."""
    created = await api(nc, "$JS.API.STREAM.CREATE.I", b'{"name":"I","subjects":["i"],"retention":"interest"}')
    assert isinstance(created, dict) and "error" not in created
    made = await api(nc, "$JS.API.CONSUMER.CREATE.I.C", b'{"stream_name":"I","config":{"durable_name":"C","ack_policy":"explicit"}}')
    assert isinstance(made, dict) and "error" not in made
    for _ in range(4):
        await nc.request("i", b"x", timeout=5)
    seen: list[object] = [answer(await api(nc, "$JS.API.CONSUMER.RESET.I.C", b'{"seq":3}'))]
    for _ in range(20):  # nats-server removes them off its request path: poll briefly
        info = await api(nc, "$JS.API.STREAM.INFO.I")
        assert isinstance(info, dict)
        state = info["state"]
        if state["messages"] == 2:
            break
        await asyncio.sleep(0.05)
    seen.append((state["messages"], state["first_seq"]))
    return seen


def test_a_reset_forward_on_an_interest_stream_removes_what_it_skipped(servers: tuple[str, str]) -> None:
    real_url, our_url = servers

    def run(url: str) -> list[object]:
        async def main() -> list[object]:
            nc = await nats.connect(url, allow_reconnect=False)
            try:
                return await interest_scenario(nc)
            finally:
                await nc.close()

        return asyncio.run(asyncio.wait_for(main(), 30))

    assert run(our_url) == run(real_url)
