"""The server-wide JetStream limit on publish, differential against nats-server 2.15.1: a
publish arriving while the server's usage of a storage type is over its limit is refused with
10023, whether the limit was configured (`jetstream { max_memory_store, max_file_store }`) or
derived by the server (75% of RAM / of the store's free disk), and whichever account fills it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import nats
import psutil
import pytest

from appliance.config import options_from_text
from appliance.config.options import ServerOptions
from appliance.testing.inproc import InProcessServer
from appliance.testing.natsserver import NatsServer

pytestmark = pytest.mark.integration

LIMIT_BYTES = 1024 * 1024
PAYLOAD = b"x" * 10000
PUBLISHES_MAX = 120  # 105 fit in 1 MiB


async def fill(url: str, *, user: str | None = None, prefix: str = "") -> list[object]:
    """Per storage type: a stream filled until refused, the refusal, a purge and a publish."""
    auth = {"user": user, "password": user} if user else {}
    nc = await nats.connect(url, allow_reconnect=False, **auth)  # type: ignore[arg-type]
    answers: list[object] = []

    async def request(subject: str, body: object = b"") -> dict[str, object]:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        return json.loads((await nc.request(subject, data, timeout=5)).data)

    try:
        for storage in ("memory", "file"):
            name = f"{prefix}{storage}"
            config = {"name": name, "subjects": [f"{name}.>"], "storage": storage}
            answers.append((await request(f"$JS.API.STREAM.CREATE.{name}", config)).get("error"))
            accepted = 0
            for _ in range(PUBLISHES_MAX):
                ack = await request(f"{name}.x", PAYLOAD)
                if "error" in ack:
                    answers.append(ack)
                    break
                accepted += 1
            answers.append(accepted)
            info = await request(f"$JS.API.STREAM.INFO.{name}")
            answers.append(info["state"])
            await request(f"$JS.API.STREAM.PURGE.{name}")
            answers.append(await request(f"{name}.x", PAYLOAD))
    finally:
        await nc.close()
    return answers


def masked(answers: list[object]) -> list[object]:
    out: list[object] = []
    for answer in answers:
        if isinstance(answer, dict):
            answer = {k: v for k, v in answer.items() if k not in ("first_ts", "last_ts")}
        out.append(answer)
    return out


@pytest.fixture
def derived_one_mib(monkeypatch: pytest.MonkeyPatch) -> None:
    """This machine as one whose 75% of RAM and of free disk are 1 MiB."""
    real_memory, real_disk = psutil.virtual_memory, psutil.disk_usage
    monkeypatch.setattr(psutil, "virtual_memory", lambda: SimpleNamespace(
        **{**real_memory()._asdict(), "total": LIMIT_BYTES // 3 * 4}))
    monkeypatch.setattr(psutil, "disk_usage", lambda path: SimpleNamespace(
        **{**real_disk(path)._asdict(), "free": LIMIT_BYTES // 3 * 4}))


def test_a_derived_server_limit_refuses_as_nats_servers(tmp_path: Path, derived_one_mib: None) -> None:
    conf = tmp_path / "real.conf"
    conf.write_text(f'jetstream {{ store_dir: "{tmp_path / "ns"}", max_memory_store: {LIMIT_BYTES}, '
                    f"max_file_store: {LIMIT_BYTES} }}\n")
    with NatsServer(["-c", str(conf)]) as real:
        expected = asyncio.run(asyncio.wait_for(fill(real.url), 60))
    with InProcessServer(ServerOptions(), jetstream_dir=str(tmp_path / "ours")) as ours:  # nothing configured
        got = asyncio.run(asyncio.wait_for(fill(ours.url), 60))
    assert masked(got) == masked(expected)
    refused = {"error": {"code": 503, "err_code": 10023, "description": "insufficient resources"}, "seq": 0}
    assert got[:3] == [None, {"stream": "memory", **refused}, 105]


CONFIG = """
jetstream { store_dir: "%(store)s", max_memory_store: 1MB, max_file_store: 1MB }
accounts {
  A { users: [{user: a, password: a}], jetstream: enabled }
  B { users: [{user: b, password: b}], jetstream: enabled }
}
"""


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[tuple[str, str]]:
    real_conf = tmp_path / "real.conf"
    real_conf.write_text(CONFIG % {"store": tmp_path / "ns"})
    ours = options_from_text(CONFIG % {"store": tmp_path / "ours"}, filename=str(tmp_path / "ours.conf"))
    with NatsServer(["-c", str(real_conf)]) as real, InProcessServer(ours) as mine:
        yield real.url, mine.url


async def two_accounts(url: str) -> list[object]:
    """A fills the server's limit; B, with no limit of its own, is refused on its first publish."""
    first = await fill(url, user="a", prefix="a")
    nc = await nats.connect(url, user="b", password="b", allow_reconnect=False)
    try:
        second: list[object] = []
        for storage in ("memory", "file"):
            body = json.dumps({"name": storage, "subjects": ["b.>"] if storage == "memory" else ["c.>"],
                               "storage": storage}).encode()
            await nc.request(f"$JS.API.STREAM.CREATE.{storage}", body, timeout=5)
        for subject in ("b.x", "c.x"):
            second.append(json.loads((await nc.request(subject, PAYLOAD, timeout=5)).data))
        return [*first, *second]
    finally:
        await nc.close()


def test_accounts_share_the_server_limit_as_in_nats_server(servers: tuple[str, str]) -> None:
    real_url, our_url = servers
    expected = asyncio.run(asyncio.wait_for(two_accounts(real_url), 60))
    got = asyncio.run(asyncio.wait_for(two_accounts(our_url), 60))
    assert masked(got) == masked(expected)


SMALL = """
max_payload: 1024
jetstream { store_dir: "%(store)s", max_memory_store: 100000, max_file_store: 100000 }
"""


async def small_fill(url: str) -> list[object]:
    """Batches far below the limit pass on the server's budget, unsized; the last ones near it
    are sized message by message: the refusal must still come at the same message."""
    nc = await nats.connect(url, allow_reconnect=False)
    answers: list[object] = []
    try:
        for storage in ("memory", "file"):
            config = json.dumps({"name": storage, "subjects": [f"{storage}.>"], "storage": storage})
            await nc.request(f"$JS.API.STREAM.CREATE.{storage}", config.encode(), timeout=5)
            inbox = nc.new_inbox()
            sub = await nc.subscribe(inbox)
            for _ in range(130):  # no waiting: they arrive in batches
                await nc.publish(f"{storage}.x", b"y" * 900, reply=inbox)
            acks = [json.loads((await sub.next_msg(timeout=5)).data) for _ in range(130)]
            # stored ones and refusals, counted: a file stream's PubAck waits for its fsync, so
            # refusals may overtake them
            stored = sorted(ack["seq"] for ack in acks if "error" not in ack)
            answers.append((stored, [ack["error"]["err_code"] for ack in acks if "error" in ack]))
    finally:
        await nc.close()
    return answers


def test_the_budget_path_refuses_at_the_same_message(tmp_path: Path) -> None:
    real_conf = tmp_path / "real.conf"
    real_conf.write_text(SMALL % {"store": tmp_path / "ns"})
    ours = options_from_text(SMALL % {"store": tmp_path / "ours"}, filename=str(tmp_path / "ours.conf"))
    with NatsServer(["-c", str(real_conf)]) as real, InProcessServer(ours) as mine:
        expected = asyncio.run(asyncio.wait_for(small_fill(real.url), 60))
        got = asyncio.run(asyncio.wait_for(small_fill(mine.url), 60))
    assert got == expected
    assert all(refused and set(refused) == {10023} for _, refused in got)  # type: ignore[misc]
