"""Client certificates reloaded on SIGHUP in a real `appliance run` (two workers): new files in the
same paths take effect for new connections on every worker, and the TLS connections made before
stay up and keep working, as nats-server's reload does."""

from __future__ import annotations

import asyncio
import signal
import ssl
import time
from pathlib import Path

import nats
import pytest

from appliance.testing.certs import TestCerts
from appliance.testing.process import ApplianceProcess, free_port

pytestmark = pytest.mark.integration


async def _connects(url: str, context: ssl.SSLContext) -> bool:
    try:
        nc = await nats.connect(url, tls=context, connect_timeout=3, allow_reconnect=False, max_reconnect_attempts=0)
    except Exception:  # noqa: BLE001 - any failure to connect (verification, closed) is "no"
        return False
    await nc.close()
    return True


def test_new_client_certificate_for_new_connections_old_ones_stay(tmp_path: Path) -> None:
    certs = TestCerts(tmp_path)
    port = free_port()
    config = tmp_path / "server.conf"
    config.write_text(f'host: 127.0.0.1\nport: {port}\nappliance {{ workers: 2, cpu_pinning: false }}\n'
                      f'tls {{ cert_file: "{certs.server.cert}", key_file: "{certs.server.key}" }}\n')
    url = f"tls://127.0.0.1:{port}"
    old_ca = certs.client_context()
    new_ca = ssl.create_default_context(cadata=certs.other_ca.cert_pem.bytes().decode())
    with ApplianceProcess(["-c", str(config)], log_dir=tmp_path) as server:

        async def scenario() -> None:
            before = [await nats.connect(url, tls=old_ca, allow_reconnect=False) for _ in range(4)]  # both workers
            assert not await _connects(url, new_ca)
            certs.issue("server", "127.0.0.1", "localhost", ca=certs.other_ca)  # over the configured files
            server.signal(signal.SIGHUP)
            deadline = time.monotonic() + 30
            while "Reloaded: tls = enabled" not in server.log() and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            assert "Reloaded: tls = enabled" in server.log()
            for _ in range(8):  # new connections, spread over the workers: the new certificate only
                while not await _connects(url, new_ca):
                    assert time.monotonic() < deadline, "the new certificate was never served"
                    await asyncio.sleep(0.05)
            assert not await _connects(url, old_ca)
            for index, nc in enumerate(before):  # the connections made before still work
                assert not nc.is_closed
                sub = await nc.subscribe(f"still.{index}")
                await nc.publish(f"still.{index}", b"ok")
                msg = await sub.next_msg(timeout=5)
                assert msg.data == b"ok"
                await nc.close()

        asyncio.run(scenario())
