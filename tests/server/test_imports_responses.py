"""Service-import response mappings (server/imports.py) on an in-process server: a singleton answer ends
its mapping (a second answer is not delivered), unanswered mappings go after the export's response
threshold, the map is bounded, and a streamed export passes every answer until the empty one."""

from __future__ import annotations

import asyncio
import time

import nats
import pytest

from appliance import limits
from appliance.config.load import options_from_text
from appliance.testing.clients import flush_after_subs, request_replies
from appliance.testing.inproc import InProcessServer

CONFIG = """
accounts {
  A: { users: [{user: a, password: a}],
       exports: [{service: "one", response_threshold: "200ms"}, {service: "many", response_type: stream}] }
  B: { users: [{user: b, password: b}],
       imports: [{service: {account: A, subject: one}}, {service: {account: A, subject: many}}] }
}
"""


@pytest.fixture
def server() -> InProcessServer:
    with InProcessServer(options_from_text(CONFIG, filename="t.conf")) as running:
        yield running


def pending(server: InProcessServer) -> int:
    return server.call(lambda: len(server.server.imports.responses))


async def wait_until(condition: object, what: str, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.02)


def test_a_singleton_answer_ends_its_mapping(server: InProcessServer) -> None:
    async def run() -> None:
        a = await nats.connect(server.url.replace("//", "//a:a@"))
        b = await nats.connect(server.url.replace("//", "//b:b@"))

        async def twice(msg: nats.aio.msg.Msg) -> None:
            await a.publish(msg.reply, b"first")
            await a.publish(msg.reply, b"second")

        await a.subscribe("one", cb=twice)
        await flush_after_subs(a)
        got = await request_replies(b, "one")
        await wait_until(lambda: got, "an answer")
        await a.flush()
        await b.flush()
        assert got == [b"first"] and pending(server) == 0
        await a.close()
        await b.close()

    asyncio.run(run())


def test_unanswered_mappings_expire_and_are_bounded(server: InProcessServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "SERVICE_RESPONSES_MAX", 3)

    async def run() -> None:
        a = await nats.connect(server.url.replace("//", "//a:a@"))
        b = await nats.connect(server.url.replace("//", "//b:b@"))
        async def silent(msg: nats.aio.msg.Msg) -> None:  # takes requests, never answers
            return None

        await a.subscribe("one", cb=silent)
        await flush_after_subs(a)
        for i in range(5):
            await b.publish("one", b"", reply=f"_INBOX.x{i}")
        await b.flush()
        assert pending(server) <= 3  # the two oldest dropped (or expired already, on a slow machine)
        await wait_until(lambda: pending(server) == 0, "mappings dropped after the 200ms threshold")
        await a.close()
        await b.close()

    asyncio.run(run())


def test_a_streamed_export_passes_every_answer_until_the_empty_one(server: InProcessServer) -> None:
    async def run() -> None:
        a = await nats.connect(server.url.replace("//", "//a:a@"))
        b = await nats.connect(server.url.replace("//", "//b:b@"))

        async def parts(msg: nats.aio.msg.Msg) -> None:
            for part in (b"1", b"2", b"3", b"", b"late"):
                await a.publish(msg.reply, part)

        await a.subscribe("many", cb=parts)
        await flush_after_subs(a)
        got = await request_replies(b, "many")
        await wait_until(lambda: len(got) >= 4, "the streamed answers")
        await a.flush()
        await b.flush()
        assert got == [b"1", b"2", b"3", b""] and pending(server) == 0
        await a.close()
        await b.close()

    asyncio.run(run())


STREAMS = """
accounts {
  A: { users: [{user: a, password: a}], exports: [{stream: "foo.>"}] }
  B: { users: [{user: b, password: b}], imports: [{stream: {account: A, subject: "foo.>"}, to: "bar.>"}] }
}
"""


def test_a_queue_group_of_the_importer_gets_each_message_once() -> None:
    with InProcessServer(options_from_text(STREAMS, filename="t.conf")) as running:
        async def run() -> None:
            a = await nats.connect(running.url.replace("//", "//a:a@"))
            members = [await nats.connect(running.url.replace("//", "//b:b@")) for _ in range(2)]
            got: list[str] = []

            async def on_msg(msg: nats.aio.msg.Msg) -> None:
                got.append(msg.subject)

            for member in members:
                await member.subscribe("bar.*", queue="workers", cb=on_msg)
                await flush_after_subs(member)
            for i in range(20):
                await a.publish(f"foo.{i}", b"")
            await a.flush()
            await wait_until(lambda: len(got) >= 20, "every message")
            for member in members:
                await member.flush()
            assert sorted(got) == sorted(f"bar.{i}" for i in range(20))
            await running_close(a, *members)

        asyncio.run(run())


async def running_close(*clients: nats.aio.client.Client) -> None:
    for client in clients:
        await client.close()


def test_a_pending_answer_survives_a_rebuild_of_the_imports(server: InProcessServer) -> None:
    """A reload (or a new account JWT) rebuilds the imports; a request already in A still gets its answer."""
    async def run() -> None:
        a = await nats.connect(server.url.replace("//", "//a:a@"))
        b = await nats.connect(server.url.replace("//", "//b:b@"))
        held: list[str] = []

        async def hold(msg: nats.aio.msg.Msg) -> None:
            held.append(msg.reply)

        await a.subscribe("one", cb=hold)
        await flush_after_subs(a)
        answer = asyncio.ensure_future(b.request("one", b"", timeout=5))
        await wait_until(lambda: held, "the request in A")
        server.call(lambda: server.server.imports.configure_from_options(server.server.options))
        await a.publish(held[0], b"late answer")
        assert (await answer).data == b"late answer"
        await a.close()
        await b.close()

    asyncio.run(run())
