"""The snapshot/restore protocol on the wire, appliance against nats-server 2.15.1: the same raw
requests, answers compared with times and ids masked (answers, chunk reply subjects, the end
marker's status header, chunk acks, the final restore answer, and every error)."""

from __future__ import annotations

import asyncio
import json
import random
import re

import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext

from tests.jetstream.conftest import api, run_with

TIME = re.compile(r'"\d{4}-\d\d-\d\dT[^"]+"')
NUID = re.compile(r"\.[A-Za-z0-9]{22}(?=[.\"]|$)")


def _mask(value: object) -> object:
    text = json.dumps(value, sort_keys=True)
    text = TIME.sub('"<time>"', text)
    text = NUID.sub(".<id>", text)
    return json.loads(text)


def _masked_config(answer: dict) -> dict:
    config = dict(answer.get("config") or {})
    config.pop("metadata", None)  # _nats.* stamps differ by design (server version)
    return config


async def _snapshot(nc: Client, stream: str, body: dict) -> dict[str, object]:
    """A raw snapshot: the answer, each chunk's reply subject and size, the end marker's headers."""
    inbox = nc.new_inbox()
    chunks: list[tuple[str, int]] = []
    end: list[dict[str, str] | None] = []
    done = asyncio.Event()

    async def on_chunk(msg):  # type: ignore[no-untyped-def]
        if not msg.data:
            end.append(dict(msg.headers) if msg.headers else None)
            done.set()
            return
        chunks.append((msg.reply, len(msg.data)))
        if msg.reply:
            await nc.publish(msg.reply, b"")

    sub = await nc.subscribe(inbox, cb=on_chunk)
    answer = await api(nc, f"$JS.API.STREAM.SNAPSHOT.{stream}", json.dumps({"deliver_subject": inbox, **body}).encode())
    await asyncio.wait_for(done.wait(), 10)
    await sub.unsubscribe()
    replies = [reply for reply, _ in chunks]
    return {
        "answer": {"type": answer["type"], "state": answer["state"], "config": _masked_config(answer)},
        "reply_shapes": sorted({NUID.sub(".<id>", reply).rsplit(".", 2)[0] for reply in replies if reply}),
        "indexes": [int(reply.rsplit(".", 1)[1]) for reply in replies if reply],
        "sizes_acked": [int(reply.rsplit(".", 2)[1]) for reply in replies if reply],
        "last_has_reply": bool(replies and replies[-1]),
        "end": end[0],
        "chunk_size_seen": max((size for _, size in chunks), default=0),
    }


def _both(servers: tuple[str, str], scenario) -> tuple[list, list]:  # type: ignore[no-untyped-def]
    results: list[list] = [[], []]
    for index, url in enumerate(servers):

        async def run(nc: Client, js: JetStreamContext, out: list = results[index]) -> None:
            out.extend(await scenario(nc, js))

        run_with(url, run)
    return results[0], results[1]


async def _stream(js: JetStreamContext, count: int, size: int) -> None:
    await js.add_stream(name="S", subjects=["s.>"])
    rng = random.Random(7)  # incompressible, and the same bytes for both servers
    for i in range(count):
        await js.publish(f"s.{i % 3}", rng.randbytes(size))


def test_snapshot_protocol_matches(servers: tuple[str, str]) -> None:
    async def scenario(nc: Client, js: JetStreamContext) -> list:
        await _stream(js, 40, 2000)  # ~80 KB: several 4 KiB chunks whatever the compression
        big = await _snapshot(nc, "S", {"chunk_size": 4096, "window_size": 8192})
        # small chunks: shape only (the compressed size differs, so the chunk count does)
        shape = {k: v for k, v in big.items() if k not in ("indexes", "sizes_acked")}
        indexes = big["indexes"]
        assert isinstance(indexes, list) and indexes == list(range(1, len(indexes) + 1))
        assert set(big["sizes_acked"]) == {4096}  # type: ignore[arg-type]
        await js.add_stream(name="TINY", subjects=["tiny"])
        await js.publish("tiny", b"x")
        tiny = await _snapshot(nc, "TINY", {})  # one short chunk, no reply, end without header
        tiny.pop("chunk_size_seen")  # its size depends on the compression
        clamped = await _snapshot(nc, "S", {"chunk_size": 10, "window_size": 10})  # clamped to 1 KiB
        clamped_shape = {"chunk": clamped["chunk_size_seen"], "acked": set(clamped["sizes_acked"]) == {1024}}  # type: ignore[arg-type]
        return [_mask(shape), _mask(tiny), clamped_shape]

    real, ours = _both(servers, scenario)
    assert ours == real


def test_snapshot_and_restore_errors_match(servers: tuple[str, str]) -> None:
    async def scenario(nc: Client, js: JetStreamContext) -> list:
        await js.add_stream(name="S", subjects=["s.>"])
        out = []
        for subject, body in [
            ("$JS.API.STREAM.SNAPSHOT.S", b""),
            ("$JS.API.STREAM.SNAPSHOT.S", b"{}"),
            ("$JS.API.STREAM.SNAPSHOT.S", b"{ }"),
            ("$JS.API.STREAM.SNAPSHOT.NOPE", b'{"deliver_subject":"x"}'),
            ("$JS.API.STREAM.SNAPSHOT.S", b'{"deliver_subject":"a.*"}'),
            ("$JS.API.STREAM.SNAPSHOT.S", b'{"deliver_subject":""}'),
            ("$JS.API.STREAM.SNAPSHOT.S", b'{"no_consumers":true}'),
            ("$JS.API.STREAM.SNAPSHOT.S", b"{bad"),
            ("$JS.API.STREAM.SNAPSHOT.S", b'{"deliver_subject":5}'),
            ("$JS.API.STREAM.RESTORE.S", b""),
            ("$JS.API.STREAM.RESTORE.S", b"{}"),
            ("$JS.API.STREAM.RESTORE.S", b'{"config":{"name":"S"}}'),
            ("$JS.API.STREAM.RESTORE.S", b'{"config":{"name":"T"}}'),
            ("$JS.API.STREAM.RESTORE.S", b"{bad"),
            ("$JS.API.STREAM.RESTORE.T", b'{"config":{"name":"T","storage":"disk"}}'),
        ]:
            out.append((subject, body.decode(), await api(nc, subject, body)))
        return out

    real, ours = _both(servers, scenario)
    assert ours == real


async def _chunk_outcome(nc: Client, deliver: str, chunk: bytes) -> object:
    try:
        reply = await nc.request(deliver, chunk, timeout=5)
    except Exception as exc:  # noqa: BLE001 - the kind of failure is the result
        return type(exc).__name__
    if not reply.data:
        return "ack"
    body = json.loads(reply.data)
    return (body["type"], body["error"]["err_code"], body["error"]["code"])


@pytest.mark.parametrize("case", ["no_reply", "garbage", "empty_upload"])
def test_restore_upload_protocol_matches(servers: tuple[str, str], case: str) -> None:
    """The restore answer, chunk acks, and what ends a bad upload."""

    async def scenario(nc: Client, js: JetStreamContext) -> list:
        answer = await api(nc, "$JS.API.STREAM.RESTORE.R", b'{"config":{"name":"R","subjects":["r"]}}')
        deliver = answer["deliver_subject"]
        out: list = [_mask(answer)]
        if case == "garbage":
            for chunk in (b"this is not a backup at all" * 10, b""):
                out.append(await _chunk_outcome(nc, deliver, chunk))
        elif case == "empty_upload":
            reply = await nc.request(deliver, b"", timeout=5)
            body = json.loads(reply.data)
            out.append((body["type"], body["error"]["err_code"], body["error"]["code"]))
        else:
            await nc.publish(deliver, b"chunk without a reply")
            await nc.flush()
            try:
                await nc.request(deliver, b"", timeout=1)
                out.append("answered")
            except Exception as exc:  # noqa: BLE001 - the kind of failure is the result
                out.append(type(exc).__name__)
        names = await api(nc, "$JS.API.STREAM.NAMES")
        out.append(names.get("streams") or [])  # (nats-server says null for none, appliance [])
        return out

    real, ours = _both(servers, scenario)
    assert ours == real


def test_advisories_and_overlap_on_restore_match(servers: tuple[str, str], tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The snapshot/restore advisories (subjects, types, keys) and a restore whose subjects
    overlap a stream created meanwhile (refused when the upload ends)."""
    from appliance.cli.jsapi import ApiError
    from appliance.cli.stream_backup import backup_stream, restore_stream

    async def scenario(nc: Client, js: JetStreamContext) -> list:
        seen: list[tuple[str, str, list[str], list[str]]] = []

        async def on_advisory(msg):  # type: ignore[no-untyped-def]
            body = json.loads(msg.data)
            if "SNAPSHOT" in msg.subject or "RESTORE" in msg.subject:
                # rtt: nats-server has measured one by then; appliance's client_info leaves a 0 out
                client_keys = sorted(set(body.get("client", {})) - {"rtt"})
                seen.append((msg.subject, body["type"], sorted(body), client_keys))

        sub = await nc.subscribe("$JS.EVENT.ADVISORY.STREAM.>", cb=on_advisory)
        directory = tmp_path / f"b{len(str(nc.connected_url))}{id(seen)}"
        await js.add_stream(name="T", subjects=["t.>"])
        for i in range(5):
            await js.publish(f"t.{i}", b"m")
        await backup_stream(nc, "T", str(directory))
        await api(nc, "$JS.API.STREAM.DELETE.T")
        await js.add_stream(name="U", subjects=["t.>"])
        outcome: list[object] = []
        try:
            await restore_stream(nc, str(directory))
            outcome.append("restored")
        except ApiError as exc:
            outcome.append((exc.code, exc.err_code, exc.description))
        await api(nc, "$JS.API.STREAM.DELETE.U")
        restored = await restore_stream(nc, str(directory))
        outcome.append(restored["state"]["messages"])
        await nc.flush()
        for _ in range(100):
            if len(seen) >= 6:
                break
            await asyncio.sleep(0.02)
        await sub.unsubscribe()
        return [outcome, sorted(seen)]

    real, ours = _both(servers, scenario)
    assert ours == real


LIMITED = 'jetstream { store_dir: "%(store)s", max_memory_store: 100000, max_file_store: 100000 }\n'


def test_restore_beyond_the_storage_limit_matches(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A backup larger than the server's file store limit: refused when the upload ends."""
    from appliance.cli.jsapi import ApiError
    from appliance.cli.stream_backup import backup_stream, restore_stream
    from appliance.config import options_from_text
    from appliance.testing.inproc import InProcessServer
    from appliance.testing.natsserver import NatsServer

    async def take(nc: Client, js: JetStreamContext) -> None:
        await js.add_stream(name="BIG", subjects=["big"])
        rng = random.Random(3)
        for _ in range(200):
            await js.publish("big", rng.randbytes(1000))
        await backup_stream(nc, "BIG", str(tmp_path / "backup"))

    outcomes: list[object] = []

    async def put(nc: Client, js: JetStreamContext) -> None:
        try:
            await restore_stream(nc, str(tmp_path / "backup"))
            outcomes.append("restored")
        except ApiError as exc:
            outcomes.append((exc.code, exc.err_code, exc.description))
        outcomes.append((await api(nc, "$JS.API.STREAM.NAMES")).get("streams") or [])

    with NatsServer(["-js", "-sd", str(tmp_path / "source")]) as source:
        run_with(source.url, take)
    real_conf = tmp_path / "real.conf"
    real_conf.write_text(LIMITED % {"store": tmp_path / "ns"})
    ours = options_from_text(LIMITED % {"store": tmp_path / "ours"}, filename=str(tmp_path / "ours.conf"))
    with NatsServer(["-c", str(real_conf)]) as real, InProcessServer(ours) as mine:
        run_with(real.url, put)
        run_with(mine.url, put)
    assert outcomes[2:] == outcomes[:2]
    assert outcomes[0] == (500, 10047, "insufficient storage resources available")


def test_receiver_going_away_ends_the_snapshot_as_nats_server(servers: tuple[str, str]) -> None:
    """A receiver that unsubscribes mid-snapshot: SNAPSHOT_COMPLETE says "no interest" at once
    (well before the 5 s ack timeout)."""

    async def scenario(nc: Client, js: JetStreamContext) -> list:
        await _stream(js, 40, 2000)
        done = asyncio.Event()
        completed: list[str] = []

        async def on_complete(msg):  # type: ignore[no-untyped-def]
            completed.append(json.loads(msg.data).get("error", ""))
            done.set()

        await nc.subscribe("$JS.EVENT.ADVISORY.STREAM.SNAPSHOT_COMPLETE.S", cb=on_complete)
        inbox = nc.new_inbox()
        got: list[int] = []

        async def on_chunk(msg):  # type: ignore[no-untyped-def]
            got.append(len(msg.data))  # never acked

        sub = await nc.subscribe(inbox, cb=on_chunk)
        body = {"deliver_subject": inbox, "chunk_size": 4096, "window_size": 8192}
        await api(nc, "$JS.API.STREAM.SNAPSHOT.S", json.dumps(body).encode())
        while len(got) < 2:
            await asyncio.sleep(0.01)
        started = asyncio.get_running_loop().time()
        await sub.unsubscribe()
        await asyncio.wait_for(done.wait(), 10)
        return [completed, asyncio.get_running_loop().time() - started < 2.0]

    real, ours = _both(servers, scenario)
    assert ours == real == [["no interest"], True]
