"""Republish in the real server process with two workers: a KV bucket with republish (nats-py), core
subscribers on both workers watching the copies, and the republish surviving a restart (the copies go
on with the right Nats-Last-Sequence)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from nats.js.api import KeyValueConfig, RePublish

from appliance.testing.clients import flush_after_subs
from appliance.testing.process import ApplianceProcess, free_port

from .test_workers import connect_on

pytestmark = pytest.mark.integration


def _start(tmp_path: Path, port: int) -> ApplianceProcess:
    config = tmp_path / "two.conf"
    config.write_text(
        f"listen: 127.0.0.1:{port}\njetstream {{ store_dir: {tmp_path / 'store'} }}\nappliance {{ workers: 2 }}\n"
    )
    return ApplianceProcess(["-c", str(config)], log_dir=tmp_path)


async def _watch_puts(url: str, puts: list[tuple[str, bytes]], *, create: bool) -> list[list[tuple[str, str, str, bytes]]]:
    on_zero = await connect_on(url, 0, 2)
    on_one = await connect_on(url, 1, 2)
    try:
        subs = [await nc.subscribe("watch.>") for nc in (on_zero, on_one)]
        for nc in (on_zero, on_one):
            await flush_after_subs(nc)
        js = on_one.jetstream(timeout=5)
        if create:
            kv = await js.create_key_value(KeyValueConfig(bucket="cfg", republish=RePublish(src=">", dest="watch.>")))
        else:
            kv = await js.key_value("cfg")
        for key, value in puts:
            await kv.put(key, value)
        seen = []
        for sub in subs:
            got = [await sub.next_msg(timeout=10) for _ in puts]
            seen.append([
                (m.subject, (m.headers or {})["Nats-Sequence"], (m.headers or {})["Nats-Last-Sequence"], m.data)
                for m in got
            ])
        return seen
    finally:
        await on_zero.close()
        await on_one.close()


def test_kv_republish_reaches_watchers_on_both_workers_and_survives_a_restart(tmp_path: Path) -> None:
    port = free_port()
    url = f"nats://127.0.0.1:{port}"
    with _start(tmp_path, port):
        first = asyncio.run(asyncio.wait_for(_watch_puts(url, [("a", b"1"), ("b", b"2"), ("a", b"3")], create=True), 60))
    expected = [
        ("watch.$KV.cfg.a", "1", "0", b"1"),
        ("watch.$KV.cfg.b", "2", "0", b"2"),
        ("watch.$KV.cfg.a", "3", "1", b"3"),
    ]
    assert first == [expected, expected]
    with _start(tmp_path, port):
        second = asyncio.run(asyncio.wait_for(_watch_puts(url, [("a", b"4"), ("c", b"5")], create=False), 60))
    after = [("watch.$KV.cfg.a", "4", "3", b"4"), ("watch.$KV.cfg.c", "5", "0", b"5")]
    assert second == [after, after]
