"""Leader step-down, differential: the same requests to a three-node nats-server 2.15.1 cluster and to
a three-node appliance cluster (same config), and the same answers: body, error code and text, how
many servers answer (one; none for a non-system account's meta step-down), and whether a preferred
server became the leader."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest
from nats.aio.client import Client as NATS

from tests.jscluster.stepdown_cluster import (
    APP,
    SYS,
    api_until_ok,
    connect,
    leader_of,
    make_cluster,
    meta_leader,
    run_started,
    settled_leader,
)

pytestmark = [pytest.mark.timeout(300), pytest.mark.integration]
REPLIES_WAIT_S = 0.5  # every answer of every server arrives within this on 127.0.0.1
S3_INFO = "$JS.API.STREAM.INFO.S3"
C_INFO = "$JS.API.CONSUMER.INFO.S3.C"
LEADER_WAIT_S = 15.0
PULL_ENDED_S = 5.0  # a pull request that waits at a consumer step-down hears of it within this
SERVER_NAME = re.compile(r"n[123]-c1")


async def replies(nc: NATS, subject: str, body: bytes) -> list[object]:
    """Every answer to one request (all servers hear it; the one that should answers)."""
    got: list[object] = []

    async def on_reply(msg: object) -> None:
        got.append(json.loads(msg.data))  # type: ignore[attr-defined]

    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox, cb=on_reply)
    await nc.publish(subject, body, reply=inbox)
    await nc.flush()
    await asyncio.sleep(REPLIES_WAIT_S)
    await sub.unsubscribe()
    return got


async def changed_to(nc: NATS, fetch: str, old: str) -> str:
    """The new leader once it differs from `old` (via INFO subject, or "meta")."""
    deadline = asyncio.get_running_loop().time() + LEADER_WAIT_S
    while asyncio.get_running_loop().time() < deadline:
        leader = await (meta_leader(nc) if fetch == "meta" else leader_of(nc, fetch))
        if leader and leader != old:
            return leader
        await asyncio.sleep(0.05)
    return old


async def waiting_pull(nc: NATS) -> list[dict[str, str]]:
    """A pull request of S3 > C that waits (nothing to deliver, a long expiry): what its inbox gets."""
    got: list[dict[str, str]] = []

    async def on_status(msg: object) -> None:
        got.append(dict(msg.headers or {}))  # type: ignore[attr-defined]

    inbox = nc.new_inbox()
    await nc.subscribe(inbox, cb=on_status)
    await nc.publish("$JS.API.CONSUMER.MSG.NEXT.S3.C", b'{"batch":1,"expires":30000000000}', reply=inbox)
    await nc.flush()
    await asyncio.sleep(REPLIES_WAIT_S)  # nats-server's leader replicates it to the followers meanwhile
    return got


async def pull_statuses(got: list[dict[str, str]]) -> list[dict[str, str]]:
    """What a waiting pull request got once its consumer's leader changed (up to PULL_ENDED_S)."""
    deadline = asyncio.get_running_loop().time() + PULL_ENDED_S
    while not got and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.05)
    return got


async def script(app: NATS, sys_nc: NATS) -> list[tuple[str, object]]:
    out: list[tuple[str, object]] = []
    await api_until_ok(app, "$JS.API.STREAM.CREATE.S3", {"name": "S3", "subjects": ["s3"], "num_replicas": 3})
    await api_until_ok(app, "$JS.API.STREAM.CREATE.S1", {"name": "S1", "subjects": ["s1"], "num_replicas": 1})
    await api_until_ok(app, "$JS.API.CONSUMER.CREATE.S3.C",
                       {"stream_name": "S3", "config": {"durable_name": "C", "ack_policy": "explicit"}})

    async def ask(label: str, nc: NATS, subject: str, body: bytes) -> None:
        out.append((label, await replies(nc, subject, body)))

    stream = await settled_leader(app, S3_INFO)
    leader = str(stream["cluster"]["leader"])  # type: ignore[index]
    sd = "$JS.API.STREAM.LEADER.STEPDOWN."
    for label, body in (
        ("stream preferred leader", json.dumps({"placement": {"preferred": leader}}).encode()),
        ("stream preferred unknown", b'{"placement":{"preferred":"nope"}}'),
        ("stream cluster unknown", b'{"placement":{"cluster":"XX"}}'),
        ("stream tags unmatched", b'{"placement":{"tags":["zz"]}}'),
        ("stream unknown field", b'{"bogus":1}'),
        ("stream array", b"[]"),
        ("stream wrong type", b'{"placement":{"preferred":1}}'),
        ("stream bad json", b"{bad"),
    ):
        await ask(label, app, sd + "S3", body)
    await ask("stream unknown", app, sd + "NOPE", b"")
    await ask("R1 stream", app, sd + "S1", b"")
    await ask("R1 stream preferred unknown", app, sd + "S1", b'{"placement":{"preferred":"nope"}}')

    consumer = await settled_leader(app, C_INFO)
    consumer_leader = str(consumer["cluster"]["leader"])  # type: ignore[index]
    csd = "$JS.API.CONSUMER.LEADER.STEPDOWN."
    await ask("consumer preferred unknown", app, csd + "S3.C", b'{"placement":{"preferred":"nope"}}')
    await ask("consumer preferred leader", app, csd + "S3.C",
              json.dumps({"placement": {"preferred": consumer_leader}}).encode())
    await ask("consumer unknown", app, csd + "S3.NOPE", b"")
    await ask("consumer of unknown stream", app, csd + "NOPE.C", b"")

    meta = await meta_leader(sys_nc)
    msd = "$JS.API.META.LEADER.STEPDOWN"
    await ask("meta from another account", app, msd, b"")
    await ask("meta preferred unknown", sys_nc, msd, b'{"placement":{"preferred":"nope"}}')
    await ask("meta bad json", sys_nc, msd, b"{bad")
    await ask("meta cluster unknown", sys_nc, msd, b'{"placement":{"cluster":"XX"}}')
    await ask("meta preferred leader", sys_nc, msd, json.dumps({"placement": {"preferred": meta}}).encode())

    await ask("stream", app, sd + "S3", b"")
    out.append(("stream leader changed", await changed_to(app, S3_INFO, leader) != leader))
    stream = await settled_leader(app, S3_INFO)
    leader = str(stream["cluster"]["leader"])  # type: ignore[index]
    await ask("stream non-JSON body", app, sd + "S3", b"hello")
    out.append(("stream leader changed again", await changed_to(app, S3_INFO, leader) != leader))
    stream = await settled_leader(app, S3_INFO)
    leader, wanted = str(stream["cluster"]["leader"]), str(stream["cluster"]["replicas"][0]["name"])  # type: ignore[index]
    await ask("stream preferred follower", app, sd + "S3", json.dumps({"placement": {"preferred": wanted}}).encode())
    out.append(("preferred stream leader", await changed_to(app, S3_INFO, leader) == wanted))

    consumer = await settled_leader(app, C_INFO)
    consumer_leader = str(consumer["cluster"]["leader"])  # type: ignore[index]
    pulls = await waiting_pull(app)
    await ask("consumer", app, csd + "S3.C", b"")
    out.append(("consumer leader changed", await changed_to(app, C_INFO, consumer_leader) != consumer_leader))
    out.append(("pull request waiting at the consumer step-down", await pull_statuses(pulls)))

    await ask("meta", sys_nc, msd, b"")
    out.append(("meta leader changed", await changed_to(sys_nc, "meta", meta) != meta))
    return out


def run_on(tmp_path: Path, kind: str) -> list[tuple[str, object]]:
    (tmp_path / kind).mkdir()
    nodes = make_cluster(tmp_path / kind, kind)

    async def scenario() -> list[tuple[str, object]]:
        app = await connect(nodes[0], APP)
        sys_nc = await connect(nodes[1], SYS)
        try:
            return await script(app, sys_nc)
        finally:
            await app.close()
            await sys_nc.close()

    return run_started(nodes, scenario)


def masked(answers: list[tuple[str, object]]) -> list[tuple[str, object]]:
    """Which server leads differs from run to run: its name in a text is masked."""
    return [(label, json.loads(SERVER_NAME.sub("<server>", json.dumps(answer)))) for label, answer in answers]


def once(answers: object) -> object:
    """nats-server's error answers given by every server that holds the stream (a consumer it
    does not know) reach the client through a singleton service import, which forwards the first
    and drops the rest, but not always: under load the three came back (CI). Identical repeats
    of one answer count once; appliance must still answer exactly once (compared as is)."""
    if isinstance(answers, list) and len(answers) > 1 and all(a == answers[0] for a in answers):
        return answers[:1]
    return answers


def test_step_down_answers_match_nats_server(tmp_path: Path) -> None:
    expected = masked(run_on(tmp_path, "go"))
    got = masked(run_on(tmp_path, "appliance"))
    assert [label for label, _ in got] == [label for label, _ in expected]
    for (label, want), (_, have) in zip(expected, got, strict=True):
        assert have == once(want), f"{label}: nats-server {want!r}, appliance {have!r}"
