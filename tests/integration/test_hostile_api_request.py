"""The issue's reproduction under `appliance run`: a JetStream API request nested 10,000 levels deep,
sent from a client on worker 1 (it crosses the link to worker 0, which serves JetStream). Whatever the
API answers to it, the server stays whole: `$JS.API.INFO` answers, new clients get their first PONG,
messages cross workers, and no worker was restarted."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from pathlib import Path

import nats
import pytest

from appliance.testing.clients import flush_after_subs
from appliance.testing.process import ApplianceProcess, free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
NESTED = b'{"name":"X","subjects":' + b"[" * 10_000 + b"]" * 10_000 + b"}"


def status(port: int) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-m", "appliance", "status", "--port", str(port), "--json"],
                          capture_output=True, text=True, timeout=60)
    return json.loads(done.stdout) if done.stdout.strip() else {}


async def connect_on(url: str, worker: int) -> nats.NATS:
    for _ in range(200):
        nc = await nats.connect(url, allow_reconnect=False)
        if (int(nc._client_id or 0) - 1) % 2 == worker:
            return nc
        await nc.close()
    raise AssertionError(f"no connection landed on worker {worker}")


def test_deeply_nested_stream_create_leaves_the_server_whole(tmp_path: Path) -> None:
    port = free_port()
    config = tmp_path / "js.conf"
    config.write_text(f"listen: 127.0.0.1:{port}\nappliance {{ workers: 2 }}\n"
                      f"jetstream {{ store_dir: {json.dumps(str(tmp_path / 'js'))} }}\n")
    with ApplianceProcess(["-c", str(config)], log_dir=tmp_path) as server:
        url = f"nats://127.0.0.1:{port}"
        before = [worker["pid"] for worker in status(port)["workers"]]  # type: ignore[union-attr]

        async def scenario() -> None:
            on_one = await connect_on(url, 1)
            on_zero = await connect_on(url, 0)
            for client in (on_one, on_zero):
                for _ in range(3):
                    await client.publish("$JS.API.STREAM.CREATE.X", NESTED, reply=client.new_inbox())
                await client.flush(timeout=10)
                info = json.loads((await client.request("$JS.API.INFO", b"", timeout=10)).data)
                assert info["type"] == "io.nats.jetstream.api.v1.account_info_response", info
            fresh = await nats.connect(url, allow_reconnect=False)
            await fresh.flush(timeout=10)  # the first PING of a new client
            sub = await on_zero.subscribe("across")
            await flush_after_subs(on_zero)
            await on_one.publish("across", b"m")
            assert (await sub.next_msg(timeout=10)).data == b"m"
            for client in (on_one, on_zero, fresh):
                await client.close()

        asyncio.run(asyncio.wait_for(scenario(), 90))
        after = status(port)
        assert after["health"] == "ok", after
        assert [worker["pid"] for worker in after["workers"]] == before  # type: ignore[union-attr]
        server.signal(signal.SIGTERM)
        assert server.wait() == 0
