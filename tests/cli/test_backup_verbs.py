"""`appliance stream backup` / `restore` against a real `appliance run` with two workers (the
CLI's connection may land on a worker other than the one running JetStream), and the same
verbs against nats-server 2.15.1."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import nats
from click.testing import CliRunner

from appliance.cli.main import main
from appliance.testing.natsserver import NatsServer
from appliance.testing.process import ApplianceProcess, free_port


async def _fill(url: str) -> dict:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream(timeout=10)
        await js.add_stream(name="EVENTS", subjects=["events.>"])
        for i in range(2000):
            await nc.publish(f"events.{i % 4}", b"event %d" % i * 50)
        await nc.flush()
        for _ in range(200):
            if (await js.stream_info("EVENTS")).state.messages == 2000:
                break
            await asyncio.sleep(0.05)
        await js.add_consumer("EVENTS", durable_name="C", ack_policy="explicit")
        sub = await js.pull_subscribe("events.>", durable="C", stream="EVENTS")
        for msg in (await sub.fetch(10))[:4]:
            await msg.ack()
        return await _state(nc)
    finally:
        await nc.close()


async def _state(nc) -> dict:  # type: ignore[no-untyped-def]
    js = nc.jetstream(timeout=10)
    info = await js.stream_info("EVENTS")
    consumer = await js.consumer_info("EVENTS", "C")
    return {
        "messages": info.state.messages,
        "last_seq": info.state.last_seq,
        "delivered": consumer.delivered.stream_seq,
        "ack_floor": consumer.ack_floor.stream_seq,
        "ack_pending": consumer.num_ack_pending,
    }


async def _read(url: str) -> dict:
    nc = await nats.connect(url)
    try:
        return await _state(nc)
    finally:
        await nc.close()


def _verbs(url: str, directory: Path) -> tuple[dict, dict, str, str]:
    before = asyncio.run(_fill(url))
    runner = CliRunner()
    backup = runner.invoke(main, ["stream", "backup", "EVENTS", str(directory), "-s", url], catch_exceptions=False)
    assert backup.exit_code == 0, backup.output
    assert sorted(p.name for p in directory.iterdir()) == ["backup.json", "stream.tar.s2"]
    removed = runner.invoke(main, ["stream", "rm", "EVENTS", "-f", "-s", url], catch_exceptions=False)
    assert removed.exit_code == 0, removed.output
    restore = runner.invoke(main, ["stream", "restore", str(directory), "-s", url], catch_exceptions=False)
    assert restore.exit_code == 0, restore.output
    again = runner.invoke(main, ["stream", "restore", str(directory), "-s", url], catch_exceptions=False)
    assert again.exit_code == 1 and 'Stream "EVENTS" already exist' in again.output
    return before, asyncio.run(_read(url)), backup.output, restore.output


def test_backup_and_restore_verbs_on_appliance_run(tmp_path: Path) -> None:
    port = free_port()
    config = tmp_path / "server.conf"
    config.write_text(f"listen: 127.0.0.1:{port}\nappliance {{ workers: 2 }}\n")
    with ApplianceProcess(["-c", str(config), "-js", "-sd", str(tmp_path / "store")], log_dir=tmp_path):
        before, after, backup_out, restore_out = _verbs(f"nats://127.0.0.1:{port}", tmp_path / "backup")
    assert after == before and before["ack_pending"] == 6
    assert backup_out.startswith('Starting backup of Stream "EVENTS" with ')
    assert 'chunks for stream "EVENTS" in' in backup_out
    assert 'Starting restore of Stream "EVENTS" from file' in restore_out
    assert 'Restored stream "EVENTS" in' in restore_out and "Messages: 2,000" in restore_out


def test_backup_and_restore_verbs_on_nats_server(tmp_path: Path) -> None:
    with NatsServer(["-js", "-sd", str(tmp_path / "ns")]) as server:
        before, after, _, _ = _verbs(server.url, tmp_path / "backup")
    assert after == before
    meta = json.loads((tmp_path / "backup" / "backup.json").read_text())
    assert set(meta) == {"config", "state"}
