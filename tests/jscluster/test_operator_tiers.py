"""Tiered JetStream limits of an account JWT on a three-node appliance cluster in operator mode:
R3 streams are held against the R3 tier (its stream count, max_bytes_required, storage) and R1
streams against the R1 tier, independently; $JS.API.INFO reports both tiers."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import nats
import pytest

from appliance.testing.jwts import Key, account_jwt, account_limits, creds, operator_jwt, user_jwt
from appliance.testing.process import free_port
from tests.jscluster.conftest import META_TIMEOUT_S, meta_leader
from tests.routes.conftest import Node, plain_config, wait_until

pytestmark = pytest.mark.integration

OPERATOR = Key.new("O")
SYSTEM, TIERED = Key.new("A"), Key.new("A")
USER = Key.new("U")
R1 = {"disk_storage": 4 << 20, "streams": 1, "consumer": -1}
R3 = {"disk_storage": 8 << 20, "streams": 1, "consumer": -1, "max_bytes_required": True}


def operator_block() -> str:
    preload = {SYSTEM.public: account_jwt(SYSTEM, OPERATOR, name="SYS"),
               TIERED.public: account_jwt(TIERED, OPERATOR, name="TIERED",
                                          limits=account_limits(tiered_limits={"R1": R1, "R3": R3}))}
    entries = "\n".join(f"  {key}: {token}" for key, token in preload.items())
    return (f"operator: {operator_jwt(OPERATOR, system_account=SYSTEM.public)}\nsystem_account: {SYSTEM.public}\n"
            f"resolver: MEMORY\nresolver_preload: {{\n{entries}\n}}\n")


def test_r3_and_r1_tiers_on_a_cluster(tmp_path: Path) -> None:
    names = ("t1", "t2", "t3")
    cluster = {name: free_port() for name in names}
    nodes = []
    for name in names:
        client, http = free_port(), free_port()
        extra = (f"http: 127.0.0.1:{http}\n{operator_block()}jetstream {{ store_dir: '{tmp_path / name}' }}\n"
                 "appliance { workers: 1 }\n")
        path = tmp_path / f"{name}.conf"
        path.write_text(plain_config(name, client=client, cluster_port=cluster[name],
                                     routes=[cluster[n] for n in names if n != name], extra=extra))
        nodes.append(Node(name, client, cluster[name], path, log_dir=tmp_path, http_port=http))
    user_creds = tmp_path / "user.creds"
    user_creds.write_text(creds(user_jwt(USER, TIERED), USER))
    try:
        for node in nodes:
            node.start()
        wait_until(lambda: meta_leader(nodes), "a meta leader", META_TIMEOUT_S)

        async def scenario() -> list[object]:
            nc = await nats.connect(nodes[0].url, user_credentials=str(user_creds), allow_reconnect=False)
            out: list[object] = []
            try:
                async def create(name: str, **config: object) -> object:
                    body = json.dumps({"name": name, "subjects": [f"{name}.>"], **config}).encode()
                    deadline = time.monotonic() + 30
                    while True:  # a young cluster may answer 10008 (no meta leader yet) for a moment
                        reply = json.loads((await nc.request(f"$JS.API.STREAM.CREATE.{name}", body, timeout=10)).data)
                        error = reply.get("error")
                        if not error or error.get("err_code") != 10008 or time.monotonic() > deadline:
                            return error.get("err_code") if error else "ok"
                        await asyncio.sleep(0.2)

                out.append(await create("T1", num_replicas=3))  # R3 needs max_bytes
                out.append(await create("T1", num_replicas=3, max_bytes=9 << 20))  # over R3's storage
                out.append(await create("T1", num_replicas=3, max_bytes=1 << 20))
                out.append(await create("T2", num_replicas=3, max_bytes=1 << 20))  # R3: one stream
                out.append(await create("S1"))  # R1 is its own tier
                out.append(await create("S2"))
                info = json.loads((await nc.request("$JS.API.INFO", b"", timeout=10)).data)
                out.append({tier: (v["streams"], v["limits"]["max_streams"]) for tier, v in info["tiers"].items()})
            finally:
                await nc.close()
            return out

        answers = asyncio.run(scenario())
        assert answers == [10113, 10047, "ok", 10027, "ok", 10027, {"R1": (1, 1), "R3": (1, 1)}]
    finally:
        for node in nodes:
            node.stop()
