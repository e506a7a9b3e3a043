"""Deliveries relayed to a client on worker 1 (JetStream on worker 0) are exactly what a client on
worker 0 gets: the same MSG/HMSG bytes in the same order (stream subject, sid, ack reply), with
and without header support, headers_only, through the run path (one C call per run) and through
the record-by-record fallback (permissions, internal subscribers); push consumers with a queue
group deliver each message to one member; a small ring (backpressure) loses nothing."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import nats
import pytest
from nats.js.api import AckPolicy, ConsumerConfig

from appliance import limits, native
from appliance.config.options import Permissions, ServerOptions, SubjectPermission, User
from appliance.fabric.mesh import Transport
from appliance.jetstream.relay import DeliveryRelay
from appliance.jetstream.service import JetStreamService, start_jetstream, start_relay
from appliance.server.internal import InternalClient
from appliance.testing.inproc import InProcessServer
from appliance.testing.inproc_mesh import InProcessMesh
from appliance.testing.rawclient import RawClient

DEADLINE_S = 10.0
TRANSPORTS: list[Transport] = ["socketpair"] + (["ring"] if native.ENABLED else [])
MSGS = 120
PUSHED = 2 * limits.JS_FLOW_CONTROL_MSGS + 100


class Cluster:
    """Two workers: JetStream on worker 0, the relay on worker 1."""

    def __init__(self, mesh: InProcessMesh, service: JetStreamService, relay: DeliveryRelay) -> None:
        self.mesh, self.service, self.relay = mesh, service, relay

    def runs(self) -> int:
        return self.mesh.call(lambda: self.relay.runs)


def jetstream_options(tmp_path: Path) -> ServerOptions:
    options = ServerOptions()
    options.jetstream.enabled = True
    options.jetstream.store_dir = str(tmp_path / "store")
    return options


def started(options: ServerOptions, *, transport: Transport | None = None,
            ring_bytes: int = limits.RING_BYTES) -> Iterator[Cluster]:
    with InProcessMesh(2, options=options, transport=transport, ring_bytes=ring_bytes) as mesh:
        service = mesh.call(start_jetstream, mesh.servers[0])
        relay = mesh.call(start_relay, mesh.servers[1])
        try:
            yield Cluster(mesh, service, relay)
        finally:
            mesh.call(service.stop)
            mesh.call(relay.close)


@pytest.fixture(params=TRANSPORTS)
def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    yield from started(jetstream_options(tmp_path), transport=request.param)


def connect(port: int, *, headers: bool = True, user: str = "") -> RawClient:
    client = RawClient(port)
    auth = f',"user":"{user}","pass":"p"' if user else ""
    client.send(b'CONNECT {"verbose":false,"headers":%s%s}\r\nPING\r\n' % (b"true" if headers else b"false",
                                                                           auth.encode()))
    client.read_until(b"PONG\r\n")
    return client


def request(client: RawClient, subject: str, body: object) -> dict[str, object]:
    client.send(b"SUB _INBOX.api 99\r\nUNSUB 99 1\r\nPUB %s _INBOX.api %d\r\n%s\r\n" % (
        subject.encode(), len(json.dumps(body)), json.dumps(body).encode()))
    client.read_until(b"MSG _INBOX.api 99 ")
    size = int(client.read_until(b"\r\n").strip())
    reply: dict[str, object] = json.loads(client.read_until(b"\r\n")[:size])
    assert "error" not in reply, reply
    return reply


def stored(client: RawClient) -> object:
    return request(client, "$JS.API.STREAM.INFO.S", {})["state"]["messages"]  # type: ignore[index]


def make_stream(client: RawClient, *, headers_only_consumer: bool = False) -> None:
    """Stream S with MSGS messages (every third with headers, sizes vary) and consumers A and B."""
    request(client, "$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"], "storage": "memory"})
    burst = bytearray()
    for index in range(MSGS):
        payload = b"m%03d" % index + b"x" * (index % 7) * 40
        if index % 3 == 0:
            header = b"NATS/1.0\r\nK: %d\r\n\r\n" % index
            sizes = (len(header), len(header) + len(payload))
            burst += b"HPUB s.%d %d %d\r\n%s%s\r\n" % (index % 4, *sizes, header, payload)
        else:
            burst += b"PUB s.%d %d\r\n%s\r\n" % (index % 4, len(payload), payload)
    client.send(bytes(burst))
    deadline = time.monotonic() + DEADLINE_S
    while stored(client) != MSGS:
        assert time.monotonic() < deadline
    for name in ("A", "B"):
        config: dict[str, object] = {"durable_name": name, "ack_policy": "explicit"}
        if headers_only_consumer:
            config["headers_only"] = True
        request(client, f"$JS.API.CONSUMER.CREATE.S.{name}", {"stream_name": "S", "config": config})


def fetch(client: RawClient, consumer: str, batch: int) -> bytes:
    """The bytes of one pull request's deliveries (up to and including message MSGS - 1)."""
    client.send(b"SUB _INBOX.f 7\r\nPUB $JS.API.CONSUMER.MSG.NEXT.S.%s _INBOX.f %d\r\n%s\r\n" % (
        consumer.encode(), len(b'{"batch":%d}' % batch), b'{"batch":%d}' % batch))
    return client.read_until(b"m%03d" % (MSGS - 1)) + client.read_until(b"\r\n")


def acks_of(delivered: bytes) -> list[bytes]:
    return re.findall(rb"\$JS\.ACK\.[^ ]+", delivered)


def ack_everything(client: RawClient, delivered: bytes) -> None:
    client.send(b"".join(b"PUB %s 0\r\n\r\n" % ack for ack in acks_of(delivered)) + b"PING\r\n")
    client.read_until(b"PONG\r\n")


def wait_consumer(client: RawClient, consumer: str, check: Callable[[dict[str, object]], bool]) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not check(request(client, f"$JS.API.CONSUMER.INFO.S.{consumer}", {})):
        assert time.monotonic() < deadline, f"consumer {consumer} never reached the expected state"


def fully_acked(info: dict[str, object]) -> bool:
    return info["num_ack_pending"] == 0 and info["ack_floor"]["stream_seq"] == MSGS  # type: ignore[index]


@pytest.mark.parametrize("headers", [True, False])
def test_a_fetch_relayed_to_worker_1_is_byte_for_byte_what_worker_0_sends(
        cluster: Cluster, headers: bool) -> None:
    near = connect(cluster.mesh.ports[0], headers=headers)
    far = connect(cluster.mesh.ports[1], headers=headers)
    setup = connect(cluster.mesh.ports[0])
    try:
        make_stream(setup)
        runs_before = cluster.runs()
        from_near = fetch(near, "A", MSGS)
        from_far = fetch(far, "B", MSGS)
        assert cluster.runs() > runs_before  # the run path wrote them, not the per-record fallback
        assert from_far == from_near.replace(b"$JS.ACK.S.A.", b"$JS.ACK.S.B.")
        assert from_near.count(b"MSG s.") == MSGS
        assert (b"HMSG s.0 7 $JS.ACK.S.A.1.1.1." in from_near) is headers
        ack_everything(far, from_far)
        ack_everything(near, from_near)
        wait_consumer(setup, "A", fully_acked)
        wait_consumer(setup, "B", fully_acked)
    finally:
        for client in (near, far, setup):
            client.close()


def test_headers_only_deliveries_cross_unchanged(tmp_path: Path) -> None:
    for cluster in started(jetstream_options(tmp_path)):
        near, far = connect(cluster.mesh.ports[0]), connect(cluster.mesh.ports[1])
        try:
            make_stream(near, headers_only_consumer=True)
            from_near = fetch_headers_only(near, "A")
            from_far = fetch_headers_only(far, "B")
            assert from_far == from_near.replace(b"$JS.ACK.S.A.", b"$JS.ACK.S.B.")
            assert from_near.count(b"Nats-Msg-Size: ") == MSGS
        finally:
            near.close()
            far.close()


def fetch_headers_only(client: RawClient, consumer: str) -> bytes:
    client.send(b"SUB _INBOX.f 7\r\nPUB $JS.API.CONSUMER.MSG.NEXT.S.%s _INBOX.f %d\r\n%s\r\n" % (
        consumer.encode(), len(b'{"batch":%d}' % MSGS), b'{"batch":%d}' % MSGS))
    out = b""
    while out.count(b"HMSG ") < MSGS:
        out += client.read_until(b"\r\n\r\n\r\n")  # headers only: the header block ends every message
    return out


def test_a_client_with_permissions_gets_the_same_bytes_record_by_record(tmp_path: Path) -> None:
    options = jetstream_options(tmp_path)
    options.authorization.users = [
        User(username="limited", password="p", permissions=Permissions(
            publish=SubjectPermission(allow=["$JS.API.>", "$JS.ACK.>", "s.>"]),
            subscribe=SubjectPermission(allow=["_INBOX.>"]))),
        User(username="free", password="p"),
    ]
    for cluster in started(options):
        near = connect(cluster.mesh.ports[0], user="free")
        far = connect(cluster.mesh.ports[1], user="limited")
        try:
            make_stream(near)
            runs_before = cluster.runs()
            from_near = fetch(near, "A", MSGS)
            from_far = fetch(far, "B", MSGS)
            assert cluster.runs() == runs_before  # permissions: one by one through deliver
            assert from_far == from_near.replace(b"$JS.ACK.S.A.", b"$JS.ACK.S.B.")
            ack_everything(far, from_far)
            wait_consumer(far, "B", fully_acked)
        finally:
            near.close()
            far.close()


def test_an_internal_subscriber_on_worker_1_gets_each_delivery_on_the_stream_subject(
        cluster: Cluster) -> None:
    near = connect(cluster.mesh.ports[0])
    got: list[tuple[bytes, bytes | None, bytes | None, bytes]] = []
    server1 = cluster.mesh.servers[1]

    def subscribe() -> InternalClient:
        client = InternalClient(server1, server1.global_account(), "test")
        client.subscribe(b"_INBOX.internal", lambda s, r, h, d: got.append((s, r, h, d)))
        return client

    internal = cluster.mesh.call(subscribe)
    try:
        make_stream(near)
        wait_for_interest(cluster, b"_INBOX.internal")
        near.send(b"PUB $JS.API.CONSUMER.MSG.NEXT.S.A _INBOX.internal 12\r\n{\"batch\":50}\r\n")
        deadline = time.monotonic() + DEADLINE_S
        while cluster.mesh.call(len, got) < 50:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        subjects = [subject for subject, _, _, _ in got]
        assert subjects == [b"s.%d" % (index % 4) for index in range(50)]
        assert all(reply is not None and reply.startswith(b"$JS.ACK.S.A.1.") for _, reply, _, _ in got)
        assert got[0][2] == b"NATS/1.0\r\nK: 0\r\n\r\n" and got[0][3] == b"NATS/1.0\r\nK: 0\r\n\r\nm000"
        assert got[1][2] is None and got[1][3].startswith(b"m001")
    finally:
        cluster.mesh.call(internal.close)
        near.close()


def wait_for_interest(cluster: Cluster, subject: bytes) -> None:
    account = cluster.mesh.servers[0].global_account()
    deadline = time.monotonic() + DEADLINE_S
    while not cluster.mesh.call(lambda: bool(account.sublist.match(subject)[0])):
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_a_subscriber_gone_mid_batch_leaves_the_rest_pending_and_the_next_client_served(
        cluster: Cluster) -> None:
    near = connect(cluster.mesh.ports[0])
    try:
        make_stream(near)
        leaving = connect(cluster.mesh.ports[1])
        leaving.send(b'SUB _INBOX.f 7\r\nPUB $JS.API.CONSUMER.MSG.NEXT.S.A _INBOX.f 13\r\n'
                     b'{"batch":100}\r\n')
        leaving.read_until(b"MSG s.")
        leaving.close()  # while the batch is on its way
        staying = connect(cluster.mesh.ports[1])
        try:
            staying.send(b'SUB _INBOX.g 8\r\nPUB $JS.API.CONSUMER.MSG.NEXT.S.A _INBOX.g 12\r\n'
                         b'{"batch":20}\r\n')
            rest = staying.read_until(b"m%03d" % (MSGS - 1)) + staying.read_until(b"\r\n")
            assert rest.count(b"MSG s.") == 20  # messages 101..120, in order
            assert re.findall(rb"m(\d{3})", rest) == [b"%03d" % index for index in range(100, MSGS)]
            info = request(near, "$JS.API.CONSUMER.INFO.S.A", {})
            assert info["num_ack_pending"] == MSGS
            assert info["delivered"]["stream_seq"] == MSGS  # type: ignore[index]
        finally:
            staying.close()
    finally:
        near.close()


def test_a_small_ring_slows_a_large_relayed_batch_but_loses_nothing(tmp_path: Path) -> None:
    for cluster in started(jetstream_options(tmp_path), ring_bytes=256 * 1024):
        near, far = connect(cluster.mesh.ports[0]), connect(cluster.mesh.ports[1])
        try:
            request(near, "$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"], "storage": "memory"})
            payload = b"y" * 1024
            total = 1500
            near.send(b"".join(b"PUB s.k %d\r\n%s%04d\r\n" % (len(payload) + 4, payload, i)
                               for i in range(total)))
            deadline = time.monotonic() + DEADLINE_S
            while stored(near) != total:
                assert time.monotonic() < deadline
            request(near, "$JS.API.CONSUMER.CREATE.S.B",
                    {"stream_name": "S", "config": {"durable_name": "B", "ack_policy": "none"}})
            far.send(b'SUB _INBOX.f 7\r\nPUB $JS.API.CONSUMER.MSG.NEXT.S.B _INBOX.f 14\r\n{"batch":1500}\r\n')
            got = far.read_until(b"y%04d\r\n" % (total - 1))
            assert re.findall(rb"y(\d{4})\r\n", got) == [b"%04d" % i for i in range(total)]
        finally:
            near.close()
            far.close()


def test_a_push_consumer_with_a_queue_group_delivers_each_message_to_one_member(cluster: Cluster) -> None:
    """Members on both workers and a plain subscriber on worker 1: the plain one gets every message,
    the group gets each message exactly once."""
    near = connect(cluster.mesh.ports[0])
    plain, member_far = connect(cluster.mesh.ports[1]), connect(cluster.mesh.ports[1])
    member_near = connect(cluster.mesh.ports[0])
    try:
        make_stream(near)
        for client in (member_far, member_near):
            client.send(b"SUB push.q grp 3\r\nPING\r\n")
            client.read_until(b"PONG\r\n")
        plain.send(b"SUB push.q 4\r\nPING\r\n")
        plain.read_until(b"PONG\r\n")
        wait_for_interest(cluster, b"push.q")
        request(near, "$JS.API.CONSUMER.CREATE.S.P", {"stream_name": "S", "config": {
            "durable_name": "P", "ack_policy": "none", "deliver_subject": "push.q", "deliver_group": "grp"}})
        seen = plain.read_until(b"m%03d" % (MSGS - 1))
        assert re.findall(rb"m(\d{3})", seen) == [b"%03d" % i for i in range(MSGS)]
        members: list[bytes] = []
        deadline = time.monotonic() + DEADLINE_S
        while True:
            members = []
            for client in (member_far, member_near):
                client.send(b"PING\r\n")
                members += re.findall(rb"m(\d{3})", client.read_until(b"PONG\r\n"))
            if len(members) >= MSGS or time.monotonic() > deadline:
                break
        assert sorted(members) == [b"%03d" % i for i in range(MSGS)]  # once each, none twice
    finally:
        for client in (near, plain, member_far, member_near):
            client.close()


def test_nats_py_fetch_and_ack_from_each_worker_matches_one_worker(tmp_path: Path) -> None:
    """nats-py fetches (ack explicit and ack all) from a client on each worker of two, and on one
    worker alone: the same messages, the same metadata, the same consumer state afterwards."""
    outcomes = []
    with InProcessServer(jetstream_dir=str(tmp_path / "one")) as single:
        outcomes.append(asyncio.run(asyncio.wait_for(_fetch_and_ack(single.url, single.url), 30)))
    for cluster in started(jetstream_options(tmp_path / "two")):
        outcomes.append(asyncio.run(asyncio.wait_for(
            _fetch_and_ack(cluster.mesh.url(0), cluster.mesh.url(1)), 30)))
        outcomes.append(asyncio.run(asyncio.wait_for(
            _fetch_and_ack(cluster.mesh.url(1), cluster.mesh.url(0)), 30)))
    assert outcomes[0] == outcomes[1] == outcomes[2]


async def _fetch_and_ack(setup_url: str, client_url: str) -> list[object]:
    setup = await nats.connect(setup_url, allow_reconnect=False)
    nc = await nats.connect(client_url, allow_reconnect=False)
    seen: list[object] = []
    try:
        js_setup, js = setup.jetstream(timeout=5), nc.jetstream(timeout=5)
        await js_setup.add_stream(name="F", subjects=["f.>"], storage="file")
        for index in range(300):
            headers = {"I": str(index)} if index % 5 else None
            await js_setup.publish(f"f.{index % 3}", b"%d" % index, headers=headers)
        for name, policy in (("EX", AckPolicy.EXPLICIT), ("ALL", AckPolicy.ALL)):
            await js_setup.add_consumer("F", ConsumerConfig(durable_name=name, ack_policy=policy))
            sub = await js.pull_subscribe_bind(name, "F")
            got = []
            while len(got) < 300:
                msgs = await sub.fetch(120, timeout=5)
                got += msgs
                if policy == AckPolicy.EXPLICIT:
                    for msg in msgs:
                        await msg.ack()
                else:
                    await msgs[-1].ack()
            await nc.flush()
            seen.append([(m.subject, m.data, dict(m.headers or {}), m.metadata.sequence.stream,
                          m.metadata.sequence.consumer, m.metadata.num_pending) for m in got])
            deadline = time.monotonic() + DEADLINE_S
            while True:
                info = await js.consumer_info("F", name)
                if info.num_ack_pending == 0 or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.01)
            seen.append((info.delivered.stream_seq, info.ack_floor.stream_seq, info.num_ack_pending,
                         info.num_pending, info.num_redelivered))
        await js_setup.delete_stream("F")  # the next run on these workers starts afresh
    finally:
        await nc.close()
        await setup.close()
    return seen


def test_a_push_consumer_with_flow_control_and_heartbeats_delivers_in_order_to_worker_1(
        cluster: Cluster) -> None:
    """nats-py answers the flow-control requests that cross with the relayed messages; every
    message arrives once, in stream order, and the consumer ends fully acknowledged."""

    async def scenario() -> None:
        setup = await nats.connect(cluster.mesh.url(0), allow_reconnect=False)
        nc = await nats.connect(cluster.mesh.url(1), allow_reconnect=False)
        try:
            js_setup, js = setup.jetstream(timeout=5), nc.jetstream(timeout=5)
            await js_setup.add_stream(name="P", subjects=["p.>"], storage="memory")
            for index in range(PUSHED):  # past two flow-control requests (JS_FLOW_CONTROL_MSGS)
                await setup.publish(f"p.{index % 2}", b"%d" % index)
            deadline = time.monotonic() + DEADLINE_S
            while (await js_setup.stream_info("P")).state.messages < PUSHED:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.01)
            sub = await js.subscribe("p.>", durable="PUSH", flow_control=True, idle_heartbeat=0.5,
                                     manual_ack=True)
            got = []
            while len(got) < PUSHED:
                msg = await sub.next_msg(timeout=5)
                got.append(int(msg.data))
                await msg.ack()
            assert got == list(range(PUSHED))
            await nc.flush()
            deadline = time.monotonic() + DEADLINE_S
            while (await js.consumer_info("P", "PUSH")).num_ack_pending:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.01)
        finally:
            await nc.close()
            await setup.close()

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_a_client_on_worker_1_that_stops_reading_is_a_slow_consumer_and_its_batch_stays_pending(
        tmp_path: Path) -> None:
    """Nothing relayed is dropped silently: a client that stops reading is closed as a slow
    consumer (as nats-server does), and what it did not acknowledge stays pending at the consumer."""
    options = jetstream_options(tmp_path)
    options.max_pending = 256 * 1024
    for cluster in started(options):
        near, far = connect(cluster.mesh.ports[0]), connect(cluster.mesh.ports[1])
        try:
            request(near, "$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"], "storage": "memory"})
            payload = b"z" * 4096
            total = 3000
            near.send(b"".join(b"PUB s.k %d\r\n%s\r\n" % (len(payload), payload) for _ in range(total)))
            deadline = time.monotonic() + DEADLINE_S
            while stored(near) != total:
                assert time.monotonic() < deadline
            request(near, "$JS.API.CONSUMER.CREATE.S.B",
                    {"stream_name": "S", "config": {"durable_name": "B", "ack_policy": "explicit",
                                                    "max_ack_pending": total}})
            far.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            far.send(b'SUB _INBOX.f 7\r\nPUB $JS.API.CONSUMER.MSG.NEXT.S.B _INBOX.f 14\r\n{"batch":3000}\r\n')
            server1 = cluster.mesh.servers[1]
            deadline = time.monotonic() + DEADLINE_S
            while not cluster.mesh.call(lambda: server1.slow_consumers):
                assert time.monotonic() < deadline, "the client that does not read was never closed"
                time.sleep(0.01)
            wait_consumer(near, "B", lambda info: info["num_ack_pending"] == total)
        finally:
            near.close()
            far.close()


def test_a_subscription_with_max_msgs_on_worker_1_gets_exactly_as_many_as_on_worker_0(
        cluster: Cluster) -> None:
    """UNSUB <sid> 7 with a batch of 20: the record-by-record path stops at 7, as worker 0 does."""
    near, far = connect(cluster.mesh.ports[0]), connect(cluster.mesh.ports[1])
    try:
        make_stream(near)
        got = []
        for client, consumer in ((near, b"A"), (far, b"B")):
            client.send(b'SUB _INBOX.m 5\r\nUNSUB 5 7\r\nPUB $JS.API.CONSUMER.MSG.NEXT.S.%s _INBOX.m 12\r\n'
                        b'{"batch":20}\r\n' % consumer)
            deadline = time.monotonic() + DEADLINE_S
            seen = b""
            while seen.count(b"MSG s.") < 7:  # PING until the 7 arrived, then once more for any extra
                assert time.monotonic() < deadline
                client.send(b"PING\r\n")
                seen += client.read_until(b"PONG\r\n")
            client.send(b"PING\r\n")
            seen += client.read_until(b"PONG\r\n")
            got.append(seen.replace(b"PONG\r\n", b""))
        assert got[0].count(b"MSG s.") == 7
        assert got[1] == got[0].replace(b"$JS.ACK.S.A.", b"$JS.ACK.S.B.")
    finally:
        near.close()
        far.close()
