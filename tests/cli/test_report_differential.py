"""`server report jetstream` against `appliance run` and the real nats-server 2.15.1, both standalone
S1 from the same configuration (a JetStream account APP and the system account SYS), after the same
streams, messages and consumers: the same text (a standalone server has no meta group section).
Nothing is masked: counts, sizes and API totals must be equal."""

from __future__ import annotations

import asyncio
from pathlib import Path

import nats
import pytest
from click.testing import CliRunner

from appliance.cli.main import main
from appliance.testing.natsserver import NatsServer
from appliance.testing.process import ApplianceProcess, free_port

pytestmark = pytest.mark.integration

CONFIG = """
server_name: S1
listen: 127.0.0.1:{port}
jetstream {{ store_dir: "{store}" }}
accounts {{
  SYS: {{ users: [{{user: sys, password: sys}}] }}
  APP: {{ jetstream: enabled, users: [{{user: app, password: app}}] }}
}}
system_account: SYS
"""


async def fill(url: str) -> None:
    nc = await nats.connect(url, user="app", password="app", allow_reconnect=False)
    try:
        await nc.request("$JS.API.STREAM.CREATE.ORDERS", b'{"name":"ORDERS","subjects":["orders.>"]}', timeout=5)
        await nc.request("$JS.API.STREAM.CREATE.LOGS", b'{"name":"LOGS","subjects":["logs"],"storage":"memory"}',
                         timeout=5)
        for index in range(5):
            await nc.request("orders.new", b"x" * (100 + index), timeout=5)
        for _ in range(1200):  # each acknowledged: no STREAM.INFO polls, which the API Req column counts
            await nc.request("logs", b"y" * 10, timeout=5)
        consumer = b'{"stream_name":"ORDERS","config":{"durable_name":"D","ack_policy":"explicit"}}'
        await nc.request("$JS.API.CONSUMER.CREATE.ORDERS.D", consumer, timeout=5)
        await nc.request("$JS.API.STREAM.INFO.NOPE", b"", timeout=5)  # an API error
    finally:
        await nc.close()


def report(url: str, *args: str) -> str:
    result = CliRunner().invoke(main, ["server", "report", "jetstream", *args, "-s", url, "--user", "sys",
                                       "--password", "sys", "--timeout", "5"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


def reports(url: str) -> tuple[str, str]:
    asyncio.run(asyncio.wait_for(fill(url), 60))
    return report(url, "1"), report(url, "1", "--account", "APP", "--leaders")


def test_report_matches_nats_server(tmp_path: Path) -> None:
    real_conf = tmp_path / "real.conf"
    real_conf.write_text(CONFIG.format(port=free_port(), store=tmp_path / "ns"))
    with NatsServer(["-c", str(real_conf)]) as real:  # (its -p overrides `listen`)
        expected = reports(real.url)
    port = free_port()
    ours_conf = tmp_path / "ours.conf"
    ours_conf.write_text(CONFIG.format(port=port, store=tmp_path / "ours"))
    with ApplianceProcess(["-c", str(ours_conf)], log_dir=tmp_path):
        got = reports(f"nats://127.0.0.1:{port}")
    assert "JetStream Summary" in expected[0] and "RAFT" not in expected[0]
    assert got == expected
