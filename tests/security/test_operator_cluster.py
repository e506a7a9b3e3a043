"""Operator mode across a mixed cluster: an appliance host (two workers) and a nats-server node with
the same operator and preloaded account JWTs; JWT users on either side reach each other within their
account over the route, and accounts stay apart."""

from __future__ import annotations

import asyncio
from pathlib import Path

import nats
import pytest

from appliance.testing.clients import flush_after_subs
from appliance.testing.jwts import Key, account_jwt, creds, operator_jwt, user_jwt
from appliance.testing.process import free_port
from tests.routes.conftest import Node, cluster_nodes, make_node, routed  # noqa: F401 (fixture)

pytestmark = pytest.mark.integration

OPERATOR = Key.new("O")
SYSTEM, SALES, OPS = Key.new("A"), Key.new("A"), Key.new("A")
USER = Key.new("U")


def operator_block() -> str:
    preload = {SYSTEM.public: account_jwt(SYSTEM, OPERATOR, name="SYS"),
               SALES.public: account_jwt(SALES, OPERATOR, name="SALES"),
               OPS.public: account_jwt(OPS, OPERATOR, name="OPS")}
    entries = "\n".join(f"  {key}: {token}" for key, token in preload.items())
    return (f"operator: {operator_jwt(OPERATOR, system_account=SYSTEM.public)}\nresolver: MEMORY\n"
            f"resolver_preload: {{\n{entries}\n}}\n")


def test_jwt_users_meet_over_a_route_with_nats_server(tmp_path: Path, cluster_nodes: list[Node]) -> None:
    ports = {"a1": free_port(), "g1": free_port()}
    block = operator_block()
    nodes = [make_node(tmp_path, "a1", "appliance", ports, routes=["g1"], extra=block),
             make_node(tmp_path, "g1", "go", ports, routes=[], extra=block)]
    for node in nodes:
        cluster_nodes.append(node.start())
    sales_creds, ops_creds = tmp_path / "sales.creds", tmp_path / "ops.creds"
    sales_creds.write_text(creds(user_jwt(USER, SALES), USER))
    ops_creds.write_text(creds(user_jwt(USER, OPS), USER))

    async def scenario() -> None:
        def connect(node: Node, path: Path) -> object:
            return nats.connect(node.url, user_credentials=str(path), allow_reconnect=False, connect_timeout=5)

        on_a, on_g = await connect(nodes[0], sales_creds), await connect(nodes[1], sales_creds)
        other_on_a = await connect(nodes[0], ops_creds)
        try:
            await routed(on_g, on_a)  # type: ignore[arg-type]
            await routed(on_a, on_g)  # type: ignore[arg-type]
            leaked: list[bytes] = []

            async def on_leak(msg: nats.aio.msg.Msg) -> None:
                leaked.append(msg.data)

            await other_on_a.subscribe("orders.>", cb=on_leak)  # type: ignore[attr-defined]
            got = await on_a.subscribe("orders.>")  # type: ignore[attr-defined]
            await flush_after_subs(on_a)  # type: ignore[arg-type]
            await flush_after_subs(other_on_a)  # type: ignore[arg-type]
            await routed(on_g, on_a)  # type: ignore[arg-type]
            await on_g.publish("orders.1", b"sales only")  # type: ignore[attr-defined]
            await on_g.flush()  # type: ignore[attr-defined]
            assert (await got.next_msg(timeout=5)).data == b"sales only"
            await other_on_a.flush()  # type: ignore[attr-defined]
            assert leaked == []
        finally:
            for nc in (on_a, on_g, other_on_a):
                await nc.close()  # type: ignore[attr-defined]

    asyncio.run(scenario())
