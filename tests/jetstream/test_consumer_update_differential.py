"""A consumer update (CONSUMER.CREATE with a changed config) takes effect on the live consumer,
field by field, as on nats-server 2.15.1; and what may not be updated is refused with
nats-server's code and text. Each scenario runs against both servers and the observations
(deliveries, statuses, info numbers, errors) must be equal."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable

import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from .conftest import observe_with

pytestmark = pytest.mark.integration

Scenario = Callable[[Client], Awaitable[list[object]]]


async def api(nc: Client, subject: str, body: object = None) -> dict:
    data = b"" if body is None else json.dumps(body).encode()
    return json.loads((await nc.request(subject, data, timeout=5)).data)


async def create(nc: Client, stream: str, config: dict[str, object], action: str = "") -> dict:
    body: dict[str, object] = {"stream_name": stream, "config": config}
    if action:
        body["action"] = action
    return await api(nc, f"$JS.API.CONSUMER.CREATE.{stream}.{config['durable_name']}", body)


async def update(nc: Client, stream: str, config: dict[str, object]) -> object:
    """The update's answer: its error, or "ok"."""
    answer = await create(nc, stream, config, "update")
    if "error" in answer:
        return answer["error"]
    return "ok"


async def setup(nc: Client, stream: str, subjects: list[str], messages: list[str]) -> None:
    created = await api(nc, f"$JS.API.STREAM.CREATE.{stream}", {"name": stream, "subjects": subjects})
    assert "error" not in created, created
    for subject in messages:
        await nc.request(subject, subject.encode(), timeout=5)


def delivery(msg: Msg) -> tuple[object, ...]:
    """(subject, stream seq, delivery count, payload, header keys) or (status, description)."""
    if msg.headers and msg.headers.get("Status"):
        return ("status", msg.headers["Status"], msg.headers.get("Description"))
    tokens = msg.reply.split(".")
    headers = sorted((msg.headers or {}).items())
    return (msg.subject, int(tokens[5]), int(tokens[4]), msg.data, headers)


async def pull(nc: Client, stream: str, consumer: str, body: dict[str, object], until_status: bool = True,
               count: int = 0, timeout: float = 5.0) -> list[tuple[object, ...]]:
    """One pull request's answers: messages up to `count` (when given) or the ending status."""
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    await nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}", json.dumps(body).encode(), reply=inbox)
    got: list[tuple[object, ...]] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            msg = await sub.next_msg(timeout=max(deadline - time.monotonic(), 0.01))
        except nats.errors.TimeoutError:
            break
        got.append(delivery(msg))
        if got[-1][0] == "status" or (count and len(got) >= count):
            break
    await sub.unsubscribe()
    return got


async def numbers(nc: Client, stream: str, consumer: str) -> tuple[object, ...]:
    info = await api(nc, f"$JS.API.CONSUMER.INFO.{stream}.{consumer}")
    if "error" in info:
        return ("error", info["error"]["err_code"])
    return (info["num_pending"], info["num_ack_pending"], info["num_redelivered"],
            info["delivered"]["stream_seq"], info["ack_floor"]["stream_seq"])


async def numbers_once_pending(nc: Client, stream: str, consumer: str, pending: int) -> tuple[object, ...]:
    """The numbers once num_pending reaches `pending`, or the last read after 5 s. nats-server
    counts a stored message into a consumer's pending on another goroutine (its signal queue), so
    an INFO right after the PubAck can, under load, miss a message that it counts a moment later."""
    deadline = time.monotonic() + 5
    while True:
        seen = await numbers(nc, stream, consumer)
        if seen[0] == pending or time.monotonic() > deadline:
            return seen
        await asyncio.sleep(0.02)


NO_WAIT = {"batch": 10, "no_wait": True}
BASE = {"durable_name": "C", "ack_policy": "explicit"}

# --- live effects, one scenario per updatable field ----------------------------------------------


async def filter_subjects(nc: Client) -> list[object]:
    await setup(nc, "F", ["f.*"], ["f.a", "f.b"])
    seen: list[object] = [await create(nc, "F", {**BASE, "filter_subject": "f.a"}) and "created"]
    seen.append(await pull(nc, "F", "C", {"batch": 1, "expires": 1_000_000_000}, count=1))
    seen.append(await update(nc, "F", {**BASE, "filter_subjects": ["f.b", "f.c"]}))
    for subject in ("f.a", "f.c"):
        await nc.request(subject, subject.encode(), timeout=5)
    seen.append(await numbers_once_pending(nc, "F", "C", 2))
    seen.append(await pull(nc, "F", "C", NO_WAIT))
    seen.append(await update(nc, "F", {**BASE, "filter_subject": "f.a"}))
    await nc.request("f.a", b"late", timeout=5)
    seen.append(await pull(nc, "F", "C", NO_WAIT))
    return seen


async def ack_wait(nc: Client) -> list[object]:
    await setup(nc, "W", ["w"], ["w"])
    await create(nc, "W", {**BASE, "ack_wait": 30_000_000_000})
    seen: list[object] = [await pull(nc, "W", "C", {"batch": 1, "expires": 1_000_000_000}, count=1)]
    seen.append(await update(nc, "W", {**BASE, "ack_wait": 300_000_000}))
    start = time.monotonic()
    again = await pull(nc, "W", "C", {"batch": 1, "expires": 4_000_000_000}, count=1)
    seen.append((again, time.monotonic() - start < 3.0))  # redelivered after the new ack_wait
    return seen


async def max_deliver(nc: Client) -> list[object]:
    """Delivered twice (a -NAK between); max_deliver lowered to 2 gives the message up, raised
    to 3 delivers it a third time."""
    await setup(nc, "M", ["m"], ["m"])
    seen: list[object] = []
    for name, limit in (("C2", 2), ("C3", 3)):
        config = {"durable_name": name, "ack_policy": "explicit", "max_deliver": 5}
        await create(nc, "M", config)
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        for _ in range(2):
            await nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.M.{name}", b'{"batch":1,"expires":2000000000}', reply=inbox)
            msg = await sub.next_msg(timeout=5)
            seen.append(delivery(msg))
            await msg.nak()
        await sub.unsubscribe()
        seen.append(await update(nc, "M", {**config, "max_deliver": limit}))
        seen.append(await pull(nc, "M", name, {"batch": 1, "expires": 1_000_000_000}))
        seen.append(await numbers(nc, "M", name))
    return seen


async def max_ack_pending(nc: Client) -> list[object]:
    await setup(nc, "P", ["p"], ["p", "p", "p"])
    await create(nc, "P", {**BASE, "max_ack_pending": 1})
    short = {"batch": 10, "expires": 500_000_000}
    seen: list[object] = [await pull(nc, "P", "C", short)]
    seen.append(await update(nc, "P", {**BASE, "max_ack_pending": 3}))
    seen.append(await pull(nc, "P", "C", short))
    seen.append(await numbers(nc, "P", "C"))
    return seen


async def max_ack_pending_no_wait(nc: Client) -> list[object]:
    """A no_wait request held back by max_ack_pending is not ended (nats-server ends no_wait
    requests at the end of the stream only): raising the limit feeds it."""
    await setup(nc, "N", ["n"], ["n", "n", "n"])
    await create(nc, "N", {**BASE, "max_ack_pending": 1})
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    await nc.publish("$JS.API.CONSUMER.MSG.NEXT.N.C", b'{"batch":3,"no_wait":true}', reply=inbox)
    seen: list[object] = [delivery(await sub.next_msg(timeout=5))]
    try:
        seen.append(delivery(await sub.next_msg(timeout=0.5)))
    except nats.errors.TimeoutError:
        seen.append("held")
    seen.append((await numbers(nc, "N", "C"), (await api(nc, "$JS.API.CONSUMER.INFO.N.C"))["num_waiting"]))
    seen.append(await update(nc, "N", {**BASE, "max_ack_pending": 5}))
    for _ in range(2):
        seen.append(delivery(await sub.next_msg(timeout=5)))
    await sub.unsubscribe()
    return seen


async def backoff(nc: Client) -> list[object]:
    await setup(nc, "B", ["b"], ["b"])
    await create(nc, "B", {**BASE, "max_deliver": 4, "ack_wait": 30_000_000_000})
    seen: list[object] = [await pull(nc, "B", "C", {"batch": 1, "expires": 1_000_000_000}, count=1)]
    changed = {**BASE, "max_deliver": 4, "backoff": [300_000_000, 30_000_000_000]}
    seen.append(await update(nc, "B", changed))
    info = await api(nc, "$JS.API.CONSUMER.INFO.B.C")
    seen.append((info["config"].get("ack_wait"), info["config"].get("backoff")))
    start = time.monotonic()
    again = await pull(nc, "B", "C", {"batch": 1, "expires": 4_000_000_000}, count=1)
    seen.append((again, time.monotonic() - start < 3.0))
    return seen


async def headers_only(nc: Client) -> list[object]:
    await setup(nc, "H", ["h"], ["h", "h"])
    await create(nc, "H", BASE)
    seen: list[object] = [await pull(nc, "H", "C", {"batch": 1, "expires": 1_000_000_000}, count=1)]
    seen.append(await update(nc, "H", {**BASE, "headers_only": True}))
    seen.append(await pull(nc, "H", "C", NO_WAIT))
    return seen


async def description_and_metadata(nc: Client) -> list[object]:
    await setup(nc, "D", ["d"], [])
    await create(nc, "D", {**BASE, "description": "one", "metadata": {"k": "1"}})
    seen: list[object] = [await update(nc, "D", {**BASE, "description": "two", "metadata": {"k": "2", "n": "x"}})]
    config = (await api(nc, "$JS.API.CONSUMER.INFO.D.C"))["config"]
    seen.append((config.get("description"), {k: v for k, v in config["metadata"].items() if not k.startswith("_nats")}))
    listed = (await api(nc, "$JS.API.CONSUMER.LIST.D"))["consumers"][0]["config"]
    seen.append(listed.get("description"))
    return seen


async def request_limits(nc: Client) -> list[object]:
    await setup(nc, "L", ["l"], ["l", "l"])
    await create(nc, "L", BASE)
    seen: list[object] = [await update(nc, "L", {**BASE, "max_batch": 1, "max_expires": 2_000_000_000, "max_bytes": 5})]
    seen.append(await pull(nc, "L", "C", {"batch": 2, "no_wait": True}))
    seen.append(await pull(nc, "L", "C", {"batch": 1, "expires": 3_000_000_000}))
    seen.append(await pull(nc, "L", "C", {"batch": 1, "max_bytes": 10, "no_wait": True}))
    return seen


async def inactive_threshold(nc: Client) -> list[object]:
    await setup(nc, "I", ["i"], [])
    await create(nc, "I", BASE)
    seen: list[object] = [await update(nc, "I", {**BASE, "inactive_threshold": 300_000_000})]
    deadline = time.monotonic() + 5
    gone = False
    while time.monotonic() < deadline and not gone:
        gone = "error" in await api(nc, "$JS.API.CONSUMER.INFO.I.C")
        await asyncio.sleep(0.1)
    seen.append(gone)
    return seen


async def deliver_subject(nc: Client) -> list[object]:
    await setup(nc, "S", ["s"], ["s", "s"])
    push = {"durable_name": "C", "ack_policy": "explicit", "deliver_subject": "d.one"}
    await create(nc, "S", push)
    sub = await nc.subscribe("d.two")
    seen: list[object] = [await update(nc, "S", {**push, "deliver_subject": "d.two"})]
    got = []
    for _ in range(2):
        got.append(delivery(await sub.next_msg(timeout=5)))
    seen.append(got)
    await sub.unsubscribe()
    return seen


# --- refusals ---------------------------------------------------------------------------------

REFUSED = [
    {"deliver_policy": "new"},
    {"mem_storage": True},
    {"ack_policy": "all"},
    {"replay_policy": "original"},
    {"max_waiting": 7},
    {"deliver_subject": "x.push"},
    {"max_deliver": 2, "backoff": [1_000_000_000, 2_000_000_000, 3_000_000_000]},
    {"num_replicas": 0, "ack_wait": 5_000_000_000},  # allowed: its answer is "ok"
    {"rate_limit_bps": 1000},  # a pull consumer: refused as at creation
]


async def rate_limit(nc: Client) -> list[object]:
    """rate_limit_bps holds push deliveries to the rate (a bucket of max_msg_size bytes), when set
    at creation and when set by an update."""
    created = await api(nc, "$JS.API.STREAM.CREATE.RL", {"name": "RL", "subjects": ["rl"], "max_msg_size": 200})
    assert "error" not in created
    for _ in range(6):
        await nc.request("rl", b"x" * 150, timeout=5)
    seen: list[object] = []
    for name, at_creation in (("A", True), ("B", False)):
        push = {"durable_name": name, "ack_policy": "none", "deliver_subject": f"d.{name}"}
        limited = {**push, "rate_limit_bps": 8000}  # 1000 bytes a second
        await create(nc, "RL", limited if at_creation else push)
        if not at_creation:
            seen.append(await update(nc, "RL", limited))
        sub = await nc.subscribe(f"d.{name}")
        start = time.monotonic()
        got = [await sub.next_msg(timeout=5) for _ in range(6)]
        elapsed = time.monotonic() - start
        seen.append((len(got), elapsed > 0.6, elapsed < 2.5))  # ~1100 bytes past the 200-byte burst
        await sub.unsubscribe()
    return seen


async def refusals(nc: Client) -> list[object]:
    await setup(nc, "R", ["r.*"], [])
    seen: list[object] = []
    for index, change in enumerate(REFUSED):
        name = f"C{index}"
        config = {"durable_name": name, "ack_policy": "explicit"}
        await create(nc, "R", config)
        seen.append((change, await update(nc, "R", {**config, **change})))
    push = {"durable_name": "P", "ack_policy": "explicit", "deliver_subject": "p.one", "idle_heartbeat": 1_000_000_000,
            "flow_control": True}
    await create(nc, "R", push)
    for change in ({"idle_heartbeat": 2_000_000_000}, {"flow_control": False}, {"deliver_subject": ""}):
        seen.append((change, await update(nc, "R", {**push, **change})))
    sub = await nc.subscribe("p.one")  # a bound push consumer keeps its deliver subject
    seen.append(("bound", await update(nc, "R", {**push, "deliver_subject": "p.two"})))
    await sub.unsubscribe()
    timed = {"durable_name": "T", "ack_policy": "explicit", "deliver_policy": "by_start_time",
             "opt_start_time": "2020-01-01T00:00:00Z"}
    await create(nc, "R", timed)
    seen.append(("time", await update(nc, "R", {**timed, "opt_start_time": "2021-01-01T00:00:00Z"})))
    seen.append(("same time", await update(nc, "R", {**timed, "opt_start_time": "2020-01-01T01:00:00+01:00"})))
    by_seq = {"durable_name": "N", "ack_policy": "explicit", "deliver_policy": "by_start_sequence", "opt_start_seq": 1}
    await create(nc, "R", by_seq)
    seen.append(("start seq", await update(nc, "R", {**by_seq, "opt_start_seq": 2})))
    lps = await create(nc, "R", {"durable_name": "LPS", "ack_policy": "explicit", "deliver_policy": "last_per_subject"})
    seen.append(("last per subject without a filter", lps.get("error")))
    seen.append(("missing", await update(nc, "R", {"durable_name": "NONE", "ack_policy": "explicit"})))
    return seen


async def interest_retention(nc: Client) -> list[object]:
    """An interest stream drops a message whose only interested consumer's new filter leaves it."""
    created = await api(nc, "$JS.API.STREAM.CREATE.T", {"name": "T", "subjects": ["t.*"], "retention": "interest"})
    assert "error" not in created
    await create(nc, "T", {"durable_name": "A", "ack_policy": "explicit", "filter_subject": "t.a"})
    await create(nc, "T", {"durable_name": "B", "ack_policy": "explicit", "filter_subject": "t.b"})
    for subject in ("t.a", "t.b", "t.b"):
        await nc.request(subject, b"x", timeout=5)
    seen: list[object] = [await update(nc, "T", {"durable_name": "B", "ack_policy": "explicit", "filter_subject": "t.c"})]
    state = (await api(nc, "$JS.API.STREAM.INFO.T"))["state"]
    seen.append((state["messages"], state["first_seq"], state["last_seq"]))
    return seen


async def workqueue(nc: Client) -> list[object]:
    created = await api(nc, "$JS.API.STREAM.CREATE.Q", {"name": "Q", "subjects": ["q.*"], "retention": "workqueue"})
    assert "error" not in created
    await create(nc, "Q", {"durable_name": "A", "ack_policy": "explicit", "filter_subject": "q.a"})
    await create(nc, "Q", {"durable_name": "B", "ack_policy": "explicit", "filter_subject": "q.b"})
    return [await update(nc, "Q", {"durable_name": "B", "ack_policy": "explicit", "filter_subject": "q.*"}),
            await update(nc, "Q", {"durable_name": "B", "ack_policy": "explicit", "filter_subject": "q.c"})]


SCENARIOS: dict[str, Scenario] = {
    "filter_subjects": filter_subjects,
    "ack_wait": ack_wait,
    "max_deliver": max_deliver,
    "max_ack_pending": max_ack_pending,
    "max_ack_pending_no_wait": max_ack_pending_no_wait,
    "backoff": backoff,
    "headers_only": headers_only,
    "description_and_metadata": description_and_metadata,
    "request_limits": request_limits,
    "inactive_threshold": inactive_threshold,
    "deliver_subject": deliver_subject,
    "rate_limit": rate_limit,
    "refusals": refusals,
    "workqueue": workqueue,
    "interest_retention": interest_retention,
}


def observe(url: str, scenario: Scenario) -> list[object]:
    return observe_with(url, scenario, 60)


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_an_update_takes_effect_as_on_nats_server(servers: tuple[str, str], name: str) -> None:
    real_url, our_url = servers
    expected = observe(real_url, SCENARIOS[name])
    got = observe(our_url, SCENARIOS[name])
    assert got == expected
