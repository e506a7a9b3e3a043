"""A consumer delivery that arrives over a route as nats-server sends it (`RMSG <inbox>
<ack>@<stream subject>`, spec/cluster-and-routes.md §4.4) for a client on a sibling worker: the
route's worker hands it to that worker's JetStream relay ($JSD / $JSDQ records, jetstream/relay.py),
which gives the client the stream subject and the bare ack subject. Sent on the inbox as is, the
client got `<ack>@<stream subject>` as its reply (nats clients then reject the message as not a
JetStream one, and its ack goes nowhere): found by tests/jscluster/test_consumer_failover.py."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any, cast

import pytest

from appliance.config.options import ClusterOptions, JetStreamOptions, ServerOptions
from appliance.server.links import LinkPeer, LocalFabric, decode_records_py
from appliance.server.routes import RouteManager
from appliance.server.server import Server
from appliance.server.sublist import Subscription
from tests.server.test_relay_runs import RecordingLink

ACK = b"$JS.ACK.S.C.1.7.3.1700000000000000000.0"


@pytest.fixture(autouse=True)
def event_loop_set() -> Iterator[None]:
    """A Server takes the current event loop: one of this test's own (an earlier asyncio.run() leaves none)."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        yield
    finally:
        asyncio.set_event_loop(None)
        loop.close()


def sibling(jetstream: bool) -> tuple[RouteManager, LinkPeer, RecordingLink, Server]:
    options = ServerOptions(server_name="h0", cluster=ClusterOptions(name="C1", port=-1),
                            jetstream=JetStreamOptions(enabled=jetstream))
    server = Server(options, server_id="ID0", start_wall_s=0.0)
    link = RecordingLink()
    peer = LinkPeer(cast(LocalFabric, SimpleNamespace(server=server)), cast(Any, link))
    return RouteManager(server), peer, link, server


def records(peer: LinkPeer, link: RecordingLink) -> list[tuple[object, ...]]:
    peer.flush()
    return [tuple(record) for _, frame in link.sent for record in decode_records_py(frame)]


def test_a_routed_delivery_for_a_sibling_client_goes_to_its_relay() -> None:
    manager, peer, link, server = sibling(jetstream=True)
    server.global_account().sublist.insert(Subscription(peer, b"_INBOX.f", None, b"L1", "$G"))
    manager._deliver_inbound(b"$G", b"_INBOX.f", ACK + b"@orders.new", (), None, b"payload")
    [record] = records(peer, link)
    assert record[1:3] == (b"$JSD._INBOX.f", ACK + b"@orders.new")


def test_a_routed_delivery_for_a_sibling_queue_member_goes_to_its_relay_with_the_queue() -> None:
    manager, peer, link, server = sibling(jetstream=True)
    server.global_account().sublist.insert(Subscription(peer, b"deliver.q", b"workers", b"L1", "$G"))
    manager._deliver_inbound(b"$G", b"deliver.q", ACK + b"@orders.new", (b"workers",), None, b"payload")
    [record] = records(peer, link)
    assert record[1:4] == (b"$JSDQ.deliver.q", ACK + b"@orders.new@workers", None)  # a plain record


def test_other_routed_messages_reach_the_sibling_unchanged() -> None:
    manager, peer, link, server = sibling(jetstream=True)
    server.global_account().sublist.insert(Subscription(peer, b"_INBOX.f", None, b"L1", "$G"))
    manager._deliver_inbound(b"$G", b"_INBOX.f", b"_INBOX.reply@x", (), None, b"payload")
    [record] = records(peer, link)
    assert record[1:3] == (b"_INBOX.f", b"_INBOX.reply@x")
