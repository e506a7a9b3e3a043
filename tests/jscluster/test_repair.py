"""Corruption on a minority is repaired (issue 15 §6): a follower of an R3 stream whose segment
file got a flipped byte while it was down reports the damaged record, serves it to nobody, fetches
it from a peer that holds it intact and writes it back at its own sequence, until its replica is
again identical to the others; the damage and the repair are logged."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import nats
import pytest

from appliance.store import applied, records, segment
from appliance.store.filestore import FileStoreConfig, FileStreamStore
from tests.jscluster.conftest import META_TIMEOUT_S, meta_leader
from tests.routes.conftest import Node, wait_until

pytestmark = pytest.mark.timeout(240)

N = 60
DAMAGED_SEQ = 23


def stream_state(node: Node, name: str) -> dict[str, object] | None:
    """The stream's state as this server's replica holds it (/jsz), None if it lists none."""
    try:
        jsz = node.monitor("/jsz?streams=true")
    except OSError:
        return None
    for account in jsz.get("account_details") or []:  # type: ignore[union-attr]
        for stream in account.get("stream_detail") or []:
            if stream["name"] == name:
                return stream["state"]  # type: ignore[no-any-return]
    return None


def segment_files(store_root: Path, name: str) -> list[Path]:
    return sorted(store_root.glob(f"jetstream/*/streams/{name}/msgs/*.seg"))


def flip_inside_record(path: Path, seq: int) -> None:
    """Flip one byte in the middle of message `seq`'s record (an active, uncompressed segment)."""
    data = bytearray(path.read_bytes())
    frames, _ = records.scan_frames(bytes(data), segment.HEADER_BYTES)
    (span,) = [(f[0], f[1]) for f in frames if f[2] == records.Kind.MSG and f[3] == seq]
    at = (span[0] + span[1]) // 2
    data[at] ^= 0x40
    path.write_bytes(bytes(data))


def stored(store_root: Path, name: str) -> list[tuple[int, str, bytes, bytes, int]]:
    """Every message of a stopped server's replica, read from its files."""
    (directory,) = {p.parent for p in segment_files(store_root, name)}
    store = FileStreamStore(FileStoreConfig(str(directory)))
    try:
        assert not store.lost().damaged, store.lost()
        return [tuple(m) for m in store.scan()]  # type: ignore[misc]
    finally:
        store.close()


def test_a_follower_with_a_damaged_record_repairs_it_from_a_peer(js_cluster: list[Node], tmp_path: Path) -> None:
    async def create() -> str:
        nc = await nats.connect(js_cluster[0].url)
        config = {"name": "REP", "subjects": ["rep.>"], "storage": "file", "num_replicas": 3}
        answer = json.loads((await nc.request("$JS.API.STREAM.CREATE.REP", json.dumps(config).encode(), timeout=10)).data)
        assert "error" not in answer, answer
        js = nc.jetstream()
        for i in range(N):
            await js.publish(f"rep.{i % 4}", b"message %d " % i + b"z" * i, headers={"Nats-Msg-Id": f"id-{i}"},
                             timeout=5)
        info = json.loads((await nc.request("$JS.API.STREAM.INFO.REP", b"", timeout=5)).data)
        await nc.close()
        return str(info["cluster"]["leader"])

    leader = asyncio.run(create())
    wait_until(lambda: all((stream_state(n, "REP") or {}).get("last_seq") == N for n in js_cluster),
               "every replica holding the messages", 30)
    victim_index = next(k for k, n in enumerate(js_cluster) if n.name != leader)
    victim = js_cluster[victim_index]
    store_root = tmp_path / f"store-n{victim_index + 1}"
    victim.stop()
    (active,) = [p for p in segment_files(store_root, "REP")]
    flip_inside_record(active, DAMAGED_SEQ)

    victim.start()
    wait_until(lambda: meta_leader(js_cluster), "a meta leader after the restart", META_TIMEOUT_S)
    wait_until(lambda: "corrupt data not served" in victim.log(), "the damage reported in the log", 30)

    def repaired() -> bool:
        state = stream_state(victim, "REP")
        return state is not None and state.get("messages") == N and "lost" not in state

    wait_until(repaired, "the damaged replica holding all messages again", 60)
    log = victim.log()
    assert f"sequences {DAMAGED_SEQ}..{DAMAGED_SEQ}" in log and "repaired sequences" in log, log[-3000:]
    assert stream_state(victim, "REP") == stream_state(js_cluster[(victim_index + 1) % 3], "REP")

    for node in js_cluster:
        node.stop()
    copies = [stored(tmp_path / f"store-n{k + 1}", "REP") for k in range(3)]
    assert len(copies[victim_index]) == N
    assert copies[0] == copies[1] == copies[2]
    assert copies[victim_index][DAMAGED_SEQ - 1][0] == DAMAGED_SEQ


@pytest.mark.parametrize("wiped", ["stream", "raft", "server"])
def test_a_follower_whose_store_is_wiped_rebuilds_from_its_peers(js_cluster: list[Node], tmp_path: Path, wiped: str) -> None:
    """`stream`: the stream's message files (and its applied journal) gone while the server was
    down: it re-applies its RAFT log (or, compacted, catches up from the leader's snapshot).
    `raft`: the stream group's RAFT log gone: the store's ledger says it was held, so the replica
    abstains from elections until the leader has sent it again (raft/core.py abstain).
    `server`: its whole store directory gone (RAFT logs, meta state, ledger): a peer remembers it
    with another store (route INFO), so it abstains in the meta group and in every group it
    learns back, until their leaders find its logs shorter than they knew them (raft/core.py)
    and send them again."""

    async def create() -> str:
        nc = await nats.connect(js_cluster[0].url)
        config = {"name": "WIPE", "subjects": ["wipe.>"], "storage": "file", "num_replicas": 3}
        answer = json.loads((await nc.request("$JS.API.STREAM.CREATE.WIPE", json.dumps(config).encode(),
                                              timeout=10)).data)
        assert "error" not in answer, answer
        js = nc.jetstream()
        for i in range(N):
            await js.publish(f"wipe.{i % 4}", b"message %d" % i, timeout=5)
        info = json.loads((await nc.request("$JS.API.STREAM.INFO.WIPE", b"", timeout=5)).data)
        await nc.close()
        return str(info["cluster"]["leader"])

    leader = asyncio.run(create())
    wait_until(lambda: all((stream_state(n, "WIPE") or {}).get("last_seq") == N for n in js_cluster),
               "every replica holding the messages", 30)
    victim_index = next(k for k, n in enumerate(js_cluster) if n.name != leader)
    victim = js_cluster[victim_index]
    store_root = tmp_path / f"store-n{victim_index + 1}"
    victim.stop()
    if wiped == "stream":
        (directory,) = {p.parent for p in segment_files(store_root, "WIPE")}
        shutil.rmtree(directory)
    elif wiped == "raft":
        (directory,) = store_root.glob("jetstream/_raft/S-*")
        shutil.rmtree(directory)
    else:
        shutil.rmtree(store_root)
    victim.start()
    wait_until(lambda: meta_leader(js_cluster), "a meta leader after the restart", META_TIMEOUT_S)

    def rebuilt() -> bool:
        state = stream_state(victim, "WIPE")
        return state is not None and state.get("messages") == N and state.get("last_seq") == N

    wait_until(rebuilt, "the wiped replica holding every message again", 90)
    if wiped != "stream":  # its votes stood for what it lost: it abstained until caught up
        if wiped == "server":
            wait_until(lambda: "its peers knew it with another store" in victim.log(), "the store's loss logged", 30)
        wait_until(lambda: "stream '$G > WIPE': this replica lost its RAFT state" in victim.log(),
                   "the loss logged", 30)
        wait_until(lambda: "stream '$G > WIPE': replica caught up after losing its state" in victim.log(),
                   "the replica voting again", 30)
    for node in js_cluster:
        node.stop()
    copies = [stored(tmp_path / f"store-n{k + 1}", "WIPE") for k in range(3)]
    assert len(copies[victim_index]) == N
    assert copies[0] == copies[1] == copies[2]


def healthz(node: Node) -> tuple[int, dict[str, object]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{node.http_port}/healthz?details=true", timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())
    except OSError:
        return 0, {}


def status_exit(node: Node) -> tuple[int, str]:
    done = subprocess.run([sys.executable, "-m", "appliance", "status", "-p", str(node.client_port)],
                          capture_output=True, text=True, timeout=30, check=False)
    return done.returncode, done.stdout + done.stderr


def test_damage_is_reported_until_a_peer_repairs_it(js_cluster: list[Node], tmp_path: Path) -> None:
    """With no peer up to repair from, the damaged replica says so in /jsz (state.lost) and
    `appliance status` (unrepaired damage; /healthz is 503); once its peers are back it
    repairs and every one of them clears."""

    async def create() -> None:
        nc = await nats.connect(js_cluster[0].url)
        config = {"name": "REPORT", "subjects": ["report.>"], "storage": "file", "num_replicas": 3}
        answer = json.loads((await nc.request("$JS.API.STREAM.CREATE.REPORT", json.dumps(config).encode(),
                                              timeout=10)).data)
        assert "error" not in answer, answer
        js = nc.jetstream()
        for i in range(N):
            await js.publish("report.x", b"message %d" % i, timeout=5)
        await nc.close()

    asyncio.run(create())
    wait_until(lambda: all((stream_state(n, "REPORT") or {}).get("last_seq") == N for n in js_cluster),
               "every replica holding the messages", 30)
    for node in js_cluster:
        node.stop()
    victim = js_cluster[2]
    (active,) = segment_files(tmp_path / "store-n3", "REPORT")
    flip_inside_record(active, DAMAGED_SEQ)
    victim.start()

    def reported() -> bool:
        state = stream_state(victim, "REPORT") or {}
        lost = state.get("lost")
        return isinstance(lost, dict) and lost.get("msgs") == [DAMAGED_SEQ]

    wait_until(reported, "the damaged replica listing the lost message in /jsz", META_TIMEOUT_S)
    assert healthz(victim)[0] == 503  # alone it also lacks a meta leader, which /healthz reports first
    exit_code, text = status_exit(victim)
    assert exit_code != 0 and "unrepaired damage" in text, text  # 2: also down (no quorum alone)

    for node in js_cluster[:2]:
        node.start()
    wait_until(lambda: meta_leader(js_cluster), "a meta leader after the restart", META_TIMEOUT_S)

    def repaired() -> bool:
        state = stream_state(victim, "REPORT") or {}
        return state.get("messages") == N and "lost" not in state

    wait_until(repaired, "the damaged replica repaired", 60)
    wait_until(lambda: healthz(victim)[0] == 200, "/healthz ok again", 30)
    wait_until(lambda: "unrepaired damage" not in status_exit(victim)[1], "`appliance status` without the damage", 30)


def test_a_follower_whose_store_cannot_be_opened_sets_it_aside_and_rebuilds(js_cluster: list[Node], tmp_path: Path) -> None:
    """The stream's applied journal names only a position its store cannot be cut back to (a
    segment that is not there), which stops a lone replica from opening (BrokenError): the
    replica keeps the files as msgs.damaged, starts empty and rebuilds from its log and peers."""

    async def create() -> str:
        nc = await nats.connect(js_cluster[0].url)
        config = {"name": "ASIDE", "subjects": ["aside.>"], "storage": "file", "num_replicas": 3}
        answer = json.loads((await nc.request("$JS.API.STREAM.CREATE.ASIDE", json.dumps(config).encode(),
                                              timeout=10)).data)
        assert "error" not in answer, answer
        js = nc.jetstream()
        for i in range(N):
            await js.publish("aside.x", b"message %d" % i, timeout=5)
        info = json.loads((await nc.request("$JS.API.STREAM.INFO.ASIDE", b"", timeout=5)).data)
        await nc.close()
        return str(info["cluster"]["leader"])

    leader = asyncio.run(create())
    wait_until(lambda: all((stream_state(n, "ASIDE") or {}).get("last_seq") == N for n in js_cluster),
               "every replica holding the messages", 30)
    victim_index = next(k for k, n in enumerate(js_cluster) if n.name != leader)
    victim = js_cluster[victim_index]
    store_root = tmp_path / f"store-n{victim_index + 1}"
    victim.stop()
    (active,) = segment_files(store_root, "ASIDE")
    journal = active.parent / applied.JOURNAL_NAME
    journal.write_bytes(applied.encode(applied.AppliedRecord(index=N, last_seq=N, segment_first=10 * N,
                                                             segment_bytes=segment.HEADER_BYTES)))
    victim.start()
    wait_until(lambda: meta_leader(js_cluster), "a meta leader after the restart", META_TIMEOUT_S)

    def rebuilt() -> bool:
        state = stream_state(victim, "ASIDE")
        return state is not None and state.get("messages") == N and state.get("last_seq") == N

    wait_until(rebuilt, "the replica rebuilt", 90)
    assert "replica store unusable" in victim.log()
    assert (active.parent.parent / "msgs.damaged").is_dir()
    for node in js_cluster:
        node.stop()
    copies = [stored(tmp_path / f"store-n{k + 1}", "ASIDE") for k in range(3)]
    assert copies[0] == copies[1] == copies[2] and len(copies[0]) == N
