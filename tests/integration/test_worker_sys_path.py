"""Workers never import code from the directory `appliance run` was started in.

`python -m appliance.worker` puts the current directory first on sys.path: a file there named like a
module the worker imports (http.py, asyncio.py, json.py, an appliance/ package) replaced the real one,
so every worker failed at start, and whoever can write to that directory had code run in the server.
Each planted module here leaves a marker file when imported and then fails.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import nats
import pytest

from appliance.testing.clients import flush_after_subs
from appliance.testing.process import ApplianceProcess, free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

PLANTED_MODULES = ("http", "asyncio", "json", "socket", "selectors", "logging", "uvloop", "nats", "numpy")


def plant(directory: Path) -> None:
    for name in PLANTED_MODULES:
        (directory / f"{name}.py").write_text(
            f"open({str(directory / ('IMPORTED-' + name))!r}, 'w').close()\n"
            f"raise ImportError('planted {name}.py from the working directory was imported')\n")
    package = directory / "appliance"
    package.mkdir()
    (package / "__init__.py").write_text(
        f"open({str(directory / 'IMPORTED-appliance')!r}, 'w').close()\n"
        "raise ImportError('planted appliance/ from the working directory was imported')\n")


async def connect_on(url: str, worker: int, workers: int) -> nats.NATS:
    for _ in range(200):
        nc = await nats.connect(url)
        assert nc._client_id is not None
        if (int(nc._client_id) - 1) % workers == worker:
            return nc
        await nc.close()
    raise AssertionError(f"no connection landed on worker {worker}")


def test_workers_started_from_a_directory_of_planted_modules_serve(tmp_path: Path) -> None:
    hostile = tmp_path / "cwd"
    hostile.mkdir()
    plant(hostile)
    port, http = free_port(), free_port()
    config = tmp_path / "two.conf"
    config.write_text(f"listen: 127.0.0.1:{port}\nhttp: 127.0.0.1:{http}\nappliance {{ workers: 2 }}\n")
    with ApplianceProcess(["-c", str(config)], log_dir=tmp_path, cwd=hostile) as server:
        url = f"nats://127.0.0.1:{port}"

        async def scenario() -> None:
            on_zero = await connect_on(url, 0, 2)
            on_one = await connect_on(url, 1, 2)
            sub = await on_zero.subscribe("across")
            await flush_after_subs(on_zero)
            await on_one.publish("across", b"served")
            assert (await sub.next_msg(timeout=10)).data == b"served"
            for nc in (on_zero, on_one):
                await nc.close()

        asyncio.run(asyncio.wait_for(scenario(), 60))
        server.signal(signal.SIGTERM)
        assert server.wait() == 0, server.log()
    assert sorted(name for name in os.listdir(hostile) if name.startswith("IMPORTED-")) == []
    assert "planted" not in server.log()
