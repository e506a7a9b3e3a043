"""Hostile JSON to the JetStream API of a real `appliance run` (two workers: requests on worker
1 cross the ring to worker 0): deeply nested bodies get nats-server's answer every time, and the
server keeps serving everyone."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import nats
import pytest

from appliance.testing.process import ApplianceProcess, free_port

pytestmark = pytest.mark.integration

DEEP = b'{"name":"X","subjects":' + b"[" * 10_000 + b"]" * 10_000 + b"}"
EXPECTED = {
    "type": "io.nats.jetstream.api.v1.stream_create_response",
    "error": {"code": 400, "err_code": 10025, "description": "invalid JSON: exceeded max depth at offset 10023"},
}


def test_deeply_nested_stream_create_is_answered_and_the_server_stays_up(tmp_path: Path) -> None:
    port = free_port()
    config = tmp_path / "s.conf"
    config.write_text(
        f'listen: 127.0.0.1:{port}\njetstream {{ store_dir: "{tmp_path / "store"}" }}\n'
        "appliance { workers: 2 }\n"
    )

    async def scenario() -> None:
        clients = [await nats.connect(f"nats://127.0.0.1:{port}", allow_reconnect=False) for _ in range(4)]
        try:
            for _ in range(3):
                for nc in clients:  # spread over both workers
                    answer = json.loads((await nc.request("$JS.API.STREAM.CREATE.X", DEEP, timeout=10)).data)
                    assert answer == EXPECTED
            fresh = await nats.connect(f"nats://127.0.0.1:{port}", allow_reconnect=False)
            try:
                await fresh.flush(timeout=5)  # a new client's first PING is answered
                info = json.loads((await fresh.request("$JS.API.INFO", b"", timeout=5)).data)
                assert info["streams"] == 0 and info["api"]["errors"] == 12
                made = await fresh.request("$JS.API.STREAM.CREATE.Y", b'{"name":"Y","subjects":["y"]}', timeout=5)
                assert "error" not in json.loads(made.data)
                assert json.loads((await fresh.request("y", b"1", timeout=5)).data)["seq"] == 1
            finally:
                await fresh.close()
        finally:
            for nc in clients:
                await nc.close()

    with ApplianceProcess(["-c", str(config)], log_dir=tmp_path) as app:
        asyncio.run(asyncio.wait_for(scenario(), 90))
        assert "RecursionError" not in app.log() and "Traceback" not in app.log()
