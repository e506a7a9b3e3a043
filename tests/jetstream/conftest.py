"""Shared harness for JetStream tests: an in-process server with JetStream in a temp store dir."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from typing import TypeVar
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext

from appliance.config.options import ServerOptions
from appliance.testing.inproc import InProcessServer
from appliance.testing.natsserver import NatsServer

T = TypeVar("T")

SCENARIO_TIMEOUT_S = 30.0

Scenario = Callable[[Client, JetStreamContext], Awaitable[None]]


@pytest.fixture
def store_dir(tmp_path: Path) -> str:
    return str(tmp_path / "store")


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """(nats-server URL, appliance URL): the real nats-server 2.15.1 and ours side by side, both named S1,
    for differential tests."""
    options = ServerOptions()
    options.server_name = "S1"
    with (
        NatsServer(["-js", "-sd", str(tmp_path / "ns"), "-n", "S1"]) as real,
        InProcessServer(options, jetstream_dir=str(tmp_path / "ours")) as ours,
    ):
        yield real.url, ours.url


@pytest.fixture
def js_server(store_dir: str) -> Iterator[InProcessServer]:
    with InProcessServer(jetstream_dir=store_dir) as server:
        yield server


def run_with(url: str, scenario: Scenario) -> None:
    """Connect nats-py to url and run the scenario (bounded)."""

    async def main() -> None:
        nc = await nats.connect(url, allow_reconnect=False)
        try:
            await scenario(nc, nc.jetstream(timeout=5))
        finally:
            await nc.close()

    asyncio.run(asyncio.wait_for(main(), SCENARIO_TIMEOUT_S))


def observe_with(url: str, scenario: Callable[[Client], Awaitable[T]], timeout_s: float) -> T:
    """Connect nats-py to url, run the scenario and return what it observed (bounded)."""

    async def main() -> T:
        nc = await nats.connect(url, allow_reconnect=False)
        try:
            return await scenario(nc)
        finally:
            await nc.close()

    return asyncio.run(asyncio.wait_for(main(), timeout_s))


async def api(nc: Client, subject: str, body: bytes = b"", *, headers: dict[str, str] | None = None) -> dict:
    """One raw JetStream API request; the decoded JSON response."""
    import json

    msg = await nc.request(subject, body, timeout=5, headers=headers)
    return json.loads(msg.data)
