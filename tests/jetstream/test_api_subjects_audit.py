"""Every JetStream API subject nats-server 2.15.1 serves (the subject constants of its
server/jetstream_api.go) gets an answer from appliance when it gets one from nats-server, of the
same type and, for an error, the same code: none is left silently unanswered. The wildcards are
filled with an existing stream/consumer (and missing ones); the same requests go to both servers.

STREAM.SNAPSHOT and STREAM.RESTORE are compared like every other subject.
"""

from __future__ import annotations

import asyncio
import json

import nats
import pytest
from nats.aio.client import Client

from .conftest import observe_with

pytestmark = pytest.mark.integration

# nats-server's API subjects (jetstream_api.go), a wildcard shown as <...>
API_SUBJECTS = [
    "$JS.API.INFO",
    "$JS.API.STREAM.CREATE.<stream>",
    "$JS.API.STREAM.UPDATE.<stream>",
    "$JS.API.STREAM.NAMES",
    "$JS.API.STREAM.LIST",
    "$JS.API.STREAM.INFO.<stream>",
    "$JS.API.STREAM.DELETE.<stream>",
    "$JS.API.STREAM.SNAPSHOT.<stream>",
    "$JS.API.STREAM.RESTORE.<stream>",
    "$JS.API.STREAM.MSG.DELETE.<stream>",
    "$JS.API.STREAM.MSG.GET.<stream>",
    "$JS.API.DIRECT.GET.<stream>",
    "$JS.API.DIRECT.GET.<stream>.<subject>",
    "$JS.API.CONSUMER.CREATE.<stream>",
    "$JS.API.CONSUMER.CREATE.<stream>.<consumer>.<filter>",
    "$JS.API.CONSUMER.DURABLE.CREATE.<stream>.<consumer>",
    "$JS.API.CONSUMER.NAMES.<stream>",
    "$JS.API.CONSUMER.LIST.<stream>",
    "$JS.API.CONSUMER.INFO.<stream>.<consumer>",
    "$JS.API.CONSUMER.DELETE.<stream>.<consumer>",
    "$JS.API.CONSUMER.PAUSE.<stream>.<consumer>",
    "$JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>",
    "$JS.API.CONSUMER.RESET.<stream>.<consumer>",
    "$JS.API.CONSUMER.UNPIN.<stream>.<consumer>",
    "$JS.API.STREAM.PEER.REMOVE.<stream>",
    "$JS.API.STREAM.PEER.EVACUATE.<stream>",
    "$JS.API.STREAM.CANCEL_MOVE.<stream>",
    "$JS.API.STREAM.LEADER.STEPDOWN.<stream>",
    "$JS.API.CONSUMER.LEADER.STEPDOWN.<stream>.<consumer>",
    "$JS.API.META.LEADER.STEPDOWN",
    "$JS.API.SERVER.REMOVE",
    "$JS.API.SERVER.EVACUATE",
    "$JS.API.META.RESCUE",
    "$JS.API.ACCOUNT.PURGE.<account>",
    "$JS.API.ACCOUNT.STREAM.MOVE.<stream>.<stream>",
    "$JS.API.ACCOUNT.STREAM.CANCEL_MOVE.<stream>.<stream>",
    "$JS.API.STREAM.PURGE.<stream>",  # last: the message of A stays for the gets above
]

NO_REPLY_S = 0.5  # both servers answer in milliseconds; silence this long is no answer

# what fills the wildcards: the existing stream A (subjects a.>) and consumer C, and missing ones
FILLS = [
    {"stream": "A", "consumer": "C", "subject": "a.x", "filter": "a.x", "account": "NOPE"},
    {"stream": "MISSING", "consumer": "MISSING", "subject": "a.x", "filter": "a.x", "account": "NOPE"},
]

BODIES = {  # a body each handler accepts (or refuses with its own error); none is destructive to A
    "CREATE": b'{"name":"B","subjects":["b"]}',
    "UPDATE": b'{"name":"A","subjects":["a.>"],"allow_direct":true,"description":"d"}',
    "DELETE": b"",
    "MSG.DELETE": b'{"seq":99}',
    "MSG.GET": b'{"seq":1}',
    "DIRECT.GET": b'{"seq":1}',
    "CONSUMER.CREATE": b'{"stream_name":"A","config":{"ack_policy":"explicit"}}',
    "MSG.NEXT": b'{"batch":1,"no_wait":true}',
    "PAUSE": b"{}",
    "UNPIN": b'{"group":"g"}',
}


def body_for(subject: str) -> bytes:
    for key in ("MSG.DELETE", "MSG.GET", "DIRECT.GET", "MSG.NEXT", "CONSUMER.CREATE", "CONSUMER.DURABLE"):
        if key in subject:
            if key == "CONSUMER.DURABLE":
                return b'{"stream_name":"A","config":{"durable_name":"D","ack_policy":"explicit"}}'
            if key == "DIRECT.GET" and subject.count(".") > 4:
                return b""  # the subject form (a KV get) takes no body
            if key == "CONSUMER.CREATE" and subject.count(".") >= 6:
                return b'{"stream_name":"A","config":{"name":"E","filter_subject":"a.x","ack_policy":"explicit"}}'
            return BODIES[key]
    for key in ("STREAM.CREATE", "STREAM.UPDATE", "PAUSE", "UNPIN"):
        if key in subject:
            return BODIES[key.split(".")[-1]]
    return b""


def concrete(pattern: str, fill: dict[str, str]) -> str:
    subject = pattern
    for key, value in fill.items():
        subject = subject.replace(f"<{key}>", value)
    if fill["stream"] == "A":  # delete the scratch stream and consumer, not A and C
        if pattern == "$JS.API.STREAM.DELETE.<stream>":
            subject = "$JS.API.STREAM.DELETE.Z"
        if pattern == "$JS.API.CONSUMER.DELETE.<stream>.<consumer>":
            subject = "$JS.API.CONSUMER.DELETE.A.X"
    return subject


async def answer_of(nc: Client, subject: str) -> object:
    """(type, error code, err_code) of a JSON answer, ("status", code, description) of a
    header-only one, ("message",) of a stored message, or "no reply"."""
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    try:
        await nc.publish(subject, body_for(subject), reply=inbox)
        msg = await sub.next_msg(timeout=NO_REPLY_S)
    except nats.errors.TimeoutError:
        return "no reply"
    finally:
        await sub.unsubscribe()
    if msg.headers and msg.headers.get("Status"):
        return ("status", msg.headers["Status"], msg.headers.get("Description"))
    if not msg.data.startswith(b"{"):
        return ("message",)  # a stored message (DIRECT.GET)
    data = json.loads(msg.data)
    error = data.get("error") or {}
    return (data.get("type"), error.get("code"), error.get("err_code"))


async def scenario(nc: Client) -> dict[str, object]:
    for subject, body in (
        ("$JS.API.STREAM.CREATE.A", b'{"name":"A","subjects":["a.>"],"allow_direct":true}'),
        ("$JS.API.STREAM.CREATE.Z", b'{"name":"Z","subjects":["z"]}'),
        ("$JS.API.CONSUMER.CREATE.A.C", b'{"stream_name":"A","config":{"durable_name":"C","ack_policy":"explicit"}}'),
        ("$JS.API.CONSUMER.CREATE.A.X", b'{"stream_name":"A","config":{"durable_name":"X","ack_policy":"explicit"}}'),
    ):
        made = json.loads((await nc.request(subject, body, timeout=5)).data)
        assert "error" not in made, made
    await nc.request("a.x", b"one", timeout=5)
    seen: dict[str, object] = {}
    for fill in FILLS:
        for pattern in API_SUBJECTS:
            subject = concrete(pattern, fill)
            seen[f"{pattern} [{fill['stream']}]"] = await answer_of(nc, subject)
    return seen


def observe(url: str) -> dict[str, object]:
    return observe_with(url, scenario, 110)


@pytest.mark.timeout(240)
def test_every_api_subject_nats_server_answers_is_answered_alike(servers: tuple[str, str]) -> None:
    real_url, our_url = servers
    expected = observe(real_url)
    got = observe(our_url)
    differences = [f"{k}: nats-server {v!r}, appliance {got[k]!r}" for k, v in expected.items() if got[k] != v]
    assert not differences, "\n".join(differences)
    unanswered = [k for k, v in got.items() if v == "no reply" and expected[k] != "no reply"]
    assert not unanswered


LEVEL_SUBJECTS = [
    ("$JS.API.STREAM.INFO.A", b""),
    ("$JS.API.STREAM.MSG.GET.A", b'{"seq":1}'),
    ("$JS.API.DIRECT.GET.A", b'{"seq":1}'),
    ("$JS.API.DIRECT.GET.A.a.x", b""),
    ("$JS.API.CONSUMER.MSG.NEXT.A.C", b'{"batch":1,"no_wait":true}'),
    ("$JS.API.CONSUMER.RESET.A.C", b""),
]


async def level_scenario(nc: Client) -> list[object]:
    for subject, body in (
        ("$JS.API.STREAM.CREATE.A", b'{"name":"A","subjects":["a.>"],"allow_direct":true}'),
        ("$JS.API.CONSUMER.CREATE.A.C", b'{"stream_name":"A","config":{"durable_name":"C","ack_policy":"explicit"}}'),
    ):
        assert "error" not in json.loads((await nc.request(subject, body, timeout=5)).data)
    await nc.request("a.x", b"one", timeout=5)
    seen: list[object] = []
    for level in ("99", "abc", "1", "5", ""):
        for subject, body in LEVEL_SUBJECTS:
            inbox = nc.new_inbox()
            sub = await nc.subscribe(inbox)
            await nc.publish(subject, body, reply=inbox, headers={"Nats-Required-Api-Level": level})
            try:
                msg = await sub.next_msg(timeout=1.0)
            except nats.errors.TimeoutError:
                seen.append((level, subject, "no reply"))
                continue
            finally:
                await sub.unsubscribe()
            if msg.headers and msg.headers.get("Status"):
                seen.append((level, subject, msg.headers["Status"], msg.headers.get("Description")))
            elif msg.data.startswith(b"{"):
                error = json.loads(msg.data).get("error") or {}
                seen.append((level, subject, error.get("code"), error.get("err_code"), error.get("description")))
            else:
                seen.append((level, subject, "message"))
    return seen


def test_the_required_api_level_header_is_checked_as_nats_server(servers: tuple[str, str]) -> None:
    """Nats-Required-Api-Level above ours, or not a number: 412 on every path (API, DIRECT.GET,
    MSG.NEXT, RESET); a level we serve changes nothing."""
    real_url, our_url = servers

    def run(url: str) -> list[object]:
        async def main() -> list[object]:
            nc = await nats.connect(url, allow_reconnect=False)
            try:
                return await level_scenario(nc)
            finally:
                await nc.close()

        return asyncio.run(asyncio.wait_for(main(), 60))

    expected = run(real_url)
    got = run(our_url)
    differences = [f"nats-server {e!r}\nappliance   {g!r}" for e, g in zip(expected, got) if e != g]
    assert not differences, "\n".join(differences)
