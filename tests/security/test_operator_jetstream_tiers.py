"""Tiered JetStream limits of an account JWT (`tiered_limits: {R1: {...}, R3: {...}}`): JetStream is
on when a tier has storage; each stream and consumer is held against the limits of its replica
count's tier (streams, consumers, storage, max_bytes_required), 10120 when its tier has none; the
same answers from the real nats-server and `appliance run` (one server, so the R1 tier; R3 in the
pure test below)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace

import nats
import pytest

from appliance.config.operator import account_option
from appliance.jetstream import resources
from appliance.jetstream.config import StreamConfig
from appliance.jetstream.errors import JsApiError
from appliance.testing.jwts import Key, account_jwt, account_limits, creds, operator_jwt, user_jwt
from appliance.testing.natsserver import NatsServer
from appliance.testing.process import ApplianceProcess

OPERATOR = Key.new("O")
SYSTEM, TIERED, R3_ONLY, SMALL = Key.new("A"), Key.new("A"), Key.new("A"), Key.new("A")
USER = Key.new("U")
R1 = {"mem_storage": 1 << 20, "disk_storage": 4 << 20, "streams": 2, "consumer": 1}
R3 = {"mem_storage": 0, "disk_storage": 8 << 20, "streams": 1, "consumer": 5, "max_bytes_required": True}


def tiered(**tiers: dict[str, object]) -> dict[str, object]:
    return account_limits(tiered_limits=tiers)


def conf_text(store: Path) -> str:
    preload = {
        SYSTEM.public: account_jwt(SYSTEM, OPERATOR, name="SYS"),
        TIERED.public: account_jwt(TIERED, OPERATOR, name="TIERED", limits=tiered(R1=R1, R3=R3)),
        R3_ONLY.public: account_jwt(R3_ONLY, OPERATOR, name="R3ONLY", limits=tiered(R3=R3)),
        SMALL.public: account_jwt(SMALL, OPERATOR, name="SMALL",
                                  limits=tiered(R1={"mem_storage": 3000, "disk_storage": 1, "streams": 2})),
    }
    entries = "\n".join(f"  {key}: {token}" for key, token in preload.items())
    return (f"operator: {operator_jwt(OPERATOR, system_account=SYSTEM.public)}\nresolver: MEMORY\n"
            f"resolver_preload: {{\n{entries}\n}}\njetstream {{ store_dir: '{store}' }}\n")


def test_tiers_are_read_from_the_claims_and_enable_jetstream() -> None:
    account = account_option(TIERED.public, account_jwt(TIERED, OPERATOR, limits=tiered(R1=R1, R3=R3)),
                             [OPERATOR.public])
    assert account is not None and account.jetstream.enabled
    tiers = account.jetstream.tiers
    assert sorted(tiers) == ["R1", "R3"]
    assert (tiers["R1"].max_store, tiers["R1"].max_streams, tiers["R1"].max_consumers) == (4 << 20, 2, 1)
    assert tiers["R3"].max_bytes_required and tiers["R3"].max_memory == 0
    empty = account_option(TIERED.public, account_jwt(TIERED, OPERATOR, limits=tiered(R1={"streams": 3})),
                           [OPERATOR.public])
    assert empty is not None and not empty.jetstream.enabled  # no tier has storage: IsJSEnabled is false


async def answers(port: int, tiered_creds: Path, r3_creds: Path, small_creds: Path) -> list[object]:
    url = f"nats://127.0.0.1:{port}"
    out: list[object] = []

    async def run(creds_file: Path, requests: list[tuple[str, dict[str, object]]]) -> None:
        nc = await nats.connect(url, user_credentials=str(creds_file), allow_reconnect=False, connect_timeout=3)
        try:
            for subject, body in requests:
                reply = json.loads((await nc.request(subject, json.dumps(body).encode(), timeout=5)).data)
                error = reply.get("error")
                out.append((subject, error if error else "ok"))
        finally:
            await nc.close()

    def stream(name: str, **extra: object) -> tuple[str, dict[str, object]]:
        return f"$JS.API.STREAM.CREATE.{name}", {"name": name, "subjects": [f"{name}.>"], **extra}

    def consumer(stream_name: str, durable: str) -> tuple[str, dict[str, object]]:
        return (f"$JS.API.CONSUMER.CREATE.{stream_name}.{durable}",
                {"stream_name": stream_name, "config": {"durable_name": durable, "ack_policy": "explicit"}})

    await run(tiered_creds, [
        stream("S1", max_bytes=1024), stream("S2", storage="memory", max_bytes=2 << 20),  # over R1's memory
        stream("BIG", max_bytes=8 << 20),  # over R1's storage
        stream("S2", storage="memory", max_bytes=1024), stream("S3"),  # the third R1 stream
        consumer("S1", "C1"), consumer("S1", "C2"),  # R1: one consumer per stream
    ])
    await run(r3_creds, [stream("X1")])  # no R1 tier: 10120
    small = await nats.connect(url, user_credentials=str(small_creds), allow_reconnect=False, connect_timeout=3)
    try:  # publishes are held against the R1 tier's memory: the second 2000-byte message is over 3000
        await small.request("$JS.API.STREAM.CREATE.M", json.dumps({"name": "M", "storage": "memory"}).encode(),
                            timeout=5)
        for _ in range(2):
            ack = json.loads((await small.request("M", b"x" * 2000, timeout=5)).data)
            out.append(("publish", ack.get("error") or "ok"))
    finally:
        await small.close()
    nc = await nats.connect(url, user_credentials=str(tiered_creds), allow_reconnect=False, connect_timeout=3)
    try:
        info = json.loads((await nc.request("$JS.API.INFO", b"", timeout=5)).data)
        info.pop("api")
        out.append(info)  # the zero `limits` of a tiered account, and `tiers`
    finally:
        await nc.close()
    return out


@pytest.mark.integration
def test_tiered_limits_match_nats_server(tmp_path: Path) -> None:
    tiered_creds, r3_creds, small_creds = tmp_path / "tiered.creds", tmp_path / "r3.creds", tmp_path / "small.creds"
    tiered_creds.write_text(creds(user_jwt(USER, TIERED), USER))
    r3_creds.write_text(creds(user_jwt(USER, R3_ONLY), USER))
    small_creds.write_text(creds(user_jwt(USER, SMALL), USER))
    results = []
    for name in ("real", "ours"):
        conf = tmp_path / f"{name}.conf"
        conf.write_text(conf_text(tmp_path / f"store-{name}"))
        if name == "real":
            with NatsServer(["-c", str(conf)], log_path=tmp_path / "nats-server.log") as real:
                results.append(asyncio.run(answers(real.port, tiered_creds, r3_creds, small_creds)))
        else:
            with ApplianceProcess(["-c", str(conf), "-a", "127.0.0.1", "-p", "-1"], log_dir=tmp_path) as ours:
                results.append(asyncio.run(answers(ours.client_port, tiered_creds, r3_creds, small_creds)))
    real, ours = results
    codes = [answer[1]["err_code"] if answer[1] != "ok" else "ok" for answer in real[:-1]]  # type: ignore[index]
    assert sorted(real[-1]["tiers"]) == ["R1", "R3"]  # type: ignore[index]
    assert codes == ["ok", 10028, 10047, "ok", 10027, "ok", 10026, 10120, "ok", 10002], real
    assert ours == real


# --- the R3 tier, without a cluster: the checks of jetstream/resources.py on a stand-in account ----

class _Store:
    def state(self) -> SimpleNamespace:
        return SimpleNamespace(bytes=0)


def _account(streams: dict[str, StreamConfig]) -> SimpleNamespace:
    account = account_option(TIERED.public, account_jwt(TIERED, OPERATOR, limits=tiered(R1=R1, R3=R3)),
                             [OPERATOR.public])
    options = SimpleNamespace(accounts={TIERED.public: account},
                              jetstream=SimpleNamespace(max_memory=1 << 30, max_storage=1 << 30))
    service = SimpleNamespace(options=options, root="/", accounts={}, meta=SimpleNamespace(clustered=False))
    ajs = SimpleNamespace(service=service, account=SimpleNamespace(name=TIERED.public),
                          streams={name: SimpleNamespace(config=config, store=_Store()) for name, config in streams.items()})
    service.accounts[TIERED.public] = ajs
    return ajs


def _refusal(ajs: SimpleNamespace, config: StreamConfig) -> int | None:
    try:
        resources.check_stream_create(ajs, config)  # type: ignore[arg-type]
    except JsApiError as error:
        return error.entry.err_code
    return None


def test_each_tier_counts_its_own_streams_and_bytes() -> None:
    r1 = {f"A{i}": StreamConfig(name=f"A{i}", max_bytes=1024) for i in range(2)}  # R1 is full (2 streams)
    ajs = _account(r1)
    assert _refusal(ajs, StreamConfig(name="A2", max_bytes=1024)) == 10027
    assert _refusal(ajs, StreamConfig(name="T1", num_replicas=3)) == 10113  # R3: max_bytes_required
    assert _refusal(ajs, StreamConfig(name="T1", num_replicas=3, max_bytes=9 << 20)) == 10047  # over R3's 8 MiB
    assert _refusal(ajs, StreamConfig(name="T1", num_replicas=3, max_bytes=1 << 20)) is None  # R1's count: no
    assert _refusal(ajs, StreamConfig(name="T1", num_replicas=3, storage="memory", max_bytes=1)) == 10028
    assert _refusal(ajs, StreamConfig(name="T1", num_replicas=5, max_bytes=1)) == 10120  # no R5 tier
    ajs = _account({**r1, "T1": StreamConfig(name="T1", num_replicas=3, max_bytes=1 << 20)})
    assert _refusal(ajs, StreamConfig(name="T2", num_replicas=3, max_bytes=1 << 20)) == 10027  # R3: 1 stream
    assert _refusal(ajs, StreamConfig(name="T1", num_replicas=3, max_bytes=1 << 20)) is None  # itself: not counted
