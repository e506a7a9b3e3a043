"""An account without JetStream on a JetStream server: every API request answered as nats-server 2.15.1
answers it (10039 and the fields its response type always carries: `total`, `streams`, `purged`, ...),
the same bytes, or nothing where it says nothing."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from appliance.config import options_from_text
from appliance.testing.inproc import InProcessServer
from appliance.testing.natsserver import NatsServer

ACCOUNTS = ("accounts { A: { users: [ {user: a, password: pa} ], jetstream: enabled },\n"
            "  B: { users: [ {user: b, password: pb} ] } }\n")
REQUESTS = ["INFO", "STREAM.CREATE.S", "STREAM.UPDATE.S", "STREAM.INFO.S", "STREAM.NAMES", "STREAM.LIST",
            "STREAM.PURGE.S", "STREAM.DELETE.S", "STREAM.MSG.GET.S", "STREAM.MSG.DELETE.S", "STREAM.SNAPSHOT.S",
            "CONSUMER.CREATE.S", "CONSUMER.INFO.S.C", "CONSUMER.NAMES.S", "CONSUMER.LIST.S", "CONSUMER.DELETE.S.C",
            "DIRECT.GET.S"]


async def answers(port: int) -> dict[str, bytes]:
    """Each request's answer payload (b"" when none comes) on one raw connection as user b."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    await reader.readline()
    connect = {"user": "b", "pass": "pb", "verbose": False, "pedantic": False}
    writer.write(f"CONNECT {json.dumps(connect)}\r\nSUB _INBOX.x 1\r\n".encode())
    seen: dict[str, bytes] = {}
    for request in REQUESTS:
        writer.write(f"PUB $JS.API.{request} _INBOX.x 0\r\n\r\nPING\r\n".encode())
        payload = b""
        while True:  # the answer (if any) comes before the PONG: the API answers at once here
            line = await asyncio.wait_for(reader.readline(), 5)
            if line == b"PONG\r\n":
                break
            if line.startswith(b"MSG "):
                payload = (await reader.readexactly(int(line.split()[-1]) + 2))[:-2]
        if not payload:  # nats-server answers in a goroutine of its own: give it a moment
            try:
                line = await asyncio.wait_for(reader.readline(), 0.3)
                payload = (await reader.readexactly(int(line.split()[-1]) + 2))[:-2]
            except TimeoutError:
                pass
        seen[request] = payload
    writer.close()
    return seen


@pytest.mark.integration
def test_an_account_without_jetstream_answers_every_request_as_nats_server(tmp_path: Path) -> None:
    config = tmp_path / "nats-server.conf"
    config.write_text(f"jetstream {{ store_dir: {tmp_path / 'ns'} }}\n{ACCOUNTS}")
    with NatsServer(["-c", str(config)]) as real:
        theirs = asyncio.run(answers(real.port))
    options = options_from_text(ACCOUNTS, filename="server.conf")
    with InProcessServer(options, jetstream_dir=str(tmp_path / "ours")) as ours:
        port = int(ours.url.rsplit(":", 1)[1])
        mine = asyncio.run(answers(port))
    assert mine == theirs
    assert json.loads(theirs["STREAM.LIST"])["streams"] == []  # the case that differed
