"""Operator mode with JetStream: an account gets JetStream with the limits of its JWT's claims (as
nats-server's UpdateAccountClaims), an account whose JWT has none gets 10039; same answers from
the real nats-server and `appliance run`."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import nats
import pytest

from appliance.testing.jwts import Key, account_jwt, account_limits, creds, operator_jwt, user_jwt
from appliance.testing.natsserver import NatsServer
from appliance.testing.process import ApplianceProcess

OPERATOR = Key.new("O")
SYSTEM, JS_ACCOUNT, PLAIN_ACCOUNT = Key.new("A"), Key.new("A"), Key.new("A")
USER = Key.new("U")
JS_LIMITS = account_limits(mem_storage=1 << 20, disk_storage=4 << 20, streams=2, consumer=3, max_ack_pending=100)


def conf_text(store: Path) -> str:
    preload = {
        SYSTEM.public: account_jwt(SYSTEM, OPERATOR, name="SYS"),
        JS_ACCOUNT.public: account_jwt(JS_ACCOUNT, OPERATOR, name="JS", limits=JS_LIMITS),
        PLAIN_ACCOUNT.public: account_jwt(PLAIN_ACCOUNT, OPERATOR, name="PLAIN"),
    }
    entries = "\n".join(f"  {key}: {token}" for key, token in preload.items())
    return (f"operator: {operator_jwt(OPERATOR, system_account=SYSTEM.public)}\nresolver: MEMORY\n"
            f"resolver_preload: {{\n{entries}\n}}\njetstream {{ store_dir: '{store}' }}\n")


async def api_answers(port: int, js_creds: Path, plain_creds: Path) -> list[dict[str, object]]:
    """$JS.API answers of both accounts: INFO, stream creates up to the limit, a consumer over
    the account's max_ack_pending."""
    answers: list[dict[str, object]] = []
    url = f"nats://127.0.0.1:{port}"
    nc = await nats.connect(url, user_credentials=str(js_creds), allow_reconnect=False, connect_timeout=3)
    try:
        async def request(subject: str, body: dict[str, object] | None = None) -> dict[str, object]:
            reply = await nc.request(subject, json.dumps(body).encode() if body else b"", timeout=5)
            answer: dict[str, object] = json.loads(reply.data)
            return answer

        info = await request("$JS.API.INFO")
        answers.append({"limits": info.get("limits"), "streams": info.get("streams")})
        for name, storage, max_bytes in (("S1", "file", 1024), ("BIG", "file", 8 << 20), ("S2", "memory", 1024),
                                         ("S3", "file", 1024)):
            created = await request(f"$JS.API.STREAM.CREATE.{name}", {"name": name, "subjects": [f"{name}.>"],
                                                                       "storage": storage, "max_bytes": max_bytes})
            answers.append({"error": created.get("error")} if "error" in created else {"ok": name})
        consumer = await request("$JS.API.CONSUMER.CREATE.S1.C",
                                 {"stream_name": "S1", "config": {"durable_name": "C", "ack_policy": "explicit",
                                                                  "max_ack_pending": 1000}})
        answers.append({"error": consumer.get("error")})
    finally:
        await nc.close()
    plain = await nats.connect(url, user_credentials=str(plain_creds), allow_reconnect=False, connect_timeout=3)
    try:
        reply = await plain.request("$JS.API.INFO", b"", timeout=5)
        answers.append({"error": json.loads(reply.data).get("error")})
    finally:
        await plain.close()
    return answers


@pytest.mark.integration
def test_account_jetstream_from_claims_matches_nats_server(tmp_path: Path) -> None:
    js_creds, plain_creds = tmp_path / "js.creds", tmp_path / "plain.creds"
    js_creds.write_text(creds(user_jwt(USER, JS_ACCOUNT), USER))
    plain_creds.write_text(creds(user_jwt(USER, PLAIN_ACCOUNT), USER))
    results = []
    for name in ("real", "ours"):
        store = tmp_path / f"store-{name}"
        conf = tmp_path / f"{name}.conf"
        conf.write_text(conf_text(store))
        if name == "real":
            with NatsServer(["-c", str(conf)], log_path=tmp_path / "nats-server.log") as real:
                results.append(asyncio.run(api_answers(real.port, js_creds, plain_creds)))
        else:
            with ApplianceProcess(["-c", str(conf), "-a", "127.0.0.1", "-p", "-1"], log_dir=tmp_path) as ours:
                results.append(asyncio.run(api_answers(ours.client_port, js_creds, plain_creds)))
    real_answers, our_answers = results
    assert real_answers[0]["limits"] == {
        "max_memory": 1 << 20, "max_storage": 4 << 20, "max_streams": 2, "max_consumers": 3,
        "max_ack_pending": 100, "memory_max_stream_bytes": -1, "storage_max_stream_bytes": -1,
        "max_bytes_required": False}
    assert our_answers == real_answers
    errors = [answer["error"]["err_code"] for answer in real_answers if answer.get("error")]  # type: ignore[index]
    assert errors == [10047, 10027, 10121, 10039]  # storage, streams, max_ack_pending, no JetStream
