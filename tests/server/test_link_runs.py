"""Messages in runs: a burst of PUBs for one sibling becomes records in one call, the receiving
worker delivers a run of records with one subject to each subscriber at once, and a burst for one
local subscriber becomes its MSG lines in one call.
Native and Python twins agree byte for byte; across workers every client sees what one server
would send (headers, auto-unsubscribe, permissions, interleaved subjects)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance import native
from appliance.config.options import Permissions, ServerOptions, SubjectPermission, User
from appliance.protocol import wire
from appliance.protocol.client_parser import OP_HPUB, OP_PING, OP_PUB
from appliance.server.links import (
    append_msgs,
    append_msgs_py,
    append_pub_records,
    append_pub_records_py,
    append_record_py,
    decode_records_py,
    record_runs,
    record_runs_py,
)
from appliance.protocol.route_parser import append_rmsg
from appliance.server.client import append_pub_msgs, append_pub_msgs_py, count_pubs, count_pubs_py
from appliance.testing.inproc import InProcessServer
from appliance.testing.inproc_mesh import InProcessMesh
from appliance.testing.natsserver import NatsServer
from appliance.testing.rawclient import RawClient

TRANSPORTS = ["socketpair"] + (["ring"] if native.ENABLED else [])

names = st.sampled_from([b"$G", b"A"])
subjects = st.sampled_from([b"a", b"a.b", b"c"])
replies = st.one_of(st.none(), st.sampled_from([b"r", b"_INBOX.x"]))
queues = st.one_of(st.none(), st.sampled_from([b"q"]))
records = st.lists(st.tuples(names, subjects, replies, queues, st.integers(min_value=-1, max_value=5),
                             st.binary(max_size=24)), max_size=12)


def frame_of(items: list[tuple[bytes, bytes, bytes | None, bytes | None, int, bytes]]) -> bytes:
    out = bytearray()
    for account, subject, reply, queue, header_size, data in items:
        append_record_py(out, account, subject, reply, queue, min(header_size, len(data)), data)
    return bytes(out)


@settings(max_examples=200, deadline=None)
@given(items=records)
def test_runs_cover_the_frame_in_order_and_split_where_the_routing_key_changes(
        items: list[tuple[bytes, bytes, bytes | None, bytes | None, int, bytes]]) -> None:
    payload = frame_of(items)
    runs = record_runs_py(payload)
    assert record_runs(payload) == runs
    rebuilt = []
    position = 0
    for account, subject, queue, start, end, count in runs:
        assert start == position
        in_run = decode_records_py(payload[start:end])
        assert len(in_run) == count >= 1
        assert {(r[0], r[1], r[3]) for r in in_run} == {(account, subject, queue)}
        rebuilt += in_run
        position = end
    assert position == len(payload)
    assert rebuilt == decode_records_py(payload)
    keys = [run[:3] for run in runs]
    assert all(a != b for a, b in zip(keys, keys[1:]))  # adjacent runs differ


@settings(max_examples=200, deadline=None)
@given(items=records, headers=st.booleans(), limit=st.integers(min_value=0, max_value=14),
       tail=st.sampled_from([b" 1 ", b" 22 "]))
def test_append_msgs_writes_what_deliver_would_one_by_one(
        items: list[tuple[bytes, bytes, bytes | None, bytes | None, int, bytes]], headers: bool, limit: int,
        tail: bytes) -> None:
    payload = frame_of(items)
    expected = bytearray(b"prefix")
    expected_bytes = 0
    taken = decode_records_py(payload)[:limit]
    for _, subject, reply, _, header, data in taken:
        if header is not None and not headers:  # a client without headers gets the payload alone
            data, header = data[len(header):], None
        wire.append_msg(expected, subject, tail, reply, -1 if header is None else len(header), data)
        expected_bytes += len(data)
    used = len(frame_of(items[:limit]))
    for implementation in (append_msgs_py, append_msgs):
        out = bytearray(b"prefix")
        assert implementation(out, payload, 0, len(payload), tail, headers, limit) == (len(taken), used,
                                                                                      expected_bytes)
        assert out == expected


def test_append_msgs_refuses_a_bad_range_or_a_cut_record_and_appends_nothing() -> None:
    payload = frame_of([(b"$G", b"a", None, None, -1, b"hello")])
    for implementation in (append_msgs_py, append_msgs):
        out = bytearray()
        with pytest.raises(ValueError):
            implementation(out, payload, 0, len(payload) + 1, b" 1 ", True, 5)
        with pytest.raises(ValueError):
            implementation(out, payload, 0, len(payload) - 1, b" 1 ", True, 5)
        assert out == bytearray()
        assert implementation(out, payload, 0, len(payload), b" 1 ", True, 0) == (0, 0, 0)


events = st.lists(st.one_of(
    st.tuples(st.just(OP_PUB), subjects, replies, st.binary(max_size=24)),
    st.tuples(st.just(OP_HPUB), subjects, replies, st.just(b"NATS/1.0\r\n\r\n"), st.just(b"NATS/1.0\r\n\r\nx")),
    st.tuples(st.just(OP_PING)),
), min_size=1, max_size=12)


@settings(max_examples=200, deadline=None)
@given(burst=events, start=st.integers(min_value=0, max_value=11), bytes_max=st.integers(min_value=1, max_value=400))
def test_append_pub_records_takes_the_run_of_pubs_with_one_subject(
        burst: list[tuple[object, ...]], start: int, bytes_max: int) -> None:
    start = min(start, len(burst) - 1)
    subject = burst[start][1] if len(burst[start]) > 1 else b"a"
    expected = bytearray(b"xx")
    count = 0
    data_bytes = 0
    for event in burst[start:]:
        if len(expected) >= bytes_max or event[0] != OP_PUB or len(event) != 4 or event[1] != subject:
            break
        append_record_py(expected, b"$G", subject, event[2], None, -1, event[3])  # type: ignore[arg-type]
        count += 1
        data_bytes += len(event[3])  # type: ignore[arg-type]
    for implementation in (append_pub_records_py, append_pub_records):
        out = bytearray(b"xx")
        assert implementation(out, burst, start, b"$G", subject, bytes_max) == (count, data_bytes)  # type: ignore[arg-type]
        assert out == expected


# --- across workers ---------------------------------------------------------------------------------


@pytest.fixture(params=TRANSPORTS)
def mesh(request: pytest.FixtureRequest) -> Iterator[InProcessMesh]:
    with InProcessMesh(2, transport=request.param) as running:
        yield running


def wait_for_interest(mesh: InProcessMesh, worker: int, subject: bytes, count: int) -> None:
    server = mesh.servers[worker]
    deadline = time.monotonic() + 10

    def matches() -> int:
        plain, queues = server.global_account().sublist.match(subject)
        return len(plain) + sum(len(g) for g in queues)

    while mesh.call(matches) < count:
        assert time.monotonic() < deadline, f"no interest in {subject!r} on worker {worker}"
        time.sleep(0.01)


def test_a_burst_reaches_every_subscriber_of_the_other_worker_in_order(mesh: InProcessMesh) -> None:
    """Interleaved subjects, a reply, headers; one subscriber with headers, one without, one that
    auto-unsubscribes after 3: each gets exactly what a single server would send it."""
    with_headers, without_headers, limited = (RawClient(mesh.ports[1]) for _ in range(3))
    publisher = RawClient(mesh.ports[0])
    try:
        with_headers.send(b'CONNECT {"verbose":false,"headers":true}\r\nSUB a 1\r\nSUB b 2\r\nPING\r\n')
        with_headers.read_until(b"PONG\r\n")
        without_headers.send(b'CONNECT {"verbose":false}\r\nSUB a 7\r\nPING\r\n')
        without_headers.read_until(b"PONG\r\n")
        limited.send(b'CONNECT {"verbose":false}\r\nSUB a 9\r\nUNSUB 9 3\r\nPING\r\n')
        limited.read_until(b"PONG\r\n")
        wait_for_interest(mesh, 0, b"a", 1)
        wait_for_interest(mesh, 0, b"b", 1)
        burst = (b"PUB a 2\r\na1\r\nPUB a r.1 2\r\na2\r\nHPUB a 12 14\r\nNATS/1.0\r\n\r\na3\r\n"
                 b"PUB b 2\r\nb1\r\nPUB a 2\r\na4\r\nPUB a 2\r\na5\r\n")
        publisher.send(b'CONNECT {"verbose":false,"headers":true}\r\n' + burst + b"PING\r\n")
        publisher.read_until(b"PONG\r\n")
        assert with_headers.read_until(b"a5\r\n") == (
            b"MSG a 1 2\r\na1\r\nMSG a 1 r.1 2\r\na2\r\nHMSG a 1 12 14\r\nNATS/1.0\r\n\r\na3\r\n"
            b"MSG b 2 2\r\nb1\r\nMSG a 1 2\r\na4\r\nMSG a 1 2\r\na5\r\n")
        assert without_headers.read_until(b"a5\r\n") == (
            b"MSG a 7 2\r\na1\r\nMSG a 7 r.1 2\r\na2\r\nMSG a 7 2\r\na3\r\nMSG a 7 2\r\na4\r\nMSG a 7 2\r\na5\r\n")
        limited.send(b"PING\r\n")
        assert limited.read_until(b"PONG\r\n") == b"MSG a 9 2\r\na1\r\nMSG a 9 r.1 2\r\na2\r\nMSG a 9 2\r\na3\r\nPONG\r\n"
    finally:
        for client in (with_headers, without_headers, limited, publisher):
            client.close()


def test_subscribe_permissions_filter_a_run_from_another_worker() -> None:
    """A subscriber whose permissions deny part of its wildcard gets only the allowed subjects of a
    burst from the other worker, as from one nats-server."""
    options = ServerOptions()
    options.authorization.users = [
        User(username="sub", password="s", permissions=Permissions(
            subscribe=SubjectPermission(allow=["a.>"], deny=["a.secret"]))),
        User(username="pub", password="p"),
    ]
    with InProcessMesh(2, transport=TRANSPORTS[-1], options=options) as mesh:
        subscriber = RawClient(mesh.ports[1])
        publisher = RawClient(mesh.ports[0])
        try:
            subscriber.send(b'CONNECT {"verbose":false,"user":"sub","pass":"s"}\r\nSUB a.* 1\r\nPING\r\n')
            subscriber.read_until(b"PONG\r\n")
            wait_for_interest(mesh, 0, b"a.x", 1)
            publisher.send(b'CONNECT {"verbose":false,"user":"pub","pass":"p"}\r\n'
                           + b"PUB a.x 1\r\n1\r\nPUB a.secret 1\r\n2\r\nPUB a.secret 1\r\n3\r\nPUB a.y 1\r\n4\r\nPING\r\n")
            publisher.read_until(b"PONG\r\n")
            assert subscriber.read_until(b"MSG a.y 1 1\r\n4\r\n") == b"MSG a.x 1 1\r\n1\r\nMSG a.y 1 1\r\n4\r\n"
        finally:
            subscriber.close()
            publisher.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("ring_bytes", [64 * 1024, 8 * 1024 * 1024])
def test_a_large_burst_crosses_in_many_frames_without_loss(transport: str, ring_bytes: int) -> None:
    """More than one frame's worth of one subject (several flushes of the records) in a few reads: all
    arrive, in order — with a 64 KiB link the burst fills it many times over (backlog, the
    publisher paused until the link drains), never a dropped message."""
    with InProcessMesh(2, transport=transport, ring_bytes=ring_bytes) as mesh:
        burst_across(mesh)


def burst_across(mesh: InProcessMesh) -> None:
    subscriber = RawClient(mesh.ports[1], timeout_s=20)
    publisher = RawClient(mesh.ports[0], timeout_s=20)
    try:
        subscriber.send(b'CONNECT {"verbose":false}\r\nSUB big 1\r\nPING\r\n')
        subscriber.read_until(b"PONG\r\n")
        wait_for_interest(mesh, 0, b"big", 1)
        payload = b"y" * 1000
        count = 2000  # ~2 MB: several LINK_RECORDS_FLUSH_BYTES frames
        publisher.send(b'CONNECT {"verbose":false}\r\n'
                       + b"".join(b"PUB big %d\r\n%04d%s\r\n" % (1004, i, payload) for i in range(count))
                       + b"PING\r\n")
        publisher.read_until(b"PONG\r\n")
        last = b"MSG big 1 1004\r\n%04d%s\r\n" % (count - 1, payload)
        got = subscriber.read_until(last)
        assert got == b"".join(b"MSG big 1 1004\r\n%04d%s\r\n" % (i, payload) for i in range(count))
    finally:
        subscriber.close()
        publisher.close()


def test_counters_count_every_message_of_a_run(mesh: InProcessMesh) -> None:
    subscriber = RawClient(mesh.ports[1])
    publisher = RawClient(mesh.ports[0])
    try:
        subscriber.send(b'CONNECT {"verbose":false}\r\nSUB n 1\r\nPING\r\n')
        subscriber.read_until(b"PONG\r\n")
        wait_for_interest(mesh, 0, b"n", 1)
        publisher.send(b'CONNECT {"verbose":false}\r\n' + b"PUB n 3\r\nabc\r\n" * 10 + b"PING\r\n")
        publisher.read_until(b"PONG\r\n")
        subscriber.read_until(b"MSG n 1 3\r\nabc\r\n" * 10)

        def totals(worker: int) -> tuple[int, int, int, int]:
            return mesh.servers[worker].totals()

        in_msgs, in_bytes, _, _ = mesh.call(lambda: totals(0))
        _, _, out_msgs, out_bytes = mesh.call(lambda: totals(1))
        assert (in_msgs, in_bytes) == (10, 30)
        assert (out_msgs, out_bytes) == (10, 30)
    finally:
        subscriber.close()
        publisher.close()


# --- a burst for one local subscriber -----------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(burst=events, start=st.integers(min_value=0, max_value=11), limit=st.integers(min_value=0, max_value=14),
       tail=st.sampled_from([b" 1 ", b" 22 "]))
def test_append_pub_msgs_writes_the_run_as_deliver_would(
        burst: list[tuple[object, ...]], start: int, limit: int, tail: bytes) -> None:
    start = min(start, len(burst) - 1)
    subject = burst[start][1] if len(burst[start]) > 1 else b"a"
    expected = bytearray(b"xx")
    count = 0
    data_bytes = 0
    for event in burst[start:]:
        if count >= limit or event[0] != OP_PUB or len(event) != 4 or event[1] != subject:
            break
        wire.append_msg(expected, subject, tail, event[2], -1, event[3])  # type: ignore[arg-type]
        count += 1
        data_bytes += len(event[3])  # type: ignore[arg-type]
    for implementation in (append_pub_msgs_py, append_pub_msgs):
        out = bytearray(b"xx")
        assert implementation(out, burst, start, subject, tail, limit) == (count, data_bytes)  # type: ignore[arg-type]
        assert out == expected


@settings(max_examples=200, deadline=None)
@given(burst=events, start=st.integers(min_value=0, max_value=11), limit=st.integers(min_value=0, max_value=14),
       account=st.sampled_from([b"$G", b"APP"]))
def test_append_pub_msgs_with_the_rmsg_op_writes_what_the_route_writer_would(
        burst: list[tuple[object, ...]], start: int, limit: int, account: bytes) -> None:
    """A route's burst (server/routes.py RoutePeer.deliver_pubs): op b"RMSG <account> ", tail b" "."""
    start = min(start, len(burst) - 1)
    subject = burst[start][1] if len(burst[start]) > 1 else b"a"
    expected = bytearray(b"xx")
    count = 0
    data_bytes = 0
    for event in burst[start:]:
        if count >= limit or event[0] != OP_PUB or len(event) != 4 or event[1] != subject:
            break
        append_rmsg(expected, account, subject, event[2] or None, (), -1, event[3])  # type: ignore[arg-type]
        count += 1
        data_bytes += len(event[3])  # type: ignore[arg-type]
    for implementation in (append_pub_msgs_py, append_pub_msgs):
        out = bytearray(b"xx")
        assert implementation(out, burst, start, subject, b" ", limit, b"RMSG " + account + b" ") == (  # type: ignore[arg-type]
            count, data_bytes)
        assert out == expected


def test_a_burst_on_one_server_keeps_auto_unsubscribe_echo_and_order() -> None:
    """One read with a burst of PUBs: a subscriber with UNSUB 1 3 gets exactly 3, an echo-less
    publisher's own subscription gets none, interleaved
    subjects stay in order."""
    with InProcessServer() as server:
        limited = RawClient(server.port)
        publisher = RawClient(server.port)
        try:
            limited.send(b'CONNECT {"verbose":false}\r\nSUB a 1\r\nUNSUB 1 3\r\nSUB b 2\r\nPING\r\n')
            limited.read_until(b"PONG\r\n")
            publisher.send(b'CONNECT {"verbose":false,"echo":false,"headers":true,"no_responders":true}\r\n'
                           b"SUB own 5\r\nPING\r\n")
            publisher.read_until(b"PONG\r\n")
            publisher.send(b"PUB a 1\r\n1\r\nPUB a 1\r\n2\r\nPUB b 1\r\n3\r\nPUB a r 1\r\n4\r\nPUB a 1\r\n5\r\n"
                           b"PUB own 1\r\nx\r\nPUB own 1\r\ny\r\nPING\r\n")
            assert publisher.read_until(b"PONG\r\n") == b"PONG\r\n"
            limited.send(b"PING\r\n")
            assert limited.read_until(b"PONG\r\n") == (
                b"MSG a 1 1\r\n1\r\nMSG a 1 1\r\n2\r\nMSG b 2 1\r\n3\r\nMSG a 1 r 1\r\n4\r\nPONG\r\n")
        finally:
            limited.close()
            publisher.close()


@settings(max_examples=200, deadline=None)
@given(burst=events, start=st.integers(min_value=0, max_value=11), with_reply=st.booleans())
def test_count_pubs_counts_the_run_nobody_listens_to(burst: list[tuple[object, ...]], start: int,
                                                     with_reply: bool) -> None:
    start = min(start, len(burst) - 1)
    subject = burst[start][1] if len(burst[start]) > 1 else b"a"
    count = 0
    data_bytes = 0
    for event in burst[start:]:
        if event[0] != OP_PUB or len(event) != 4 or event[1] != subject or (event[2] is not None and not with_reply):
            break
        count += 1
        data_bytes += len(event[3])  # type: ignore[arg-type]
    for implementation in (count_pubs_py, count_pubs):
        assert implementation(burst, start, subject, with_reply) == (count, data_bytes)  # type: ignore[arg-type]


def test_a_burst_nobody_listens_to_is_counted_and_requests_in_it_get_no_responders() -> None:
    with InProcessServer() as server:
        publisher = RawClient(server.port)
        try:
            publisher.send(b'CONNECT {"verbose":false,"headers":true,"no_responders":true}\r\nSUB _INBOX.1 9\r\n'
                           b"PUB none 1\r\n1\r\nPUB none 1\r\n2\r\nPUB none _INBOX.1 1\r\n3\r\nPUB none 1\r\n4\r\n"
                           b"PING\r\n")
            got = publisher.read_until(b"PONG\r\n")
            assert got.startswith(b"HMSG _INBOX.1 9 ") and b"NATS/1.0 503" in got and got.endswith(b"PONG\r\n")
            assert got.count(b"HMSG") == 1

            def totals() -> tuple[int, int, int, int]:
                assert server.server is not None
                return server.server.totals()

            assert server.call(totals)[:2] == (4, 4)
        finally:
            publisher.close()


# --- the same bursts to nats-server 2.15.1: the same bytes back ---------------------------------------

BURSTS = [
    # auto-unsubscribe inside a burst, interleaved subjects, reply subjects
    b'CONNECT {"verbose":false}\r\nSUB a 1\r\nUNSUB 1 3\r\nSUB b 2\r\n'
    b"PUB a 1\r\n1\r\nPUB a r.1 1\r\n2\r\nPUB b 1\r\n3\r\nPUB a 1\r\n4\r\nPUB a 1\r\n5\r\nPUB b r.2 1\r\n6\r\nPING\r\n",
    # echo off: the publisher's own subscription gets nothing of the burst, another one everything
    b'CONNECT {"verbose":false,"echo":false}\r\nSUB a 1\r\nPUB a 1\r\n1\r\nPUB a 1\r\n2\r\nSUB b 2\r\n'
    b"PUB b 1\r\n3\r\nPUB b 1\r\n4\r\nPING\r\n",
    # nobody listens: only the request in the burst gets no-responders
    b'CONNECT {"verbose":false,"headers":true,"no_responders":true}\r\nSUB _INBOX.1 9\r\n'
    b"PUB none 1\r\n1\r\nPUB none 1\r\n2\r\nPUB none _INBOX.1 1\r\n3\r\nPUB none 1\r\n4\r\nPING\r\n",
    # one subscriber with a wildcard, subjects changing every message
    b'CONNECT {"verbose":false}\r\nSUB w.* 4\r\n' + b"".join(b"PUB w.%d 2\r\n%02d\r\n" % (i % 3, i) for i in range(9))
    + b"PING\r\n",
]


def burst_answer(port: int, data: bytes) -> bytes:
    """What comes back for `data` (after the INFO) up to and including the PONG."""
    client = RawClient(port)
    try:
        client.send(data)
        return client.read_until(b"PONG\r\n")
    finally:
        client.close()


@pytest.fixture(scope="module")
def both_servers() -> Iterator[tuple[int, int]]:
    with NatsServer() as real, InProcessServer() as ours:
        yield real.port, ours.port


@pytest.mark.parametrize("data", BURSTS)
def test_a_burst_gets_the_same_bytes_as_from_nats_server(both_servers: tuple[int, int], data: bytes) -> None:
    real, ours = both_servers
    assert burst_answer(ours, data) == burst_answer(real, data)
