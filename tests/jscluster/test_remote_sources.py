"""Mirrors and sources whose origin stream is not open on the copying stream's leader (issue #14
item 3): on the seed's three-node cluster an R1 origin placed on one server, a mirror and a
filtered `sources` stream led by another one. The leader reads the origin through a push consumer
there (nats-server's way) and copies with the origin's sequences (mirror) or a Nats-Stream-Source
header (source); the copy continues without gaps or duplicates after the copier's leader steps down."""

from __future__ import annotations

import asyncio
import base64
import json
import time

import nats
import pytest
from nats.aio.client import Client as NATS

from tests.jscluster.stepdown_cluster import api, api_until_ok, connect
from tests.jscluster.test_placement import five, holders  # noqa: F401 - `five`: a fixture
from tests.routes.conftest import Node

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]
COPY_TIMEOUT_S = 30.0


def run(coro: object) -> None:
    asyncio.run(coro)  # type: ignore[arg-type]


async def info(nc: NATS, stream: str) -> dict[str, object]:
    return await api_until_ok(nc, f"$JS.API.STREAM.INFO.{stream}")


def leader(stream_info: dict[str, object]) -> str:
    cluster = stream_info.get("cluster") or {}
    return str(cluster.get("leader", "")) if isinstance(cluster, dict) else ""


async def wait_state(nc: NATS, stream: str, msgs: int, last: int) -> dict[str, object]:
    deadline = time.monotonic() + COPY_TIMEOUT_S
    while True:
        got = await info(nc, stream)
        state = got["state"]
        assert isinstance(state, dict)
        if state.get("messages") == msgs and state.get("last_seq") == last:
            return got
        assert time.monotonic() < deadline, f"{stream}: {state}, want {msgs} messages up to {last}"
        await asyncio.sleep(0.1)


async def msg_get(nc: NATS, stream: str, seq: int) -> dict[str, object]:
    answer = await api(nc, f"$JS.API.STREAM.MSG.GET.{stream}", {"seq": seq})
    message = answer.get("message")
    assert isinstance(message, dict), answer
    return message


async def publish(nc: NATS, subject: str, payload: bytes) -> int:
    """Publish until acknowledged (an origin changing leaders may not answer for a moment); the
    payload is the Nats-Msg-Id, so a publish asked again is stored once."""
    deadline = time.monotonic() + COPY_TIMEOUT_S
    while True:
        try:
            msg = await nc.request(subject, payload, timeout=2, headers={"Nats-Msg-Id": payload.decode()})
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError):
            assert time.monotonic() < deadline, f"{subject} {payload!r} never acknowledged"
            continue
        ack = json.loads(msg.data)
        assert "error" not in ack, ack
        return int(ack["seq"])


async def create(nc: NATS, config: dict[str, object]) -> dict[str, object]:
    answer = await api_until_ok(nc, f"$JS.API.STREAM.CREATE.{config['name']}", config)
    return answer


async def step_down_until_moved(nc: NATS, stream: str, old: str) -> str:
    """Ask the stream's leader to step down until another server leads it."""
    deadline = time.monotonic() + COPY_TIMEOUT_S
    while True:
        try:
            await api(nc, f"$JS.API.STREAM.LEADER.STEPDOWN.{stream}", timeout_s=2.0)
        except Exception:  # noqa: BLE001 - a timeout while it changes hands: ask again
            pass
        now = leader(await info(nc, stream))
        if now and now != old:
            return now
        assert time.monotonic() < deadline, f"{stream} still led by {old}"
        await asyncio.sleep(0.2)


def test_mirror_of_an_origin_on_another_server_copies_and_survives_a_step_down(
        js_cluster: list[Node]) -> None:
    async def main() -> None:
        nc = await connect(js_cluster[0], {})
        try:
            created = await create(nc, {"name": "ORIG", "subjects": ["orig.>"], "num_replicas": 1})
            origin_server = leader(created) or leader(await info(nc, "ORIG"))
            for i in range(50):
                await publish(nc, f"orig.{i % 3}", b"m%d" % i)
            await api(nc, "$JS.API.STREAM.MSG.DELETE.ORIG", {"seq": 10, "no_erase": True})
            # an R1 mirror goes to a server with fewer assets than the origin's (placement by load)
            single = await create(nc, {"name": "MIR1", "num_replicas": 1, "mirror": {"name": "ORIG"}})
            assert (leader(single) or leader(await info(nc, "MIR1"))) != origin_server
            got = await wait_state(nc, "MIR1", 49, 50)
            assert got["state"]["first_seq"] == 1  # type: ignore[index]
            assert got["mirror"]["name"] == "ORIG" and "error" not in got["mirror"]  # type: ignore[index]
            for seq in (1, 25, 50):
                copy, original = await msg_get(nc, "MIR1", seq), await msg_get(nc, "ORIG", seq)
                assert copy["subject"] == original["subject"] and copy["data"] == original["data"]
                assert copy["time"] == original["time"]
            # an R3 mirror led elsewhere than the origin; more messages follow in both
            mirror = await create(nc, {"name": "MIR", "num_replicas": 3, "mirror": {"name": "ORIG"}})
            mirror_leader = leader(mirror) or leader(await info(nc, "MIR"))
            if mirror_leader == origin_server:  # it holds a replica everywhere: lead elsewhere
                mirror_leader = await step_down_until_moved(nc, "MIR", origin_server)
            for i in range(50, 80):
                await publish(nc, f"orig.{i % 3}", b"m%d" % i)
            await wait_state(nc, "MIR1", 79, 80)
            await wait_state(nc, "MIR", 79, 80)
            # the mirror's leader moves while messages keep coming: no gap, no duplicate
            moved = await step_down_until_moved(nc, "MIR", mirror_leader)
            for i in range(80, 120):
                await publish(nc, f"orig.{i % 3}", b"m%d" % i)
            await wait_state(nc, "MIR", 119, 120)
            if moved == origin_server:  # now read from its own replica of ORIG: step down again
                await step_down_until_moved(nc, "MIR", moved)
                for i in range(120, 130):
                    await publish(nc, f"orig.{i % 3}", b"m%d" % i)
                await wait_state(nc, "MIR", 129, 130)
            last = int((await info(nc, "MIR"))["state"]["last_seq"])  # type: ignore[index]
            await wait_state(nc, "MIR1", last - 1, last)
            for seq in [*range(1, last + 1, 7), last]:
                if seq == 10:
                    continue
                for name in ("MIR", "MIR1"):
                    copy = await msg_get(nc, name, seq)
                    assert base64.b64decode(copy["data"]) == b"m%d" % (seq - 1)  # type: ignore[arg-type]
        finally:
            await nc.close()

    run(main())


def test_filtered_source_of_an_origin_on_another_server_copies_and_survives_a_step_down(
        js_cluster: list[Node]) -> None:
    async def main() -> None:
        nc = await connect(js_cluster[0], {})
        try:
            created = await create(nc, {"name": "SRC", "subjects": ["src.>"], "num_replicas": 1})
            origin_server = leader(created) or leader(await info(nc, "SRC"))
            copier = await create(nc, {"name": "AGG", "subjects": ["agg.>"], "num_replicas": 3,
                                       "sources": [{"name": "SRC", "filter_subject": "src.a.>"}]})
            copier_leader = leader(copier) or leader(await info(nc, "AGG"))
            if copier_leader == origin_server:
                copier_leader = await step_down_until_moved(nc, "AGG", origin_server)
            wanted = 0
            for i in range(60):
                subject = "src.a.x" if i % 2 == 0 else "src.b.x"
                await publish(nc, subject, b"s%d" % i)
                wanted += subject.startswith("src.a")
            got = await wait_state(nc, "AGG", wanted, wanted)
            sources = got.get("sources")
            assert isinstance(sources, list) and sources[0]["name"] == "SRC" and "error" not in sources[0]
            first = await msg_get(nc, "AGG", 1)
            header = base64.b64decode(first["hdrs"]).decode()  # type: ignore[arg-type]
            assert "Nats-Stream-Source: SRC 1 src.a.> > src.a.x" in header
            assert base64.b64decode(first["data"]) == b"s0"  # type: ignore[arg-type]
            last = await msg_get(nc, "AGG", wanted)
            assert base64.b64decode(last["data"]) == b"s58"  # type: ignore[arg-type]
            await step_down_until_moved(nc, "AGG", copier_leader)
            for i in range(60, 100):
                subject = "src.a.y" if i % 2 == 0 else "src.b.y"
                await publish(nc, subject, b"s%d" % i)
                wanted += subject.startswith("src.a")
            await wait_state(nc, "AGG", wanted, wanted)
            tail = await msg_get(nc, "AGG", wanted)
            assert base64.b64decode(tail["data"]) == b"s98"  # type: ignore[arg-type]
        finally:
            await nc.close()

    run(main())


def test_a_mirror_copies_more_than_a_flow_control_window_from_an_origin_elsewhere(
        js_cluster: list[Node]) -> None:
    total = 2 * 1024 + 300  # limits.JS_FLOW_CONTROL_MSGS: two flow-control requests answered

    async def main() -> None:
        nc = await connect(js_cluster[0], {})
        try:
            created = await create(nc, {"name": "BIG", "subjects": ["big"], "num_replicas": 1})
            origin_server = leader(created) or leader(await info(nc, "BIG"))
            for i in range(total):
                await nc.publish("big", b"b%d" % i)
            await nc.flush()
            await wait_state(nc, "BIG", total, total)
            mirror = await create(nc, {"name": "BIGM", "num_replicas": 1, "mirror": {"name": "BIG"}})
            assert (leader(mirror) or leader(await info(nc, "BIGM"))) != origin_server
            await wait_state(nc, "BIGM", total, total)
            for seq in (1, 1024, 1025, 2049, total):
                copy = await msg_get(nc, "BIGM", seq)
                assert base64.b64decode(copy["data"]) == b"b%d" % (seq - 1)  # type: ignore[arg-type]
        finally:
            await nc.close()

    run(main())


def test_killing_the_mirror_leader_the_copy_goes_on_without_gaps_or_duplicates(js_cluster: list[Node]) -> None:
    by_name = {node.name: node for node in js_cluster}

    async def main() -> None:
        nc = await connect(js_cluster[0], {})
        created = await create(nc, {"name": "KO", "subjects": ["ko"], "num_replicas": 1})
        origin_server = leader(created) or leader(await info(nc, "KO"))
        await nc.close()
        nc = await connect(by_name[origin_server], {})  # the client's server (the origin's) stays up
        try:
            mirror = await create(nc, {"name": "KM", "num_replicas": 3, "mirror": {"name": "KO"}})
            mirror_leader = leader(mirror) or leader(await info(nc, "KM"))
            if mirror_leader == origin_server:
                mirror_leader = await step_down_until_moved(nc, "KM", origin_server)
            for i in range(40):
                await publish(nc, "ko", b"k%d" % i)
            await wait_state(nc, "KM", 40, 40)
            by_name[mirror_leader].kill9()
            for i in range(40, 80):
                await publish(nc, "ko", b"k%d" % i)
            got = await wait_state(nc, "KM", 80, 80)
            assert leader(got) != mirror_leader
            for seq in range(1, 81, 3):
                copy = await msg_get(nc, "KM", seq)
                assert base64.b64decode(copy["data"]) == b"k%d" % (seq - 1)  # type: ignore[arg-type]
        finally:
            await nc.close()

    run(main())


def test_a_mirror_of_an_r3_origin_held_by_other_servers_of_five_follows_its_leader_changes(
        five: list[Node]) -> None:  # noqa: F811 - the fixture
    async def main() -> None:
        nc = await connect(five[0], {})
        try:
            # the mirror first, on n2 (az:1, hdd), its origin not there yet: missing, asked for again
            mirror = await create(nc, {"name": "FM", "num_replicas": 1, "mirror": {"name": "FO"},
                                       "placement": {"tags": ["az:1", "hdd"]}})
            assert leader(mirror) == "n2-c1" or leader(await info(nc, "FM")) == "n2-c1"
            # an R3 origin in three zones: az:1's replica goes to n1 (fewer assets than n2)
            await create(nc, {"name": "FO", "subjects": ["fo.>"], "num_replicas": 3})
            assert "n2-c1" not in holders(five, "FO")
            for i in range(60):
                await publish(nc, f"fo.{i % 4}", b"f%d" % i)
            await wait_state(nc, "FM", 60, 60)
            origin_leader = leader(await info(nc, "FO"))
            await step_down_until_moved(nc, "FO", origin_leader)
            for i in range(60, 120):
                await publish(nc, f"fo.{i % 4}", b"f%d" % i)
            got = await wait_state(nc, "FM", 120, 120)
            assert "error" not in got["mirror"]  # type: ignore[operator]
            for seq in range(1, 121, 5):
                copy = await msg_get(nc, "FM", seq)
                assert base64.b64decode(copy["data"]) == b"f%d" % (seq - 1)  # type: ignore[arg-type]
        finally:
            await nc.close()

    run(main())
