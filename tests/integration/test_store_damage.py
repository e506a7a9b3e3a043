"""`appliance run` on a damaged store directory: every damage case starts the real server process
and asserts what still works (issue 12 §1). The stream directory is filled once per module: the
server creates the streams and a durable consumer, then the EVENTS stream gets 100,000 messages
through the store itself (three segments: two sealed, one active) so each test runs in seconds.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import nats
import pytest

from appliance import limits
from appliance.store.filestore import FileStoreConfig, FileStreamStore
from appliance.testing.process import ApplianceProcess, free_port

pytestmark = pytest.mark.integration

MSGS = 100_000  # written offline into EVENTS (plus PUBLISHED through the server first)
PUBLISHED = 10
SUBJECTS = 20


def run(coro: object) -> object:
    return asyncio.run(asyncio.wait_for(coro, 60))  # type: ignore[arg-type]


def body(seq: int) -> bytes:
    return json.dumps({"seq": seq, "kind": "order", "data": "x" * 120}).encode()


def two_ports() -> tuple[int, int]:
    port = free_port()
    http = free_port()
    while http == port:
        http = free_port()
    return port, http


def args(store: Path, port: int, http: int) -> list[str]:
    return ["-a", "127.0.0.1", "-p", str(port), "-m", str(http), "-js", "-sd", str(store)]


def events_dir(store: Path) -> Path:
    return store / "jetstream" / "$G" / "streams" / "EVENTS" / "msgs"


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("pristine")
    store = base / "store"
    port, http = two_ports()

    async def create() -> None:
        nc = await nats.connect(f"nats://127.0.0.1:{port}")
        js = nc.jetstream()
        await js.add_stream(name="EVENTS", subjects=["events.>"], allow_direct=True)
        await js.add_stream(name="OTHER", subjects=["other.>"])
        for i in range(PUBLISHED):
            await js.publish(f"events.{i % SUBJECTS}", body(i + 1))
            await js.publish("other.x", b"other %d" % i)
        await js.pull_subscribe("events.>", durable="READER", stream="EVENTS")
        await nc.close()

    with ApplianceProcess(args(store, port, http), log_dir=base):
        run(create())
    store_config = FileStoreConfig(str(events_dir(store)), sync_always=False)
    events = FileStreamStore(store_config)
    now = time.time_ns()  # recent: reopening walks back over them (the duplicate window)
    for start in range(PUBLISHED, PUBLISHED + MSGS, 500):
        events.store_batch([(f"events.{i % SUBJECTS}", b"", body(i + 1), now + i) for i in range(start, start + 500)])
    segments = events.segments()
    assert [type(s).__name__ for s in segments] == ["SealedSegment", "SealedSegment", "ActiveSegment"], segments
    events.close()
    return store


class Running:
    def __init__(self, app: ApplianceProcess, port: int, http: int) -> None:
        self.app, self.port, self.http = app, port, http

    def healthz(self) -> tuple[int, dict[str, object]]:
        try:
            answer = urllib.request.urlopen(f"http://127.0.0.1:{self.http}/healthz?details=true", timeout=10)
            return answer.status, json.loads(answer.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    def status_exit(self) -> tuple[int, str]:
        done = subprocess.run([sys.executable, "-m", "appliance", "status", "-p", str(self.port)],
                              capture_output=True, text=True, timeout=30, check=False)
        return done.returncode, done.stdout + done.stderr

    def jsz(self) -> dict[str, object]:
        url = f"http://127.0.0.1:{self.http}/jsz?streams=true"
        return json.loads(urllib.request.urlopen(url, timeout=10).read())  # type: ignore[no-any-return]


def start_on(pristine: Path, tmp_path: Path, damage: Callable[[Path], None]) -> tuple[ApplianceProcess, Running]:
    store = tmp_path / "store"
    shutil.copytree(pristine, store)
    damage(store)
    port, http = two_ports()
    app = ApplianceProcess(args(store, port, http), log_dir=tmp_path)  # started by `with`
    return app, Running(app, port, http)


async def read_all_events(port: int, expect: int) -> tuple[list[int], dict[str, object]]:
    """Every EVENTS message through the durable pull consumer (never stalls), and stream info."""
    nc = await nats.connect(f"nats://127.0.0.1:{port}")
    js = nc.jetstream()
    sub = await js.pull_subscribe("events.>", durable="READER", stream="EVENTS")
    seqs: list[int] = []
    while len(seqs) < expect:
        for msg in await sub.fetch(1000, timeout=10):
            meta = msg.metadata
            assert json.loads(msg.data)["seq"] == meta.sequence.stream, "never wrong bytes"
            seqs.append(meta.sequence.stream)
            await msg.ack()
    info = await nc.request("$JS.API.STREAM.INFO.EVENTS", b"", timeout=10)
    other = await js.get_msg("OTHER", PUBLISHED)
    assert other.data == b"other %d" % (PUBLISHED - 1), "the undamaged stream serves"
    await nc.close()
    return seqs, json.loads(info.data)


async def msg_get(port: int, seq: int) -> dict[str, object]:
    nc = await nats.connect(f"nats://127.0.0.1:{port}")
    answer = await nc.request("$JS.API.STREAM.MSG.GET.EVENTS", json.dumps({"seq": seq}).encode(), timeout=10)
    await nc.close()
    return json.loads(answer.data)  # type: ignore[no-any-return]


async def lost_read(port: int, seq: int) -> tuple[dict[str, object], str, dict[str, object]]:
    """MSG.GET and DIRECT.GET of a lost sequence, and the advisory the first one sends."""
    nc = await nats.connect(f"nats://127.0.0.1:{port}")
    advisories = await nc.subscribe("$JS.EVENT.ADVISORY.STREAM.CORRUPT.EVENTS")
    await nc.flush()
    request = json.dumps({"seq": seq}).encode()
    answer = await nc.request("$JS.API.STREAM.MSG.GET.EVENTS", request, timeout=10)
    direct = await nc.request("$JS.API.DIRECT.GET.EVENTS", request, timeout=10)
    advisory = await advisories.next_msg(timeout=10)
    await nc.close()
    status = (direct.headers or {}).get("Status", "") + " " + (direct.headers or {}).get("Description", "")
    assert not direct.data, "never the bytes of a lost message"
    return json.loads(answer.data), status, json.loads(advisory.data)


TOTAL = PUBLISHED + MSGS
LISTED = limits.STORE_LOST_LISTED_MAX


def segment_files(store: Path) -> list[Path]:
    return sorted(events_dir(store).glob("*.seg"))


def lost_seqs(tmp_path: Path) -> list[int]:
    """What the offline tool finds lost in the damaged copy (it never modifies the directory)."""
    done = subprocess.run([sys.executable, "-m", "appliance", "store", "inspect", str(events_dir(tmp_path / "store"))],
                          capture_output=True, text=True, timeout=60, check=False)
    seqs: list[int] = []
    for line in done.stdout.splitlines():
        if line.strip().startswith("corrupt ") and " seq " in line:
            first, last = line.split(" seq ")[1].split(":")[0].split("..")
            if int(first) > 0:
                seqs.extend(range(int(first), int(last) + 1))
    return sorted(seqs)


def flip(path: Path, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0x40]))


def assert_damaged_but_serving(app: ApplianceProcess, server: Running, lost: list[int]) -> None:
    """The consumer gets every other message, in order, without stalling; the stream, /jsz,
    /healthz, `appliance status` and MSG.GET say what is lost; the log says it once."""
    seqs, info = run(read_all_events(server.port, TOTAL - len(lost)))  # type: ignore[misc]
    assert seqs == sorted(seqs)
    assert sorted(set(range(1, TOTAL + 1)) - set(seqs)) == lost, "every intact record before and after is served"
    state = info["state"]
    assert state["messages"] == TOTAL - len(lost) and state["last_seq"] == TOTAL
    assert state["lost"]["msgs"] == lost[:LISTED] and state["lost"]["bytes"] >= 0
    answer, direct, advisory = run(lost_read(server.port, lost[0]))  # type: ignore[misc]
    assert answer["error"]["code"] == 500 and answer["error"]["err_code"] == 10051  # type: ignore[index]
    assert f"message {lost[0]} is lost" in answer["error"]["description"], answer  # type: ignore[index]
    assert direct.startswith("500 Message Lost"), direct
    assert advisory["type"] == "io.nats.jetstream.advisory.v1.stream_corrupt" and advisory["stream"] == "EVENTS"
    assert advisory["lost"]["msgs"] == lost[:LISTED]
    assert run(msg_get(server.port, lost[-1] + 1))["message"]["seq"] == lost[-1] + 1  # type: ignore[index]
    code, health = server.healthz()
    assert code == 503 and health["status"] == "error", health
    assert health["errors"][0]["type"] == "STREAM" and health["errors"][0]["stream"] == "EVENTS"  # type: ignore[index]
    assert "damaged data" in health["errors"][0]["error"]  # type: ignore[index]
    jsz_state = server.jsz()["account_details"][0]["stream_detail"]  # type: ignore[index]
    assert [s["state"]["lost"]["msgs"] for s in jsz_state if s["name"] == "EVENTS"] == [lost[:LISTED]]
    exit_code, text = server.status_exit()
    assert exit_code == 1 and "unrepaired damage" in text, text
    log = app.log()
    damage_lines = [line.split("[ERR] ")[1] for line in log.splitlines() if "corrupt data not served" in line]
    assert damage_lines and len(damage_lines) == len(set(damage_lines)), "each damaged region logged once"
    assert all(".seg" in line and ("sequences" in line or "no message lost" in line) for line in damage_lines)
    assert log.count("opened with damaged data") == 1
    assert "Traceback" not in log and "exited" not in log, log


def test_a_flipped_byte_mid_active_segment_loses_one_record(pristine: Path, tmp_path: Path) -> None:
    def damage(store: Path) -> None:
        active = segment_files(store)[-1]
        flip(active, os.path.getsize(active) // 2)

    app, server = start_on(pristine, tmp_path, damage)
    with app:
        assert_damaged_but_serving(app, server, lost_seqs(tmp_path))


def test_a_corrupt_sealed_block_loses_that_block_only(pristine: Path, tmp_path: Path) -> None:
    app, server = start_on(pristine, tmp_path, lambda store: flip(segment_files(store)[0], 2000))
    with app:
        lost = lost_seqs(tmp_path)
        assert 1 < len(lost) < 10_000 and lost == list(range(lost[0], lost[-1] + 1))
        assert_damaged_but_serving(app, server, lost)


def test_a_zero_filled_page_mid_active_segment_loses_the_records_on_it(pristine: Path, tmp_path: Path) -> None:
    def damage(store: Path) -> None:
        active = segment_files(store)[-1]
        with open(active, "r+b") as f:
            f.seek(os.path.getsize(active) // 2 // 4096 * 4096)
            f.write(bytes(4096))

    app, server = start_on(pristine, tmp_path, damage)
    with app:
        lost = lost_seqs(tmp_path)
        assert 10 < len(lost) < 40, "a 4 KiB page holds about 24 records of 170 B"
        assert_damaged_but_serving(app, server, lost)


def test_a_truncated_sealed_segment_loses_its_cut_off_tail(pristine: Path, tmp_path: Path) -> None:
    def damage(store: Path) -> None:
        first = segment_files(store)[0]
        os.truncate(first, os.path.getsize(first) // 2)

    app, server = start_on(pristine, tmp_path, damage)
    with app:
        lost = lost_seqs(tmp_path)
        second_first = int(segment_files(tmp_path / "store")[1].name.removesuffix(".seg"))
        assert lost[-1] == second_first - 1 and lost[0] > 1000, "the blocks before the cut are served"
        assert_damaged_but_serving(app, server, lost)


def test_a_missing_segment_in_the_middle_is_a_lost_range(pristine: Path, tmp_path: Path) -> None:
    names = [int(p.name.removesuffix(".seg")) for p in segment_files(pristine)]
    app, server = start_on(pristine, tmp_path, lambda store: segment_files(store)[1].unlink())
    with app:
        lost = lost_seqs(tmp_path)
        assert lost == list(range(names[1], names[2]))
        assert_damaged_but_serving(app, server, lost)


def test_a_damaged_footer_is_rebuilt_and_everything_is_served(pristine: Path, tmp_path: Path) -> None:
    def damage(store: Path) -> None:
        first = segment_files(store)[0]
        flip(first, os.path.getsize(first) - 40)

    app, server = start_on(pristine, tmp_path, damage)
    with app:
        seqs, info = run(read_all_events(server.port, TOTAL))  # type: ignore[misc]
        assert seqs == list(range(1, TOTAL + 1)) and "lost" not in info["state"]
        assert server.healthz() == (200, {"status": "ok"})
        assert server.status_exit()[0] == 0
        assert "rebuilt the damaged footer" in app.log()
    done = subprocess.run([sys.executable, "-m", "appliance", "store", "inspect", "--verify", str(tmp_path / "store")],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def frame_offsets(path: Path) -> list[int]:
    """Where each record of a RAFT log file starts (u32 length, u32 crc, body); zero bytes after
    the last record are space preallocated for appends (a log not closed by its last run)."""
    data = path.read_bytes()
    offsets, offset = [], 0
    while offset < len(data) and data[offset : offset + 8] != bytes(8):
        offsets.append(offset)
        offset += 8 + int.from_bytes(data[offset : offset + 4], "little")
    return offsets


def test_a_damaged_consumer_log_redelivers_and_everything_else_serves(pristine: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    shutil.copytree(pristine, store)
    port, http = two_ports()

    async def ack_some() -> None:
        nc = await nats.connect(f"nats://127.0.0.1:{port}")
        sub = await nc.jetstream().pull_subscribe("events.>", durable="READER", stream="EVENTS")
        for _ in range(6):
            for msg in await sub.fetch(5, timeout=10):
                await msg.ack_sync()
        await nc.close()

    with ApplianceProcess(args(store, port, http), log_dir=tmp_path):
        run(ack_some())
    log = store / "jetstream" / "$G" / "streams" / "EVENTS" / "consumers" / "READER" / "log"
    offsets = frame_offsets(log)
    assert len(offsets) > 8
    flip(log, offsets[len(offsets) // 2] + 12)  # inside a record in the middle of the log

    async def after() -> tuple[int, int]:
        nc = await nats.connect(f"nats://127.0.0.1:{port}")
        js = nc.jetstream()
        sub = await js.pull_subscribe("events.>", durable="READER", stream="EVENTS")
        first = (await sub.fetch(1, timeout=10))[0]
        info = await js.consumer_info("EVENTS", "READER")
        assert (await js.get_msg("OTHER", 1)).data == b"other 0"
        await nc.close()
        return first.metadata.sequence.stream, info.ack_floor.stream_seq

    app = ApplianceProcess(args(store, port, http), log_dir=tmp_path)
    server = Running(app, port, http)
    with app:
        first, floor = run(after())  # type: ignore[misc]
        assert first <= 31 and first == floor + 1, "an older ack state: redelivery, never a skipped message"
        code, health = server.healthz()
        assert code == 503 and health["errors"][0]["consumer"] == "READER", health  # type: ignore[index]
        assert "recovered from a damaged log" in health["errors"][0]["error"]  # type: ignore[index]
        assert server.status_exit()[0] == 1
        assert "Traceback" not in app.log()
    assert log.with_name("log.damaged").exists(), "the damaged log is kept for a post-mortem"


def test_a_damaged_meta_log_keeps_what_it_can_and_reports_the_rest(pristine: Path, tmp_path: Path) -> None:
    def damage(store: Path) -> None:
        meta = store / "jetstream" / "_raft" / "_meta" / "log"
        entries = frame_offsets(meta)
        flip(meta, entries[-4] + 20)  # the entry that defined OTHER (EVENTS is defined before it)

    app, server = start_on(pristine, tmp_path, damage)

    async def check() -> None:
        nc = await nats.connect(f"nats://127.0.0.1:{server.port}")
        js = nc.jetstream()
        info = await js.stream_info("EVENTS")
        assert info.state.messages == TOTAL
        ack = await js.publish("events.new", b"still writable")
        assert ack.seq == TOTAL + 1
        await nc.close()

    with app:
        run(check())
        code, health = server.healthz()
        texts = [e["error"] for e in health["errors"]]  # type: ignore[union-attr]
        assert code == 503 and any("meta log recovered from damage" in t for t in texts), health
        assert any("'$G > OTHER' could not be recovered" in t for t in texts), "its data is kept and reported"
        assert server.status_exit()[0] == 1
        assert "Traceback" not in app.log()
    assert (tmp_path / "store" / "jetstream" / "$G" / "streams" / "OTHER" / "msgs").is_dir(), "never deleted"
