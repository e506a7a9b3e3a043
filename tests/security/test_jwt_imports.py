"""Exports and imports in account JWTs (operator mode, MEMORY resolver): the same preloaded JWTs run by
nats-server 2.15.1 and by `appliance run` (two workers); nats-py clients with creds files get the same
messages and replies. A `token_req` export is refused to an import without an activation token, and
granted to one with a token the exporter signed (itself or by a signing key), on both."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import nats
import pytest
from nats.errors import NoRespondersError

from appliance.testing.clients import flush_after_subs
from appliance.testing.jwts import Key, account_jwt, activation_jwt, creds, operator_jwt, user_jwt
from appliance.testing.natsserver import NatsServer
from appliance.testing.process import ApplianceProcess, free_port

OPERATOR = Key.new("O")
SYSTEM, EXPORTER, IMPORTER, EXPORTER_SIGNER = (Key.new("A") for _ in range(4))
PRODUCER, CONSUMER = Key.new("U"), Key.new("U")


def conf_text() -> str:
    exporter = account_jwt(EXPORTER, OPERATOR, name="EXP", signing_keys=[EXPORTER_SIGNER.public], exports=[
        {"subject": "paid.>", "type": "stream", "token_req": True},
        {"subject": "paid.req", "type": "service", "token_req": True},
        {"subject": "foo.>", "type": "stream"},
        {"subject": "req.*", "type": "service", "response_type": "Singleton"},
        {"subject": "private.>", "type": "stream", "token_req": True},
    ])
    importer = account_jwt(IMPORTER, OPERATOR, name="IMP", imports=[
        {"subject": "foo.>", "account": EXPORTER.public, "type": "stream", "local_subject": "bar.>"},
        {"subject": "req.*", "account": EXPORTER.public, "type": "service", "local_subject": "ask.*"},
        {"subject": "private.>", "account": EXPORTER.public, "type": "stream"},
        {"subject": "paid.>", "account": EXPORTER.public, "type": "stream",
         "token": activation_jwt(IMPORTER, EXPORTER, "paid.>")},
        {"subject": "paid.req", "account": EXPORTER.public, "type": "service", "local_subject": "buy",
         "token": activation_jwt(IMPORTER, EXPORTER, "paid.req", kind="service", signer=EXPORTER_SIGNER)},
    ])
    preload = "\n".join(f"  {key}: {token}" for key, token in (
        (SYSTEM.public, account_jwt(SYSTEM, OPERATOR, name="SYS")), (EXPORTER.public, exporter),
        (IMPORTER.public, importer)))
    return (f"operator: {operator_jwt(OPERATOR, system_account=SYSTEM.public)}\n"
            f"system_account: {SYSTEM.public}\nresolver: MEMORY\nresolver_preload: {{\n{preload}\n}}\n")


async def scenario(port: int, tmp: Path) -> list[object]:
    files = []
    for user, account in ((PRODUCER, EXPORTER), (CONSUMER, IMPORTER)):
        path = tmp / f"{user.public[:8]}-{port}.creds"
        path.write_text(creds(user_jwt(user, account), user))
        files.append(str(path))
    producer = await nats.connect(f"nats://127.0.0.1:{port}", user_credentials=files[0])
    consumer = await nats.connect(f"nats://127.0.0.1:{port}", user_credentials=files[1])
    got: list[tuple[str, bytes]] = []

    async def on_msg(msg: nats.aio.msg.Msg) -> None:
        got.append((msg.subject, msg.data))

    await consumer.subscribe("bar.>", cb=on_msg)
    await consumer.subscribe("private.>", cb=on_msg)
    await consumer.subscribe("paid.x", cb=on_msg)
    await flush_after_subs(consumer)

    async def service(msg: nats.aio.msg.Msg) -> None:
        await msg.respond(b"answer to " + msg.subject.encode())

    await producer.subscribe("req.*", cb=service)
    await producer.subscribe("paid.req", cb=service)
    await flush_after_subs(producer)
    await asyncio.sleep(0.3)  # the shadow interest reaches the producer's worker
    await producer.publish("private.x", b"secret")
    await producer.publish("foo.a", b"one")
    await producer.publish("paid.x", b"two")
    await producer.flush()
    deadline = time.monotonic() + 10
    while len(got) < 2 and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    reply = await consumer.request("ask.time", b"", timeout=5)
    bought = await consumer.request("buy", b"", timeout=5)
    with pytest.raises(NoRespondersError):
        await consumer.request("req.time", b"", timeout=5)  # the exporter's subject is not the importer's
    await producer.close()
    await consumer.close()
    return [sorted(got), reply.data, bought.data]


def test_jwt_exports_and_imports_as_nats_server(tmp_path: Path) -> None:
    conf = tmp_path / "op.conf"
    conf.write_text(conf_text())
    ours_conf = tmp_path / "ours.conf"
    ours_conf.write_text(conf_text() + f"listen: 127.0.0.1:{free_port()}\nappliance {{ workers: 2 }}\n")
    with NatsServer(["-c", str(conf)]) as real:
        theirs = asyncio.run(scenario(real.port, tmp_path))
    with ApplianceProcess(["-c", str(ours_conf)], log_dir=tmp_path) as ours:
        mine = asyncio.run(scenario(ours.client_port, tmp_path))
    assert theirs == [[("bar.a", b"one"), ("paid.x", b"two")], b"answer to req.time", b"answer to paid.req"]
    assert mine == theirs
