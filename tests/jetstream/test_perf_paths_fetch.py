"""The pull delivery run (consumer._deliver_run, the common case in one loop) and the general
delivery path produce the same deliveries: ack subjects with consecutive consumer sequences,
pending counts, redeliveries interleaved, max_bytes and filtered requests on the general path."""

from __future__ import annotations

import json
from pathlib import Path

from nats.aio.client import Client
from nats.js import JetStreamContext

from appliance.jetstream.config import parse_consumer_config, parse_stream_config
from appliance.jetstream.consumer import Consumer
from appliance.jetstream.groups import memory_storage
from appliance.jetstream.stream import Stream, store_limits
from appliance.store.filestore import FileStoreConfig, FileStreamStore
from appliance.testing.inproc import InProcessServer
from .conftest import api, run_with
from .test_perf_paths_publish import ScriptedHost


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


def test_a_consumer_cursor_survives_a_segment_sealed_under_it(tmp_path: Path) -> None:
    """The delivery cursor is kept across loop turns; a segment sealed meanwhile (its compressed
    file renamed over the active one) must not be read with the old view."""
    host = ScriptedHost()
    config = parse_stream_config({"name": "S", "subjects": ["s.>"]})
    store = FileStreamStore(
        FileStoreConfig(
            directory=str(tmp_path / "msgs"), limits=store_limits(config), sync_always=False,
            segment_bytes=4096, seal_inline=False,
        )
    )
    stream = Stream(config=config, created_ns=1, store=store, host=host, peer="p1", group_id="S-c")
    consumer_config = parse_consumer_config(
        {"durable_name": "D", "ack_policy": "explicit"}, stream=config, ephemeral=False
    )
    consumer = Consumer(
        stream=stream, config=consumer_config, created_ns=1, host=host, peer="p1", group_id="C-c",
        storage=memory_storage("p1"), on_inactive=lambda _c: None, fresh=True,
    )
    try:
        for index in range(200):
            stream.publish_raw("s.a", b"", b"", b"payload %03d" % index)
            if index % 20 == 19:
                host.turn()  # one append per turn: the segments roll at 4 KiB
        while host.soon:
            host.turn()  # the group's Ready loop applies the last batch a turn after its proposal
        assert len(store.segments()) >= 3
        first = consumer._load_next(1)  # the cursor now holds the first segment, unsealed
        assert first is not None and first.payload == b"payload 000"
        sealed = 0
        while (job := store.begin_seal()) is not None:
            job.run()
            sealed += store.finish_seal(job)
        assert sealed > 0
        read = [consumer._load_next(seq) for seq in range(2, 201)]
        assert [m.payload for m in read if m is not None] == [b"payload %03d" % i for i in range(1, 200)]
    finally:
        consumer.stop(deleted=False)
        stream.close()


def test_a_kept_cursor_sees_messages_stored_after_it_read_the_active_file(tmp_path: Path) -> None:
    """The cursor reads the active file once; a message stored after that is past its end. A
    fetch after each publish must get that message (it used to answer 408 every other time)."""
    host = ScriptedHost()
    config = parse_stream_config({"name": "S", "subjects": ["s.>"]})
    store = FileStreamStore(
        FileStoreConfig(directory=str(tmp_path / "msgs"), limits=store_limits(config), sync_always=False)
    )
    stream = Stream(config=config, created_ns=1, store=store, host=host, peer="p1", group_id="S-c")
    consumer_config = parse_consumer_config(
        {"durable_name": "D", "ack_policy": "none"}, stream=config, ephemeral=False
    )
    consumer = Consumer(
        stream=stream, config=consumer_config, created_ns=1, host=host, peer="p1", group_id="C-c",
        storage=memory_storage("p1"), on_inactive=lambda _c: None, fresh=True,
    )
    try:
        for index in range(5):
            stream.publish_raw("s.a", b"", b"", b"m%d" % index)
            host.settle()  # the batch applies on the turn after its proposal
            found = consumer._load_next(index + 1)
            assert found is not None and found.payload == b"m%d" % index
        assert consumer._load_next(6) is None
    finally:
        consumer.stop(deleted=False)
        stream.close()
