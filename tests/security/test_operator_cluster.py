"""Operator mode across a mixed cluster: an appliance host (two workers) and a nats-server node with
the same operator and preloaded account JWTs; JWT users on either side reach each other within their
account over the route, and accounts stay apart."""

from __future__ import annotations

import asyncio
import time
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


def test_a_push_to_either_server_reaches_both_full_resolvers(tmp_path: Path, cluster_nodes: list[Node]) -> None:
    """Every server of the cluster subscribes to the claim updates in the system account, so a JWT
    pushed to one is stored by all (as nats-server's resolvers do among themselves)."""
    ports = {"a1": free_port(), "g1": free_port()}
    nodes = []
    for name, kind, routes in (("a1", "appliance", ["g1"]), ("g1", "go", [])):
        block = (f"operator: {operator_jwt(OPERATOR, system_account=SYSTEM.public)}\n"
                 f"resolver {{ type: full, dir: '{tmp_path / (name + '-jwt')}' }}\n"
                 f"resolver_preload {{ {SYSTEM.public}: {account_jwt(SYSTEM, OPERATOR, name='SYS')} }}\n")
        nodes.append(make_node(tmp_path, name, kind, ports, routes=routes, extra=block))
    for node in nodes:
        cluster_nodes.append(node.start())
    admin_key = Key.new("U")
    admin_creds, sales_creds, ops_creds = tmp_path / "admin.creds", tmp_path / "sales.creds", tmp_path / "ops.creds"
    admin_creds.write_text(creds(user_jwt(admin_key, SYSTEM), admin_key))
    sales_creds.write_text(creds(user_jwt(USER, SALES), USER))
    ops_creds.write_text(creds(user_jwt(USER, OPS), USER))

    async def scenario() -> None:
        admins = [await nats.connect(node.url, user_credentials=str(admin_creds), allow_reconnect=False,
                                     connect_timeout=5) for node in nodes]
        try:
            await routed(admins[0], admins[1])
            await routed(admins[1], admins[0])
            for admin, key, account in ((admins[1], SALES, "SALES"), (admins[0], OPS, "OPS")):
                token = account_jwt(key, OPERATOR, name=account)
                await admin.request("$SYS.REQ.CLAIMS.UPDATE", token.encode(), timeout=5)
            deadline = time.monotonic() + 10
            stored = [tmp_path / f"{node.name}-jwt" / f"{key.public}.jwt" for node in nodes for key in (SALES, OPS)]
            while not all(path.exists() for path in stored):  # each server stores what reaches it
                assert time.monotonic() < deadline, [path for path in stored if not path.exists()]
                await asyncio.sleep(0.05)
            for node in nodes:
                for path in (sales_creds, ops_creds):
                    nc = await nats.connect(node.url, user_credentials=str(path), allow_reconnect=False,
                                            connect_timeout=5)
                    await nc.close()
        finally:
            for admin in admins:
                await admin.close()

    asyncio.run(scenario())
