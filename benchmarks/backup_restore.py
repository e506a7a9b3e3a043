"""Backup and restore of a large stream against a real `appliance run` (a benchmark, not a test).

    .venv/bin/python benchmarks/backup_restore.py [--mb 100] [--size 1024]

Fills a file stream with --mb MiB of random --size byte messages on 16 subjects, gives two
durable consumers some state (one with acks and pending acks, one filtered), takes a backup with
the CLI's code (`appliance stream backup`), deletes the stream and restores it (`appliance
stream restore`), timing each. Then it checks that every message came back (count, first/last
sequence, and a SHA-256 over every subject and payload in sequence order, read back with a pull
consumer) and that both consumers came back with the same delivered/ack floor/pending numbers.
Prints one JSON line with the numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import nats  # noqa: E402
from nats.aio.client import Client  # noqa: E402

from appliance.cli.stream_backup import backup_stream, restore_stream  # noqa: E402
from appliance.testing.process import ApplianceProcess, free_port  # noqa: E402

SUBJECTS = 16


async def api(nc: Client, subject: str, body: dict | None = None) -> dict:
    reply = await nc.request(subject, json.dumps(body).encode() if body else b"", timeout=30)
    return json.loads(reply.data)


async def fill(nc: Client, count: int, size: int) -> str:
    await api(nc, "$JS.API.STREAM.CREATE.BIG", {"name": "BIG", "subjects": ["big.>"], "storage": "file"})
    rng = random.Random(1)
    digest = hashlib.sha256()
    for i in range(count):
        subject = f"big.{i % SUBJECTS}"
        payload = rng.randbytes(size)
        digest.update(subject.encode() + payload)
        await nc.publish(subject, payload)
        if i % 2000 == 1999:
            await nc.flush()
    await nc.flush()
    deadline = time.monotonic() + 120
    while (await api(nc, "$JS.API.STREAM.INFO.BIG"))["state"]["messages"] < count:
        if time.monotonic() > deadline:
            raise SystemExit("the stream did not take every message")
        await asyncio.sleep(0.1)
    return digest.hexdigest()


async def consumer_states(nc: Client) -> dict[str, dict]:
    out = {}
    for name in ("ALL", "PART"):
        info = await api(nc, f"$JS.API.CONSUMER.INFO.BIG.{name}")
        out[name] = {
            "delivered": info["delivered"]["stream_seq"],
            "ack_floor": info["ack_floor"]["stream_seq"],
            "num_ack_pending": info["num_ack_pending"],
            "num_pending": info["num_pending"],
            "filter": info["config"].get("filter_subject", ""),
        }
    return out


async def make_consumers(nc: Client) -> None:
    js = nc.jetstream(timeout=30)
    await js.add_consumer("BIG", durable_name="ALL", ack_policy="explicit")
    await js.add_consumer("BIG", durable_name="PART", ack_policy="explicit", filter_subject="big.3")
    for name, subject in (("ALL", "big.>"), ("PART", "big.3")):
        sub = await js.pull_subscribe(subject, durable=name, stream="BIG")
        msgs = await sub.fetch(500, timeout=10)
        for msg in msgs[: len(msgs) // 2]:  # the rest stay pending
            await msg.ack()
        await nc.flush()


async def read_back(nc: Client, count: int) -> str:
    js = nc.jetstream(timeout=30)
    await js.add_consumer("BIG", durable_name="VERIFY", ack_policy="none")
    sub = await js.pull_subscribe("big.>", durable="VERIFY", stream="BIG")
    digest = hashlib.sha256()
    seen = 0
    while seen < count:
        for msg in await sub.fetch(1000, timeout=10):
            digest.update(msg.subject.encode() + msg.data)
            seen += 1
    await api(nc, "$JS.API.CONSUMER.DELETE.BIG.VERIFY")
    return digest.hexdigest()


async def run(url: str, mb: int, size: int, backup_dir: str) -> dict[str, object]:
    nc = await nats.connect(url, pending_size=64 * 1024 * 1024)
    count = mb * 1024 * 1024 // size
    started = time.monotonic()
    digest = await fill(nc, count, size)
    fill_s = time.monotonic() - started
    await make_consumers(nc)
    info_before = (await api(nc, "$JS.API.STREAM.INFO.BIG"))["state"]
    consumers_before = await consumer_states(nc)

    started = time.monotonic()
    backup = await backup_stream(nc, "BIG", backup_dir, timeout_s=30)
    backup_s = time.monotonic() - started
    await api(nc, "$JS.API.STREAM.DELETE.BIG")

    started = time.monotonic()
    await restore_stream(nc, backup_dir, timeout_s=30)
    restore_s = time.monotonic() - started

    info_after = (await api(nc, "$JS.API.STREAM.INFO.BIG"))["state"]
    consumers_after = await consumer_states(nc)
    digest_after = await read_back(nc, count)
    await nc.close()
    same_state = all(info_before[k] == info_after[k] for k in ("messages", "bytes", "first_seq", "last_seq"))
    return {
        "messages": count,
        "message_bytes": size,
        "stream_bytes": info_before["bytes"],
        "backup_file_bytes": backup.bytes_received,
        "fill_s": round(fill_s, 2),
        "backup_s": round(backup_s, 2),
        "restore_s": round(restore_s, 2),
        "restore_mb_per_s": round(info_before["bytes"] / restore_s / 1e6, 1),
        "every_message_back": same_state and digest_after == digest,
        "consumers_back": consumers_after == consumers_before,
        "consumers": consumers_after,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=100)
    parser.add_argument("--size", type=int, default=1024)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        run_args = ["-a", "127.0.0.1", "-p", str(port), "-js", "-sd", f"{tmp}/store"]
        with ApplianceProcess(run_args, log_dir=Path(tmp)) as server:
            result = asyncio.run(run(f"nats://127.0.0.1:{server.client_port}", args.mb, args.size, f"{tmp}/backup"))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
