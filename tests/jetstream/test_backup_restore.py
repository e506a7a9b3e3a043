"""Stream backup and restore ($JS.API.STREAM.SNAPSHOT / RESTORE) with nats-py: a backup taken
from appliance restores into appliance with every message, deleted gap, consumer config and
consumer state; and backups move between appliance and nats-server 2.15.1 both ways."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext

from appliance.cli.stream_backup import backup_stream, restore_stream
from appliance.testing.inproc import InProcessServer
from tests.jetstream.conftest import api, run_with


async def _fill(nc: Client, js: JetStreamContext, storage: str = "file") -> None:
    await js.add_stream(name="ORDERS", subjects=["orders.>"], storage=storage)
    for i in range(300):
        headers = {"Nats-Msg-Id": f"id-{i}"} if i % 7 == 0 else None
        await js.publish(f"orders.{i % 5}", f"order {i} ".encode() * (i % 13 + 1), headers=headers)
    await api(nc, "$JS.API.STREAM.MSG.DELETE.ORDERS", json.dumps({"seq": 10}).encode())
    await api(nc, "$JS.API.STREAM.MSG.DELETE.ORDERS", json.dumps({"seq": 300}).encode())
    await js.add_consumer("ORDERS", durable_name="WORKER", ack_policy="explicit", filter_subject="orders.1")
    await js.add_consumer("ORDERS", durable_name="ALL", ack_policy="explicit")
    sub = await js.pull_subscribe("orders.>", durable="ALL", stream="ORDERS")
    msgs = await sub.fetch(20)
    for msg in msgs[:12]:
        await msg.ack()
    await msgs[12].nak()
    for _ in range(10):  # nats-server may hand out a new message before the redelivery
        again = await sub.fetch(1)
        if again[0].metadata.num_delivered == 2:
            break
    assert again[0].metadata.num_delivered == 2  # a redelivery, pending again
    await sub.unsubscribe()


async def _contents(nc: Client) -> dict[str, object]:
    """Everything a restore must bring back, with times of the restore masked."""
    info = await api(nc, "$JS.API.STREAM.INFO.ORDERS", json.dumps({"deleted_details": True}).encode())
    messages = []
    seq = 1
    while True:
        answer = await api(nc, "$JS.API.STREAM.MSG.GET.ORDERS", json.dumps({"seq": seq, "next_by_subj": ">"}).encode())
        if "error" in answer:
            break
        message = answer["message"]
        messages.append((message["seq"], message["subject"], message.get("hdrs"), message.get("data"), message["time"]))
        seq = message["seq"] + 1
    consumers = {}
    for name in ("WORKER", "ALL"):
        consumer = await api(nc, f"$JS.API.CONSUMER.INFO.ORDERS.{name}")
        consumers[name] = {
            key: consumer[key] for key in ("num_ack_pending", "num_pending", "num_redelivered")
        } | {
            "delivered": consumer["delivered"]["stream_seq"],
            "ack_floor": consumer["ack_floor"]["stream_seq"],
            "filter": consumer["config"].get("filter_subject"),
            "ack_policy": consumer["config"]["ack_policy"],
        }
    state = info["state"]
    return {
        "state": {key: state.get(key) for key in ("messages", "bytes", "first_seq", "last_seq", "num_deleted", "deleted", "num_subjects", "consumer_count", "first_ts", "last_ts")},
        "subjects": info["config"]["subjects"],
        "storage": info["config"]["storage"],
        "messages": messages,
        "consumers": consumers,
    }


def _round_trip(source_url: str, target_url: str, directory: Path, storage: str = "file") -> tuple[dict, dict, dict]:
    before: dict = {}
    after: dict = {}
    restored: dict = {}

    async def take(nc: Client, js: JetStreamContext) -> None:
        await api(nc, "$JS.API.STREAM.DELETE.ORDERS")  # from an earlier round, if any
        await _fill(nc, js, storage)
        before.update(await _contents(nc))
        await backup_stream(nc, "ORDERS", str(directory), consumers=True, chunk_size=4096)

    async def put_back(nc: Client, js: JetStreamContext) -> None:
        await api(nc, "$JS.API.STREAM.DELETE.ORDERS")
        restored.update(await restore_stream(nc, str(directory)))
        after.update(await _contents(nc))

    run_with(source_url, take)
    run_with(target_url, put_back)
    return before, after, restored


def test_backup_from_appliance_restores_into_appliance(js_server: InProcessServer, tmp_path: Path) -> None:
    before, after, restored = _round_trip(js_server.url, js_server.url, tmp_path / "backup")
    assert after == before
    assert len(before["messages"]) == 298
    assert before["consumers"]["ALL"]["num_ack_pending"] == 8
    assert restored["type"] == "io.nats.jetstream.api.v1.stream_create_response"
    assert restored["state"]["messages"] == 298
    layout = sorted(p.name for p in (tmp_path / "backup").iterdir())
    assert layout == ["backup.json", "stream.tar.s2"]
    meta = json.loads((tmp_path / "backup" / "backup.json").read_text())
    assert meta["config"]["name"] == "ORDERS" and meta["state"]["messages"] == 298


def test_memory_stream_round_trip(js_server: InProcessServer, tmp_path: Path) -> None:
    before, after, _ = _round_trip(js_server.url, js_server.url, tmp_path / "backup", storage="memory")
    assert after == before


def test_restored_stream_survives_a_restart(tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    with InProcessServer(jetstream_dir=store) as server:
        before, after, _ = _round_trip(server.url, server.url, tmp_path / "backup")
    assert after == before
    again: dict = {}

    async def read(nc: Client, js: JetStreamContext) -> None:
        again.update(await _contents(nc))

    with InProcessServer(jetstream_dir=store) as server:
        run_with(server.url, read)
    assert again == before


def test_backups_move_between_nats_server_and_appliance(servers: tuple[str, str], tmp_path: Path) -> None:
    real, ours = servers
    ns_before, ns_into_ours, _ = _round_trip(real, ours, tmp_path / "from-nats-server")
    assert ns_into_ours == ns_before
    ours_before, ours_into_ns, _ = _round_trip(ours, real, tmp_path / "from-appliance")
    # nats-server's 'bytes' count differs from ours only for the stream as a whole
    assert ours_into_ns["messages"] == ours_before["messages"]
    assert ours_into_ns["consumers"] == ours_before["consumers"]


async def _raw_snapshot(nc: Client, *, ack: bool) -> tuple[int, dict | None]:
    """Chunks received and the end marker's headers, acking or not."""
    inbox = nc.new_inbox()
    got: list[int] = []
    end: list[dict | None] = []
    done = asyncio.Event()

    async def on_chunk(msg):  # type: ignore[no-untyped-def]
        if not msg.data:
            end.append(dict(msg.headers) if msg.headers else None)
            done.set()
            return
        got.append(len(msg.data))
        if ack and msg.reply:
            await nc.publish(msg.reply, b"")

    sub = await nc.subscribe(inbox, cb=on_chunk)
    body = {"deliver_subject": inbox, "chunk_size": 1024, "window_size": 4096}
    await api(nc, "$JS.API.STREAM.SNAPSHOT.ORDERS", json.dumps(body).encode())
    await asyncio.wait_for(done.wait(), 10)
    await sub.unsubscribe()
    return len(got), end[0]


def test_snapshot_flow_control_window_and_timeout(js_server: InProcessServer) -> None:
    """Without acks the server stops at the window (4 chunks) and ends with 408 No Flow Response."""

    async def scenario(nc: Client, js: JetStreamContext) -> None:
        await _fill(nc, js)
        chunks, end = await _raw_snapshot(nc, ack=False)
        assert chunks == 4
        assert end == {"Status": "408", "Description": "No Flow Response"}
        chunks, end = await _raw_snapshot(nc, ack=True)
        assert chunks > 4 and end == {"Status": "204"}

    run_with(js_server.url, scenario)


def test_restore_needs_a_reply_per_chunk_and_refuses_a_second_restore(js_server: InProcessServer) -> None:
    async def scenario(nc: Client, js: JetStreamContext) -> None:
        first = await api(nc, "$JS.API.STREAM.RESTORE.R", b'{"config":{"name":"R","subjects":["r"]}}')
        second = await api(nc, "$JS.API.STREAM.RESTORE.R", b'{"config":{"name":"R","subjects":["r"]}}')
        assert second["error"]["err_code"] == 10130  # one restore of a name at a time
        await nc.publish(first["deliver_subject"], b"no reply")  # abandons the restore
        await nc.flush()
        deadline = asyncio.get_running_loop().time() + 5
        while True:
            again = await api(nc, "$JS.API.STREAM.RESTORE.R", b'{"config":{"name":"R","subjects":["r"]}}')
            if "error" not in again or asyncio.get_running_loop().time() > deadline:
                break
            await asyncio.sleep(0.05)
        assert again["deliver_subject"].startswith("$JS.SNAPSHOT.RESTORE.R.")

    run_with(js_server.url, scenario)


def test_a_stalled_restore_is_abandoned(js_server: InProcessServer) -> None:
    """No chunk for 5 s: the restore ends (its deliver subject is gone, the name is free)."""

    async def scenario(nc: Client, js: JetStreamContext) -> None:
        first = await api(nc, "$JS.API.STREAM.RESTORE.R", b'{"config":{"name":"R","subjects":["r"]}}')
        loop = asyncio.get_running_loop()
        started = loop.time()
        while "error" in (again := await api(nc, "$JS.API.STREAM.RESTORE.R", b'{"config":{"name":"R"}}')):
            assert loop.time() - started < 10, again
            await asyncio.sleep(0.2)
        assert loop.time() - started >= 4.5  # not before the stall timeout
        try:
            await nc.request(first["deliver_subject"], b"late chunk", timeout=1)
            raise AssertionError("an abandoned restore took a chunk")
        except Exception as exc:  # noqa: BLE001 - nobody is there any more
            assert "no responders" in str(exc)

    run_with(js_server.url, scenario)


def _backup(*entries: bytes, end: bool = True) -> bytes:
    from appliance.store import archive, s2frame

    raw = archive.MAGIC + b"".join(entries) + (archive.END if end else b"")
    return s2frame.frame(raw, first=True)


def _state(**fields: object) -> bytes:
    from appliance.store import archive

    state = {"messages": 1, "bytes": 40, "first_seq": 1, "last_seq": 1, "consumer_count": 0, **fields}
    return archive.entry("state.json", 1, 0, b"", json.dumps(state).encode())


def _msg(seq: int, subject: str = "r.1") -> bytes:
    from appliance.store import archive

    return archive.entry(subject, 1_700_000_000_000_000_000, seq, b"", b"payload")


def _consumer(record: object) -> bytes:
    from appliance.store import archive

    return archive.entry("consumers/C", 1, 0, b"", json.dumps(record).encode())


@pytest.mark.parametrize(
    ("backup", "why"),
    [
        (_backup(_state(), _msg(1), end=False), "backup was truncated"),
        (_backup(_msg(1)), "expected state.json first"),
        (_backup(_state(last_seq=3), _msg(2), _msg(2)), "out of order"),
        (_backup(_state(), _msg(1 << 63)), "not a valid message"),
        (_backup(_state(), _msg(1, "r.*")), "not a valid message"),
        (_backup(_state(consumer_count=1), _consumer({"config": {"durable_name": "C"}})), "missing state"),
        (_backup(_state(consumer_count=1), _consumer({"state": {}})), "missing config"),
        (_backup(_state(consumer_count=1), _consumer([1, 2])), "missing config"),
        (_backup(_state(consumer_count=1), _consumer({"config": {"ack_policy": 7}, "state": {}})), "invalid JSON"),
        (_backup(_state(consumer_count=1), _consumer({"config": {"durable_name": "C"}, "state": {"pending": 3}})), "malformed"),
        (_backup(_state(first_seq="x")), "not a number"),
        (b"\xff\x06\x00\x00S2sTwO" + b"\x00\x10\x00\x00" + b"\x00" * 16, "s2"),
        (b"plain text, not a backup", "not an S2 stream"),
    ],
)
def test_damaged_backups_are_refused(js_server: InProcessServer, backup: bytes, why: str) -> None:
    """Damaged or hostile backups: every chunk is answered, the end answer is 10062 (or the
    config's own error) naming the cause, no stream is left behind, the server goes on."""

    async def scenario(nc: Client, js: JetStreamContext) -> None:
        answer = await api(nc, "$JS.API.STREAM.RESTORE.R", b'{"config":{"name":"R","subjects":["r.>"]}}')
        deliver = answer["deliver_subject"]
        for start in range(0, len(backup), 7):
            reply = await nc.request(deliver, backup[start : start + 7], timeout=5)
            assert reply.data == b""
        final = json.loads((await nc.request(deliver, b"", timeout=5)).data)
        assert final["type"] == "io.nats.jetstream.api.v1.stream_create_response"
        assert why in final["error"]["description"], final
        names = await api(nc, "$JS.API.STREAM.NAMES")
        assert not names.get("streams")
        await js.add_stream(name="R", subjects=["r.>"])  # the name and the directory are free

    run_with(js_server.url, scenario)


def test_backup_without_consumers_and_leftovers_of_a_cut_restore(tmp_path: Path) -> None:
    store = tmp_path / "store"
    with InProcessServer(jetstream_dir=str(store)) as server:

        async def scenario(nc: Client, js: JetStreamContext) -> None:
            await _fill(nc, js)
            await backup_stream(nc, "ORDERS", str(tmp_path / "backup"), consumers=False)
            await api(nc, "$JS.API.STREAM.DELETE.ORDERS")
            await restore_stream(nc, str(tmp_path / "backup"))
            info = await api(nc, "$JS.API.STREAM.INFO.ORDERS")
            assert info["state"]["messages"] == 298 and info["state"]["consumer_count"] == 0
            # a restore in progress at shutdown: abandoned, its work directory removed
            answer = await api(nc, "$JS.API.STREAM.RESTORE.CUT", b'{"config":{"name":"CUT","subjects":["cut"]}}')
            await nc.request(answer["deliver_subject"], _backup(_state(), _msg(1, "cut"), end=False), timeout=5)
            assert any((store / "jetstream" / "$G" / "_restore").iterdir())

        run_with(server.url, scenario)
    leftovers = store / "jetstream" / "$G" / "_restore"
    assert not any(leftovers.iterdir())
    (leftovers / "killed" / "msgs").mkdir(parents=True)  # what a kill -9 mid-restore leaves
    with InProcessServer(jetstream_dir=str(store)):
        assert not leftovers.exists()
