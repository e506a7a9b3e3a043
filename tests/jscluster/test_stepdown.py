"""Leader step-down on a three-node appliance cluster (spec §9.5): streams, consumers and the meta
group hand leadership over by a RAFT leadership transfer, with nothing acknowledged lost; placement
`preferred` is honoured; the refusals are nats-server's. The time from the request to a new leader
is measured and printed (run with -s to see it); only correctness is asserted."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Iterator
import pytest
from click.testing import CliRunner
from nats.errors import NoRespondersError, TimeoutError as NatsTimeout
from nats.js.errors import APIError, NoStreamResponseError

from appliance.cli.main import main
from tests.jscluster.stepdown_cluster import (
    APP,
    SYS,
    api,
    api_until_ok,
    connect,
    leader_of,
    make_cluster,
    meta_leader,
    settled_leader,
    start,
    stop,
    wait_for_meta,
)
from tests.routes.conftest import Node

pytestmark = pytest.mark.timeout(240)
NEW_LEADER_TIMEOUT_S = 15.0
CLOCK = re.compile(r"^\d\d:\d\d:\d\d ", re.MULTILINE)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Node]]:
    nodes = make_cluster(tmp_path_factory.mktemp("stepdown"), "appliance")
    try:
        start(nodes)
        wait_for_meta(nodes)
        yield nodes
    finally:
        stop(nodes)


async def new_leader(fetch: object, old: str) -> tuple[str, float]:
    """Poll until a leader other than `old` is reported; (its name, seconds waited)."""
    started = time.monotonic()
    while True:
        leader = await fetch()  # type: ignore[operator]
        if leader and leader != old:
            return str(leader), time.monotonic() - started
        assert time.monotonic() - started < NEW_LEADER_TIMEOUT_S, f"no new leader after {old}"
        await asyncio.sleep(0.01)


async def publish_until_acked(js: object, subject: str, data: bytes, msg_id: str, deadline_s: float,
                              retries: list[str] | None = None) -> int:
    """Publish until acknowledged (a retry keeps its Nats-Msg-Id: stored once); `retries` gets a
    line per failed attempt."""
    while True:
        try:
            ack = await js.publish(subject, data, timeout=1, headers={"Nats-Msg-Id": msg_id})  # type: ignore[attr-defined]
            return int(ack.seq)
        except (NatsTimeout, NoRespondersError, NoStreamResponseError, APIError) as exc:
            assert time.monotonic() < deadline_s, f"{msg_id} never acknowledged"
            if retries is not None:
                retries.append(f"{msg_id}: {type(exc).__name__}")
            await asyncio.sleep(0.02)


def replica_states(nodes: list[Node], stream: str) -> dict[str, dict[str, object]]:
    """Each server's own replica of `stream` (its /jsz stream detail state)."""
    states = {}
    for node in nodes:
        jsz = node.monitor("/jsz?accounts=true&streams=true")
        for account in jsz.get("account_details") or []:  # type: ignore[union-attr]
            for detail in account.get("stream_detail") or []:
                if detail["name"] == stream:
                    state = detail["state"]
                    states[node.name] = {k: state[k] for k in ("messages", "bytes", "first_seq", "last_seq")}
    return states


def test_stream_step_down_under_synchronous_publishes_loses_nothing(cluster: list[Node]) -> None:
    async def scenario() -> None:
        nc = await connect(cluster[0], APP)
        await api_until_ok(nc, "$JS.API.STREAM.CREATE.SYNC",
                           {"name": "SYNC", "subjects": ["sync.>"], "num_replicas": 3})
        js = nc.jetstream()
        acked: dict[str, int] = {}
        retries: list[str] = []
        stop_publishing = asyncio.Event()
        deadline = time.monotonic() + 150

        async def publisher() -> None:
            i = 0
            while not stop_publishing.is_set() or i < 40:
                acked[f"id-{i}"] = await publish_until_acked(js, "sync.x", b"%d" % i, f"id-{i}", deadline, retries)
                i += 1

        task = asyncio.create_task(publisher())
        times = []
        for _ in range(4):
            before = len(acked)
            while len(acked) < before + 10:  # publishes go on between step-downs
                assert not task.done(), task
                await asyncio.sleep(0.02)
            old = str((await settled_leader(nc, "$JS.API.STREAM.INFO.SYNC"))["cluster"]["leader"])  # type: ignore[index]
            answer = await api(nc, "$JS.API.STREAM.LEADER.STEPDOWN.SYNC")
            assert answer == {"type": "io.nats.jetstream.api.v1.stream_leader_stepdown_response", "success": True}
            leader, took = await new_leader(lambda: leader_of(nc, "$JS.API.STREAM.INFO.SYNC"), old)
            times.append(took)
        stop_publishing.set()
        await task
        print(f"\nstream step-down under publishes: new leader after {[f'{t:.3f}s' for t in times]}; "
              f"{len(acked)} publishes acknowledged, {len(retries)} attempts retried {retries}")
        info = await settled_leader(nc, "$JS.API.STREAM.INFO.SYNC")
        count = len(acked)
        assert sorted(acked.values()) == list(range(1, count + 1))  # each acknowledged once, none lost
        assert info["state"]["messages"] == count and info["state"]["last_seq"] == count  # type: ignore[index]
        await nc.close()
        deadline_same = time.monotonic() + 30
        while True:  # every replica holds the same messages
            states = replica_states(cluster, "SYNC")
            if len(states) == 3 and len({json.dumps(s, sort_keys=True) for s in states.values()}) == 1:
                break
            assert time.monotonic() < deadline_same, states
            await asyncio.sleep(0.1)
        assert next(iter(states.values()))["messages"] == count

    asyncio.run(scenario())


def test_stream_step_down_honours_the_preferred_server(cluster: list[Node]) -> None:
    async def scenario() -> None:
        nc = await connect(cluster[1], APP)
        await api_until_ok(nc, "$JS.API.STREAM.CREATE.PREF", {"name": "PREF", "subjects": ["pref"], "num_replicas": 3})
        for _ in range(3):
            info = await settled_leader(nc, "$JS.API.STREAM.INFO.PREF")
            old = str(info["cluster"]["leader"])  # type: ignore[index]
            wanted = str(info["cluster"]["replicas"][-1]["name"])  # type: ignore[index]
            answer = await api(nc, "$JS.API.STREAM.LEADER.STEPDOWN.PREF", {"placement": {"preferred": wanted}})
            assert answer.get("success") is True, answer
            leader, took = await new_leader(lambda: leader_of(nc, "$JS.API.STREAM.INFO.PREF"), old)
            print(f"\nstream step-down to {wanted}: {leader} after {took:.3f}s")
            assert leader == wanted
        await nc.close()

    asyncio.run(scenario())


def test_stream_step_down_by_cluster_and_tags(cluster: list[Node]) -> None:
    async def scenario() -> None:
        nc = await connect(cluster[2], APP)
        await api_until_ok(nc, "$JS.API.STREAM.CREATE.TAGS", {"name": "TAGS", "subjects": ["tags"], "num_replicas": 3})
        info = await settled_leader(nc, "$JS.API.STREAM.INFO.TAGS")
        old = str(info["cluster"]["leader"])  # type: ignore[index]
        wanted = str(info["cluster"]["replicas"][0]["name"])  # type: ignore[index]
        tag = f"az:{wanted[1]}"  # stepdown_cluster.TAGS
        answer = await api(nc, "$JS.API.STREAM.LEADER.STEPDOWN.TAGS", {"placement": {"cluster": "C1", "tags": [tag]}})
        assert answer.get("success") is True, answer
        leader, _ = await new_leader(lambda: leader_of(nc, "$JS.API.STREAM.INFO.TAGS"), old)
        assert leader == wanted
        await nc.close()

    asyncio.run(scenario())


def test_step_down_refusals_are_nats_servers(cluster: list[Node]) -> None:
    kind = "io.nats.jetstream.api.v1.stream_leader_stepdown_response"

    def no_peers(text: str) -> dict[str, object]:
        return {"type": kind, "error": {"code": 400, "err_code": 10005, "description": text}}

    async def scenario() -> None:
        nc = await connect(cluster[0], APP)
        await api_until_ok(nc, "$JS.API.STREAM.CREATE.ERR", {"name": "ERR", "subjects": ["err"], "num_replicas": 3})
        info = await settled_leader(nc, "$JS.API.STREAM.INFO.ERR")
        leader = str(info["cluster"]["leader"])  # type: ignore[index]
        subject = "$JS.API.STREAM.LEADER.STEPDOWN.ERR"
        assert await api(nc, subject, {"placement": {"preferred": leader}}) == no_peers(
            f'preferred server "{leader}" is already leader')
        assert await api(nc, subject, {"placement": {"preferred": "nope"}}) == no_peers('preferred server "nope" not known')
        assert await api(nc, subject, {"placement": {"cluster": "XX"}}) == no_peers("no replacement peer connected")
        assert await api(nc, subject, {"placement": {"tags": ["zz"]}}) == no_peers("no replacement peer connected")
        assert (await api(nc, subject, b'{"bogus":1}'))["error"] == {
            "code": 400, "err_code": 10025, "description": 'invalid JSON: json: unknown field "bogus"'}
        assert (await api(nc, "$JS.API.STREAM.LEADER.STEPDOWN.NOPE"))["error"] == {
            "code": 404, "err_code": 10059, "description": "stream not found"}
        assert await leader_of(nc, "$JS.API.STREAM.INFO.ERR") == leader  # nothing refused moved it
        await nc.close()

    asyncio.run(scenario())


def test_consumer_step_down_keeps_its_acks_and_pending(cluster: list[Node]) -> None:
    async def scenario() -> None:
        nc = await connect(cluster[1], APP)
        await api_until_ok(nc, "$JS.API.STREAM.CREATE.WORK", {"name": "WORK", "subjects": ["work"], "num_replicas": 3})
        js = nc.jetstream()
        deadline = time.monotonic() + 60
        for i in range(20):
            await publish_until_acked(js, "work", b"%d" % i, f"w-{i}", deadline)
        config = {"durable_name": "C", "ack_policy": "explicit", "ack_wait": 60_000_000_000}
        await api_until_ok(nc, "$JS.API.CONSUMER.CREATE.WORK.C", {"stream_name": "WORK", "config": config})
        sub = await js.pull_subscribe_bind("C", "WORK")
        first = await sub.fetch(10, timeout=5)
        for msg in first:
            await msg.ack_sync(timeout=5)
        info_subject = "$JS.API.CONSUMER.INFO.WORK.C"
        info = await settled_leader(nc, info_subject)
        old = str(info["cluster"]["leader"])  # type: ignore[index]
        wanted = str(info["cluster"]["replicas"][0]["name"])  # type: ignore[index]
        answer = await api(nc, "$JS.API.CONSUMER.LEADER.STEPDOWN.WORK.C", {"placement": {"preferred": wanted}})
        assert answer == {"type": "io.nats.jetstream.api.v1.consumer_leader_stepdown_response", "success": True}
        leader, took = await new_leader(lambda: leader_of(nc, info_subject), old)
        print(f"\nconsumer step-down to {wanted}: {leader} after {took:.3f}s")
        assert leader == wanted
        after = await api(nc, info_subject)
        assert after["ack_floor"]["stream_seq"] == 10 and after["num_pending"] == 10, json.dumps(after)  # type: ignore[index]
        rest: list[int] = []
        while len(rest) < 10:
            try:
                for msg in await sub.fetch(10 - len(rest), timeout=2):
                    rest.append(int(msg.data))
                    await msg.ack_sync(timeout=5)
            except NatsTimeout:
                assert time.monotonic() < deadline, rest
        assert rest == list(range(10, 20))  # the new leader goes on where the old one stopped
        for subject, error in (("$JS.API.CONSUMER.LEADER.STEPDOWN.WORK.NOPE", (404, 10014, "consumer not found")),
                               ("$JS.API.CONSUMER.LEADER.STEPDOWN.NOPE.C", (404, 10059, "stream not found"))):
            got = await api(nc, subject)
            assert got["type"] == "io.nats.jetstream.api.v1.consumer_leader_stepdown_response"
            assert got["error"] == dict(zip(("code", "err_code", "description"), error, strict=True))
        await nc.close()

    asyncio.run(scenario())


ACK_AT_STEPDOWN_DELAYS_S = (0.0, 0.22, 0.24, 0.25, 0.26, 0.27, 0.28, 0.3)  # the hand-over starts 0.25 s in


def test_an_acksync_sent_at_a_consumer_step_down_is_answered_and_kept(cluster: list[Node]) -> None:
    """An AckSync sent while the consumer's leader hands over (its proposal refused, or no
    replica leading) was dropped by every replica: the client waited in vain (seen 1 round in
    6 at 0.26 s). The next leader takes it (consumer_acks.py): every AckSync is answered and the
    ack floor covers them all. (nats-server answers 503 No Responders there.)"""
    async def scenario() -> None:
        nc = await connect(cluster[2], APP)
        rounds = len(ACK_AT_STEPDOWN_DELAYS_S)
        await api_until_ok(nc, "$JS.API.STREAM.CREATE.ACKS", {"name": "ACKS", "subjects": ["acks"], "num_replicas": 3})
        js = nc.jetstream()
        deadline = time.monotonic() + 120
        for i in range(rounds):
            await publish_until_acked(js, "acks", b"%d" % i, f"a-{i}", deadline)
        config = {"durable_name": "D", "ack_policy": "explicit", "ack_wait": 60_000_000_000}
        await api_until_ok(nc, "$JS.API.CONSUMER.CREATE.ACKS.D", {"stream_name": "ACKS", "config": config})
        sub = await js.pull_subscribe_bind("D", "ACKS")
        info_subject = "$JS.API.CONSUMER.INFO.ACKS.D"
        for delay in ACK_AT_STEPDOWN_DELAYS_S:
            info = await settled_leader(nc, info_subject)
            old = str(info["cluster"]["leader"])  # type: ignore[index]
            (msg,) = await sub.fetch(1, timeout=5)
            await nc.publish("$JS.API.CONSUMER.LEADER.STEPDOWN.ACKS.D", b"", reply=nc.new_inbox())
            await asyncio.sleep(delay)
            await msg.ack_sync(timeout=5)  # answered, not a timeout
            await new_leader(lambda: leader_of(nc, info_subject), old)
        after = await api_until_ok(nc, info_subject)
        assert after["ack_floor"]["stream_seq"] == rounds and after["num_ack_pending"] == 0, json.dumps(after)  # type: ignore[index]
        await nc.close()

    asyncio.run(scenario())


def test_meta_step_down_from_the_system_account_only(cluster: list[Node]) -> None:
    async def scenario() -> None:
        sys_nc = await connect(cluster[2], SYS)
        app = await connect(cluster[2], APP)
        old = await meta_leader(sys_nc)
        assert old
        with pytest.raises(NatsTimeout):  # another account's request gets no answer at all
            await app.request("$JS.API.META.LEADER.STEPDOWN", b"", timeout=1)
        assert await meta_leader(sys_nc) == old
        answer = await api(sys_nc, "$JS.API.META.LEADER.STEPDOWN")
        assert answer == {"type": "io.nats.jetstream.api.v1.meta_leader_stepdown_response", "success": True}
        leader, took = await new_leader(lambda: meta_leader(sys_nc, timeout_s=0.2), old)
        print(f"\nmeta step-down: {leader} after {took:.3f}s")
        wanted = next(node.name for node in cluster if node.name not in (old, leader))
        answer = await api(sys_nc, "$JS.API.META.LEADER.STEPDOWN", {"placement": {"preferred": wanted}})
        assert answer.get("success") is True, answer
        chosen, took = await new_leader(lambda: meta_leader(sys_nc, timeout_s=0.2), leader)
        print(f"meta step-down to {wanted}: {chosen} after {took:.3f}s")
        assert chosen == wanted
        # once every server knows it (a deposed leader that has not heard of its successor yet
        # still answers as leader for a moment, in nats-server too)
        deadline = time.monotonic() + NEW_LEADER_TIMEOUT_S
        while {node.monitor("/jsz")["meta_cluster"]["leader"] for node in cluster} != {wanted}:  # type: ignore[index]
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        refused = await api(sys_nc, "$JS.API.META.LEADER.STEPDOWN", {"placement": {"preferred": wanted}})
        assert refused["error"] == {"code": 400, "err_code": 10005,
                                    "description": f'preferred server "{wanted}" is already leader'}
        # the cluster still works: a new stream is placed and answered by the new meta leader
        await api_until_ok(app, "$JS.API.STREAM.CREATE.AFTER", {"name": "AFTER", "subjects": ["after"], "num_replicas": 3})
        await sys_nc.close()
        await app.close()

    asyncio.run(scenario())


def cli(nodes: list[Node], *args: str) -> str:
    urls = ",".join(node.url for node in nodes)
    result = CliRunner().invoke(main, [*args, "-s", urls, "--timeout", "5"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return CLOCK.sub("", result.stdout)


def test_cli_step_down_verbs_print_what_the_seed_shows(cluster: list[Node]) -> None:
    async def prepare() -> tuple[str, str]:
        nc = await connect(cluster[0], APP)
        await api_until_ok(nc, "$JS.API.STREAM.CREATE.ORDERS",
                           {"name": "ORDERS", "subjects": ["orders.>"], "num_replicas": 3})
        await api_until_ok(nc, "$JS.API.CONSUMER.CREATE.ORDERS.NEW",
                           {"stream_name": "ORDERS", "config": {"durable_name": "NEW", "ack_policy": "explicit"}})
        stream = await settled_leader(nc, "$JS.API.STREAM.INFO.ORDERS")
        consumer = await settled_leader(nc, "$JS.API.CONSUMER.INFO.ORDERS.NEW")
        await nc.close()
        return str(stream["cluster"]["leader"]), str(consumer["cluster"]["leader"])  # type: ignore[index]

    stream_leader, consumer_leader = asyncio.run(prepare())
    app = ["--user", "app", "--password", "app"]
    out = cli(cluster, "stream", "cluster", "step-down", "ORDERS", *app)
    lines = out.splitlines()
    assert lines[0] == f'Requesting leader step down of "{stream_leader}" in a 3 peer RAFT group'
    elected = re.search(r'^New leader elected "(n\d-c1)"$', out, re.MULTILINE)
    assert elected is not None and elected.group(1) != stream_leader, out
    assert "Information for Stream ORDERS created " in out and "Cluster Information:" in out
    assert f"                  Leader: {elected.group(1)}\n" in out

    out = cli(cluster, "consumer", "cluster", "step-down", "ORDERS", "NEW", *app)
    assert out.splitlines()[0] == f'Requesting leader step down of "{consumer_leader}" in a 3 peer RAFT group'
    elected = re.search(r'^New leader elected "(n\d-c1)"$', out, re.MULTILINE)
    assert elected is not None and elected.group(1) != consumer_leader, out
    assert "Information for Consumer ORDERS > NEW created " in out and "Cluster Information:" in out
    assert f"                  Leader: {elected.group(1)}\n" in out, out

    async def current_meta() -> str:
        nc = await connect(cluster[0], SYS)
        try:
            return await meta_leader(nc)
        finally:
            await nc.close()

    before = asyncio.run(current_meta())
    out = cli(cluster, "server", "raft", "step-down", "--user", "sys", "--password", "sys")
    assert out.splitlines()[0] == f'Requesting leader step down of "{before}" in a 3 peer RAFT group'
    elected = re.search(r'^New leader elected "(n\d-c1)"$', out, re.MULTILINE)
    assert elected is not None and elected.group(1) != before, out
