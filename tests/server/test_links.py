"""Core NATS across workers: clients on different workers see one server (rings and socketpairs)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import nats
import pytest
from nats.errors import NoRespondersError

from appliance import native
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.server.links import (
    append_record,
    append_record_py,
    decode_interest,
    decode_records,
    decode_records_py,
    KIND_HELLO,
    encode_interest,
)
from appliance.fabric.sync import encode_pid
from appliance.testing.inproc_mesh import InProcessMesh

TRANSPORTS = ["socketpair"] + (["ring"] if native.ENABLED else [])


@pytest.fixture(params=TRANSPORTS)
def mesh(request: pytest.FixtureRequest) -> Iterator[InProcessMesh]:
    with InProcessMesh(2, transport=request.param) as running:
        yield running


def run(coro: object) -> None:
    asyncio.run(asyncio.wait_for(coro, 30))  # type: ignore[arg-type]


def wait_for_interest(mesh: InProcessMesh, worker: int, subject: str, count: int = 1) -> None:
    """Poll until `worker` routes `subject` to at least `count` subscriptions (interest crossed the link)."""
    server = mesh.servers[worker]
    deadline = time.monotonic() + 10

    def matches() -> int:
        plain, queues = server.global_account().sublist.match(subject.encode())
        return len(plain) + sum(len(g) for g in queues)

    while mesh.call(matches) < count:
        assert time.monotonic() < deadline, f"no interest in {subject} on worker {worker}"
        time.sleep(0.01)


def test_frame_codecs_round_trip() -> None:
    frame = bytearray()
    append_record(frame, b"$G", b"a.b", b"r", b"q", 12, b"NATS/1.0\r\n\r\nhi")
    append_record(frame, b"A", b"s", None, None, -1, b"")
    assert decode_records(bytes(frame)) == [
        (b"$G", b"a.b", b"r", b"q", b"NATS/1.0\r\n\r\n", b"NATS/1.0\r\n\r\nhi"),
        (b"A", b"s", None, None, None, b""),
    ]
    assert decode_interest(encode_interest(b"A", b"x.>", None)) == (b"A", b"x.>", None)
    assert decode_interest(encode_interest(b"A", b"x", b"g")) == (b"A", b"x", b"g")


def test_pub_on_one_worker_sub_on_another(mesh: InProcessMesh) -> None:
    async def scenario() -> None:
        sub_nc = await nats.connect(mesh.url(1))
        pub_nc = await nats.connect(mesh.url(0))
        sub = await sub_nc.subscribe("cross.*")
        await sub_nc.flush()
        await asyncio.to_thread(wait_for_interest, mesh, 0, "cross.a")
        for i in range(100):
            await pub_nc.publish("cross.a", str(i).encode(), headers={"N": str(i)} if i % 2 else None)
        got = [await sub.next_msg(timeout=5) for _ in range(100)]
        assert [m.data for m in got] == [str(i).encode() for i in range(100)]
        assert got[1].headers == {"N": "1"}
        await sub_nc.close()
        await pub_nc.close()
    run(scenario())


def test_queue_group_exactly_once_across_workers(mesh: InProcessMesh) -> None:
    async def scenario() -> None:
        a = await nats.connect(mesh.url(0))
        b = await nats.connect(mesh.url(1))
        got = {"a": 0, "b": 0}

        async def on_a(_m: object) -> None:
            got["a"] += 1

        async def on_b(_m: object) -> None:
            got["b"] += 1

        await a.subscribe("jobs", queue="workers", cb=on_a)
        await b.subscribe("jobs", queue="workers", cb=on_b)
        await a.flush()
        await b.flush()
        await asyncio.to_thread(wait_for_interest, mesh, 0, "jobs", 2)
        await asyncio.to_thread(wait_for_interest, mesh, 1, "jobs", 2)
        for _ in range(300):
            await a.publish("jobs", b"j")
            await b.publish("jobs", b"j")
        await a.flush()
        await b.flush()
        deadline = time.monotonic() + 10
        while got["a"] + got["b"] < 600 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.1)
        assert got["a"] + got["b"] == 600
        assert got["a"] > 0 and got["b"] > 0
        await a.close()
        await b.close()
    run(scenario())


def test_request_reply_and_no_responders_across_workers(mesh: InProcessMesh) -> None:
    async def scenario() -> None:
        service = await nats.connect(mesh.url(1))
        client = await nats.connect(mesh.url(0))

        async def echo(msg: object) -> None:
            await msg.respond(b"pong")  # type: ignore[attr-defined]

        await service.subscribe("svc.ping", cb=echo)
        await service.flush()
        await asyncio.to_thread(wait_for_interest, mesh, 0, "svc.ping")
        assert (await client.request("svc.ping", b"", timeout=5)).data == b"pong"
        with pytest.raises(NoRespondersError):
            await client.request("svc.nobody", b"", timeout=5)
        await service.close()
        await client.close()
    run(scenario())


def test_unsubscribe_removes_remote_interest(mesh: InProcessMesh) -> None:
    async def scenario() -> None:
        nc = await nats.connect(mesh.url(1))
        first = await nc.subscribe("gone")
        second = await nc.subscribe("gone")
        await nc.flush()
        await asyncio.to_thread(wait_for_interest, mesh, 0, "gone")
        plain_refs = mesh.call(lambda: len(mesh.servers[0].global_account().sublist.match(b"gone")[0]))
        assert plain_refs == 1  # one entry for the sibling, however many subscriptions it has
        await first.unsubscribe()
        await second.unsubscribe()
        await nc.flush()
        deadline = time.monotonic() + 10
        while mesh.call(lambda: mesh.servers[0].global_account().sublist.match(b"gone")[0]):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)
        await nc.close()
    run(scenario())


def test_full_link_is_backpressure_not_loss() -> None:
    transport = "ring" if native.ENABLED else "socketpair"
    with InProcessMesh(2, transport=transport, ring_bytes=64 * 1024) as mesh:
        async def scenario() -> None:
            sub_nc = await nats.connect(mesh.url(1), pending_size=64 * 1024 * 1024)
            pub_nc = await nats.connect(mesh.url(0))
            sub = await sub_nc.subscribe("flood", pending_msgs_limit=100_000)
            await sub_nc.flush()
            await asyncio.to_thread(wait_for_interest, mesh, 0, "flood")
            payload = b"x" * 1000
            for i in range(5000):
                await pub_nc.publish("flood", payload + str(i).encode())
            await pub_nc.flush()
            seen = [await sub.next_msg(timeout=10) for _ in range(5000)]
            assert [m.data[1000:] for m in seen] == [str(i).encode() for i in range(5000)]
            await sub_nc.close()
            await pub_nc.close()
        run(scenario())


def test_monitoring_covers_every_worker(mesh: InProcessMesh) -> None:
    """/varz, /connz and /subsz answered by worker 0 count the clients of worker 1 too."""
    from appliance.server.monitor.app import MonitorApp
    from appliance.server.monitor_view import ServerMonitorView

    async def scenario() -> None:
        first = await nats.connect(mesh.url(0), name="on-0")
        second = await nats.connect(mesh.url(1), name="on-1")
        await second.subscribe("only.on.one")
        await first.subscribe("only.on.zero")
        await first.flush()
        await second.flush()
        await asyncio.to_thread(wait_for_interest, mesh, 0, "only.on.one")
        listener = __import__("socket").socket()
        try:
            async def ask(path: str, query: str) -> dict[str, object]:
                view = ServerMonitorView(mesh.servers[0], listener, mesh.fabrics[0])
                await view.refresh()
                import json
                return json.loads(MonitorApp(view).respond(path, query).body)

            def on_loop(path: str, query: str) -> dict[str, object]:
                assert mesh._loop is not None
                return asyncio.run_coroutine_threadsafe(ask(path, query), mesh._loop).result(10)

            varz = await asyncio.to_thread(on_loop, "/varz", "")
            assert varz["connections"] == 2 and varz["subscriptions"] == 2
            connz = await asyncio.to_thread(on_loop, "/connz", "subs=1")
            assert sorted(c["name"] for c in connz["connections"]) == ["on-0", "on-1"]
            subsz = await asyncio.to_thread(on_loop, "/subsz", "")
            assert subsz["num_subscriptions"] == 2
        finally:
            listener.close()
        await first.close()
        await second.close()
    run(scenario())


def test_connz_pages_over_every_workers_connections_with_the_full_total(mesh: InProcessMesh) -> None:
    """Each sibling sends only the first offset+limit of its connections in the page's order (and its
    count): the page and `total` are those of all connections of every worker, as one server's."""
    from appliance.server.monitor.app import MonitorApp
    from appliance.server.monitor_view import ServerMonitorView

    async def scenario() -> None:
        for worker in (0, 1):
            for i in range(6):
                client = await nats.connect(mesh.url(worker), name=f"w{worker}-{i}")
                for _ in range(i if worker else 0):
                    await client.publish("x", b"")  # on worker 1, more messages from later clients
                await client.flush()
                await client.close()

        async def ask(path: str, query: str) -> dict[str, object]:
            listener = __import__("socket").socket()
            try:
                view = ServerMonitorView(mesh.servers[0], listener, mesh.fabrics[0])
                app = MonitorApp(view)
                await view.refresh(app.needs(path, query))
                import json
                return json.loads(app.respond(path, query).body)  # type: ignore[no-any-return]
            finally:
                listener.close()

        def on_loop(path: str, query: str) -> dict[str, object]:
            assert mesh._loop is not None
            return asyncio.run_coroutine_threadsafe(ask(path, query), mesh._loop).result(10)

        def closed_total() -> int:
            return int(on_loop("/connz", "state=closed&limit=1")["total"])  # type: ignore[call-overload]

        deadline = time.monotonic() + 10
        while await asyncio.to_thread(closed_total) < 12:
            assert time.monotonic() < deadline, "closed connections not recorded"
            await asyncio.sleep(0.01)
        everything = await asyncio.to_thread(on_loop, "/connz", "state=closed&limit=100")
        all_cids = sorted(c["cid"] for c in everything["connections"])  # type: ignore[union-attr,index]
        assert len(all_cids) == 12
        page = await asyncio.to_thread(on_loop, "/connz", "state=closed&offset=2&limit=4")
        assert page["total"] == 12 and page["num_connections"] == 4
        assert [c["cid"] for c in page["connections"]] == all_cids[2:6]  # type: ignore[union-attr,index]
        busiest = await asyncio.to_thread(on_loop, "/connz", "state=closed&sort=msgs_from&limit=2")
        assert busiest["total"] == 12
        assert [c["name"] for c in busiest["connections"]] == ["w1-5", "w1-4"]  # type: ignore[union-attr,index]

    run(scenario())


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_connz_counts_every_closed_connection_of_a_sibling_even_beyond_a_frame(transport: str) -> None:
    """With 64 KiB links a frame holds ~40 connections; a sibling with 150 closed ones once cut its list
    to fit (wrong `total`, missing connections). Now it sends the page's share and its count."""
    from appliance.server.monitor.app import MonitorApp
    from appliance.server.monitor_view import ServerMonitorView

    with InProcessMesh(2, transport=transport, ring_bytes=64 * 1024) as small:  # type: ignore[arg-type]
        async def scenario() -> None:
            for _ in range(150):
                client = await nats.connect(small.url(1), name="churn-with-a-longish-name-to-fill-frames")
                await client.close()

            async def ask(query: str) -> dict[str, object]:
                listener = __import__("socket").socket()
                try:
                    view = ServerMonitorView(small.servers[0], listener, small.fabrics[0])
                    app = MonitorApp(view)
                    await view.refresh(app.needs("/connz", query))
                    import json
                    return json.loads(app.respond("/connz", query).body)  # type: ignore[no-any-return]
                finally:
                    listener.close()

            def on_loop(query: str) -> dict[str, object]:
                assert small._loop is not None
                return asyncio.run_coroutine_threadsafe(ask(query), small._loop).result(10)

            def recorded() -> int:
                return len(small.call(lambda: list(small.servers[1].closed_clients)))

            deadline = time.monotonic() + 10
            while await asyncio.to_thread(recorded) < 150:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.01)
            cids = sorted(small.call(lambda: [c.cid for c in small.servers[1].closed_clients]))
            page = await asyncio.to_thread(on_loop, "state=closed&limit=10&offset=5")
            assert page["total"] == 150
            assert [c["cid"] for c in page["connections"]] == cids[5:15]  # type: ignore[union-attr,index]

        run(scenario())


def test_pong_means_every_worker_knows_the_subscription(mesh: InProcessMesh) -> None:
    """SUB + PING on worker 1, then at once PUB on worker 0: delivered, as on a single server."""
    from appliance.testing.rawclient import RawClient

    subscriber = RawClient(mesh.ports[1])
    publisher = RawClient(mesh.ports[0])
    try:
        subscriber.send(b'CONNECT {"verbose":false}\r\nPING\r\n')
        subscriber.read_until(b"PONG\r\n")
        publisher.send(b'CONNECT {"verbose":false}\r\nPING\r\n')
        publisher.read_until(b"PONG\r\n")
        for i in range(50):
            subscriber.send(b"SUB race.%d %d\r\nPING\r\n" % (i, i))
            subscriber.read_until(b"PONG\r\n")
            publisher.send(b"PUB race.%d 2\r\nok\r\n" % i)
            assert subscriber.read_until(b"ok\r\n") == b"MSG race.%d %d 2\r\nok\r\n" % (i, i)
            subscriber.send(b"UNSUB %d\r\nPING\r\n" % i)
            subscriber.read_until(b"PONG\r\n")
    finally:
        subscriber.close()
        publisher.close()


records = st.lists(st.tuples(st.binary(min_size=1, max_size=8), st.binary(min_size=1, max_size=20),
                             st.one_of(st.none(), st.binary(min_size=1, max_size=10)),
                             st.one_of(st.none(), st.binary(min_size=1, max_size=5)),
                             st.integers(min_value=-1, max_value=6), st.binary(max_size=40)), max_size=6)


@settings(max_examples=200, deadline=None)
@given(items=records, cut=st.integers(min_value=1, max_value=30))
def test_native_and_python_record_codecs_agree(
        items: list[tuple[bytes, bytes, bytes | None, bytes | None, int, bytes]], cut: int) -> None:
    native_frame, python_frame = bytearray(), bytearray()
    boundaries = {0}
    for account, subject, reply, queue, header_size, data in items:
        header_size = min(header_size, len(data))
        append_record(native_frame, account, subject, reply, queue, header_size, data)
        append_record_py(python_frame, account, subject, reply, queue, header_size, data)
        boundaries.add(len(python_frame))
    assert native_frame == python_frame
    decoded = decode_records_py(bytes(python_frame))
    assert decode_records(bytes(native_frame)) == decoded
    assert [(a, s, r, q, d) for a, s, r, q, _, d in decoded] == [(a, s, r, q, d) for a, s, r, q, _, d in items]
    truncated = bytes(python_frame[:-min(cut, len(python_frame))])
    if len(truncated) not in boundaries:  # a frame cut inside a record is refused by both
        with pytest.raises(ValueError):
            decode_records_py(truncated)
        with pytest.raises(ValueError):
            decode_records(truncated)


def test_auto_unsubscribe_holds_across_a_batch_from_another_worker(mesh: InProcessMesh) -> None:
    """UNSUB 1 3 on worker 1; a burst of 10 from worker 0 arrives in one batch: exactly 3 delivered."""
    from appliance.testing.rawclient import RawClient

    subscriber = RawClient(mesh.ports[1])
    publisher = RawClient(mesh.ports[0])
    try:
        subscriber.send(b'CONNECT {"verbose":false}\r\nSUB burst 1\r\nUNSUB 1 3\r\nPING\r\n')
        subscriber.read_until(b"PONG\r\n")
        publisher.send(b'CONNECT {"verbose":false}\r\n' + b"PUB burst 1\r\nx\r\n" * 10 + b"PING\r\n")
        publisher.read_until(b"PONG\r\n")
        subscriber.send(b"SUB probe 2\r\nPING\r\n")
        # the burst was in the ring before the publisher's PONG; it is taken before our PING
        assert subscriber.read_until(b"PONG\r\n") == b"MSG burst 1 1\r\nx\r\n" * 3 + b"PONG\r\n"
        publisher.send(b"PUB burst 1\r\nz\r\nPUB probe 1\r\ny\r\n")
        assert subscriber.read_until(b"MSG probe 2 1\r\ny\r\n") == b"MSG probe 2 1\r\ny\r\n"
    finally:
        subscriber.close()
        publisher.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_sibling_restart_does_not_leave_the_other_siblings_an_ack_behind(transport: str) -> None:
    """Worker 0 answers worker 1's HELLO with its whole interest set, which worker 2 never sees. The
    set must not take new interest numbers: worker 2 could never ACK them, and every PONG of
    worker 0 waited for worker 2's next interest change (it stalled the socketpair start-up)."""
    import os

    from appliance.testing.rawclient import RawClient

    with InProcessMesh(3, transport=transport) as mesh:
        client = RawClient(mesh.ports[0])
        try:
            client.send(b'CONNECT {"verbose":false}\r\nSUB held 1\r\nSUB held q 2\r\nPING\r\n')
            client.read_until(b"PONG\r\n")
            wait_for_interest(mesh, 2, "held", 2)

            def hello_from_worker_1() -> None:
                fabric = mesh.fabrics[0]
                fabric.on_frames(fabric.peers[1].link, [(KIND_HELLO, encode_pid(os.getpid()))])

            mesh.call(hello_from_worker_1)
            deadline = time.monotonic() + 5
            while not mesh.call(mesh.fabrics[0].interest_synced):
                assert time.monotonic() < deadline, "worker 0 waits for an ACK worker 2 can never send"
                time.sleep(0.01)
            client.send(b"PING\r\n")
            client.read_until(b"PONG\r\n")
        finally:
            client.close()
