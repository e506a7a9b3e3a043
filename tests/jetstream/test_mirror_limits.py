"""A mirror's writes under the limits nats-server 2.15.1 applies to them, differential: a mirror
stalls at the first origin message its limits refuse — the server's JetStream limit (10023), the
account's (10002), a discard-new max_msgs / max_bytes — and never skips it; when a refusal came
from the server's or the account's limit it copies on from that message once space is freed.
A discard-old mirror drops its oldest messages as any stream does. Sources stall alike."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client

from appliance.config import options_from_text
from appliance.testing.inproc import InProcessServer
from appliance.testing.natsserver import NatsServer

pytestmark = pytest.mark.integration

CONFIG = """
jetstream { store_dir: "%(store)s", max_memory_store: 1MB }
accounts {
  A { users: [{user: a, password: a}], jetstream: enabled }
  C { users: [{user: c, password: c}], jetstream: { max_file: 300000 } }
  D { users: [{user: d, password: d}], jetstream: enabled }
}
"""
PAYLOAD = b"x" * 10000
DEADLINE_S = 30.0
STABLE_POLLS = 8  # a stalled mirror's state is unchanged over this many polls ...
POLL_S = 0.1  # ... this far apart
STATE_KEYS = ("messages", "bytes", "first_seq", "last_seq")

# (user, mirrors {name: config}, origin publishes, resumes after a purge)
CASES: list[tuple[str, dict[str, dict[str, object]], int, bool]] = [
    ("a", {"M": {"storage": "memory"}}, 150, True),  # the server's 1 MiB of memory
    ("c", {"MC": {"storage": "file"}}, 40, True),  # the account's max_file
    ("d", {"MN": {"max_msgs": 10, "discard": "new"}, "MB": {"max_bytes": 100000, "discard": "new"},
           "MO": {"max_msgs": 10}}, 30, False),
]


async def request(nc: Client, subject: str, body: object = b"") -> dict[str, object]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return json.loads((await nc.request(subject, data, timeout=5)).data)


async def state(nc: Client, name: str) -> tuple[object, ...]:
    info = await request(nc, f"$JS.API.STREAM.INFO.{name}")
    found = info["state"]
    assert isinstance(found, dict)
    return tuple(found[key] for key in STATE_KEYS)


async def lag(nc: Client, name: str) -> object:
    """The `lag` stream info reports for the mirror or the (first) source."""
    info = await request(nc, f"$JS.API.STREAM.INFO.{name}")
    found = info.get("mirror") or (info.get("sources") or [{}])[0]  # type: ignore[index]
    return found.get("lag")  # type: ignore[union-attr]


async def settled(nc: Client, name: str) -> tuple[object, ...]:
    """The mirror's state once it has copied something and stopped changing."""
    deadline = time.monotonic() + DEADLINE_S
    seen, same = await state(nc, name), 0
    while same < STABLE_POLLS or seen[0] == 0:
        assert time.monotonic() < deadline, f"{name} did not settle: {seen}"
        await asyncio.sleep(POLL_S)
        now = await state(nc, name)
        same = same + 1 if now == seen else 0
        seen = now
    return seen


async def reaches(nc: Client, name: str, last_seq: int) -> tuple[object, ...]:
    deadline = time.monotonic() + DEADLINE_S
    while True:
        now = await state(nc, name)
        if now[3] == last_seq:
            return now
        assert time.monotonic() < deadline, f"{name} stayed at {now}"
        await asyncio.sleep(POLL_S)


async def scenario(url: str) -> list[object]:
    answers: list[object] = []
    for user, mirrors, publishes, resumes in CASES:
        nc = await nats.connect(url, user=user, password=user, allow_reconnect=False)
        try:
            storage = "memory" if user == "c" else "file"
            origin = {"name": "O", "subjects": ["o.>"], "storage": storage}
            await request(nc, "$JS.API.STREAM.CREATE.O", origin)
            for name, extra in mirrors.items():
                created = await request(nc, f"$JS.API.STREAM.CREATE.{name}",
                                        {"name": name, "mirror": {"name": "O"}, **extra})
                answers.append((name, created.get("error")))
            for index in range(publishes):
                await request(nc, f"o.{index % 3}", PAYLOAD)
            for name in mirrors:
                answers.append((name, await settled(nc, name)))
            if resumes:
                for name in mirrors:
                    await request(nc, f"$JS.API.STREAM.PURGE.{name}")
                    answers.append((name, "after purge", await reaches(nc, name, publishes)))
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


def test_mirrors_stall_at_their_limits_as_nats_server(servers: tuple[str, str]) -> None:
    real_url, our_url = servers
    expected = asyncio.run(asyncio.wait_for(scenario(real_url), 120))
    got = asyncio.run(asyncio.wait_for(scenario(our_url), 120))
    assert got == expected
    assert ("M", (105, 1051995, 1, 105)) in got  # stalled at the server's limit, not skipping on


def test_a_stalled_mirrors_lag_is_nats_servers_usual_one(tmp_path: Path) -> None:
    """Stalled at message 11 of 30, nats-server reports the refused message's pending count less
    one (30 - 11 - 1 = 18) most of the time (0 for a moment after it recreates its consumer):
    appliance reports 18 throughout. Not compared live for that reason."""

    async def main(url: str) -> object:
        nc = await nats.connect(url, allow_reconnect=False)
        try:
            await request(nc, "$JS.API.STREAM.CREATE.O", {"name": "O", "subjects": ["o.>"]})
            await request(nc, "$JS.API.STREAM.CREATE.MN",
                          {"name": "MN", "mirror": {"name": "O"}, "max_msgs": 10, "discard": "new"})
            for index in range(30):
                await request(nc, f"o.{index}", b"m")
            await settled(nc, "MN")
            return await lag(nc, "MN")
        finally:
            await nc.close()

    with InProcessServer(jetstream_dir=str(tmp_path / "s")) as server:
        assert asyncio.run(asyncio.wait_for(main(server.url), 60)) == 18


def test_a_discard_new_mirror_copies_on_once_purged(tmp_path: Path) -> None:
    """nats-server 2.15.1 leaves such a mirror stalled even after a purge (observed, 15 s and a
    new origin message); appliance copies on from the refused message, as for the other limits."""

    async def main(url: str) -> tuple[object, ...]:
        nc = await nats.connect(url, allow_reconnect=False)
        try:
            await request(nc, "$JS.API.STREAM.CREATE.O", {"name": "O", "subjects": ["o.>"]})
            await request(nc, "$JS.API.STREAM.CREATE.MN",
                          {"name": "MN", "mirror": {"name": "O"}, "max_msgs": 10, "discard": "new"})
            for index in range(30):
                await request(nc, f"o.{index}", b"m")
            assert await settled(nc, "MN") == (10, 340, 1, 10)
            await request(nc, "$JS.API.STREAM.PURGE.MN")
            return await reaches(nc, "MN", 20)
        finally:
            await nc.close()

    with InProcessServer(jetstream_dir=str(tmp_path / "s")) as server:
        assert asyncio.run(asyncio.wait_for(main(server.url), 60)) == (10, 350, 11, 20)  # o.10 .. o.19


async def sourcing(url: str) -> list[object]:
    """Sources stall the same way (nats-server retries a source from the message it could not
    store): a discard-new stream and a discard-new work queue fill up and stop; after a purge the
    source copies on from the refused message, none skipped."""
    nc = await nats.connect(url, allow_reconnect=False)
    answers: list[object] = []
    try:
        await request(nc, "$JS.API.STREAM.CREATE.O", {"name": "O", "subjects": ["o.>"]})
        for name, extra in (("SN", {"max_msgs": 10}), ("WQ", {"max_msgs": 5, "retention": "workqueue"})):
            created = await request(nc, f"$JS.API.STREAM.CREATE.{name}",
                                    {"name": name, "sources": [{"name": "O"}], "discard": "new", **extra})
            answers.append((name, created.get("error")))
        for index in range(30):
            await request(nc, f"o.{index}", b"m")
        for name in ("SN", "WQ"):
            answers.append((name, await settled(nc, name)))
        await request(nc, "$JS.API.STREAM.PURGE.SN")
        answers.append(("SN", "after purge", await reaches(nc, "SN", 20)))
        info = await request(nc, "$JS.API.STREAM.MSG.GET.SN", {"seq": 11})
        message = info["message"]
        assert isinstance(message, dict)
        answers.append(message["subject"])  # the first message refused is the first copied after
    finally:
        await nc.close()
    return answers


def test_sources_stall_at_their_limits_as_nats_server(tmp_path: Path) -> None:
    with (
        NatsServer(["-js", "-sd", str(tmp_path / "ns")]) as real,
        InProcessServer(jetstream_dir=str(tmp_path / "ours")) as ours,
    ):
        expected = asyncio.run(asyncio.wait_for(sourcing(real.url), 60))
        got = asyncio.run(asyncio.wait_for(sourcing(ours.url), 60))
    assert got == expected
    assert got[-1] == "o.10"


def test_a_source_refused_on_one_subject_copies_the_rest_once(tmp_path: Path) -> None:
    """A per-subject discard-new limit refuses one copy while later copies in flight are stored:
    once the refused one fits, it is copied and the later ones are not copied a second time."""

    async def main(url: str) -> list[str]:
        nc = await nats.connect(url, allow_reconnect=False)
        try:
            await request(nc, "$JS.API.STREAM.CREATE.O", {"name": "O", "subjects": ["o.>"]})
            for subject in ("o.a", "o.b", "o.a", "o.c"):
                await request(nc, subject, b"m")
            await request(nc, "$JS.API.STREAM.CREATE.D", {  # its first turn copies all four at once
                "name": "D", "sources": [{"name": "O"}], "max_msgs_per_subject": 1, "discard": "new",
                "discard_new_per_subject": True})
            assert (await settled(nc, "D"))[0] == 3  # o.a, o.b, o.c: the second o.a refused
            await request(nc, "$JS.API.STREAM.PURGE.D", {"filter": "o.a"})
            await reaches(nc, "D", 4)
            await request(nc, "o.d", b"m")  # copied next: the source is not stalled on a second o.c
            await reaches(nc, "D", 5)
            info = await request(nc, "$JS.API.STREAM.INFO.D", {"subjects_filter": ">"})
            state = info["state"]
            assert isinstance(state, dict)
            return sorted(state["subjects"])  # type: ignore[arg-type]
        finally:
            await nc.close()

    with InProcessServer(jetstream_dir=str(tmp_path / "s")) as server:
        subjects = asyncio.run(asyncio.wait_for(main(server.url), 60))
    assert subjects == ["o.a", "o.b", "o.c", "o.d"]
