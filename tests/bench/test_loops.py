"""The C publish and subscribe loops (native/bench/loadgen.c), over a socketpair instead of a server.

The far end of the pair plays the server: it holds what the publisher wrote, and what it writes
is what the subscriber reads. No server, no sleeps; the only waits are the loops' own timeouts.
"""

import fcntl
import os
import signal
import socket
import struct
import threading
from collections.abc import Iterator

import pytest

from appliance.bench import core
from appliance.bench.conn import Connection, Endpoint
from appliance.bench.scan import (
    NATIVE,
    STOP_CLOSED,
    STOP_NEED_MORE,
    STOP_OTHER,
    STOP_TIMEOUT,
    _loadgen,
)
from appliance.bench.spec import ClientSpec
from appliance.bench.wire import pub

needs_c = pytest.mark.skipif(not NATIVE, reason="the C module is not built (or APPLIANCE_NO_NATIVE=1)")
BOTH_LOOPS = [pytest.param(True, marks=needs_c, id="C"), pytest.param(False, id="python")]

RX_BYTES = 1 << 16


def msg(n: int, subject: bytes = b"s") -> bytes:
    payload = b"m%d" % n
    return b"MSG %s 1 %d\r\n%s\r\n" % (subject, len(payload), payload)


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    try:
        yield ours, theirs
    finally:
        ours.close()
        theirs.close()


def receive(sock: socket.socket, rx: bytearray, start: int, end: int, max_msgs: int,
            timeout_ms: int = 1000) -> tuple[int, int, int, int, int, int, int]:
    assert _loadgen is not None
    result: tuple[int, int, int, int, int, int, int] = _loadgen.receive_msgs(
        sock.fileno(), rx, start, end, max_msgs, timeout_ms, 1000)
    return result


@needs_c
def test_the_subscriber_loop_counts_exactly_max_msgs_and_leaves_the_rest_unread(pair) -> None:
    ours, theirs = pair
    theirs.sendall(b"".join(msg(i) for i in range(10)))
    rx = bytearray(RX_BYTES)
    msgs, data_bytes, start, end, stop, first_ns, last_ns = receive(ours, rx, 0, 0, 7)
    assert (msgs, data_bytes, stop) == (7, sum(len(b"m%d" % i) for i in range(7)), STOP_NEED_MORE)
    assert bytes(rx[start:end]) == msg(7) + msg(8) + msg(9)  # unread, for the next call
    assert 0 < first_ns <= last_ns


@needs_c
def test_the_subscriber_loop_stops_at_anything_but_a_message(pair) -> None:
    ours, theirs = pair
    theirs.sendall(msg(0) + msg(1) + b"PING\r\n" + msg(2))
    rx = bytearray(RX_BYTES)
    msgs, _, start, end, stop, _, _ = receive(ours, rx, 0, 0, 100)
    assert (msgs, stop) == (2, STOP_OTHER)
    assert bytes(rx[start:end]) == b"PING\r\n" + msg(2)


@needs_c
def test_the_subscriber_loop_counts_what_is_already_buffered_before_reading(pair) -> None:
    ours, _ = pair
    rx = bytearray(RX_BYTES)
    frames = msg(0) + msg(1) + msg(2)[:5]  # two whole frames and the start of a third
    rx[100 : 100 + len(frames)] = frames
    msgs, _, start, end, stop, _, _ = receive(ours, rx, 100, 100 + len(frames), 100, timeout_ms=1)
    assert (msgs, stop) == (2, STOP_TIMEOUT)  # nothing more arrived: an idle timeout
    assert bytes(rx[start:end]) == msg(2)[:5]


@needs_c
def test_a_frame_split_across_reads_is_counted_once_whole(pair) -> None:
    ours, theirs = pair
    frame = msg(42)
    theirs.sendall(frame[:4])
    rx = bytearray(RX_BYTES)
    msgs, _, start, end, stop, _, _ = receive(ours, rx, 0, 0, 1, timeout_ms=1)
    assert (msgs, stop, end - start) == (0, STOP_TIMEOUT, 4)
    theirs.sendall(frame[4:])
    msgs, _, start, end, stop, _, _ = receive(ours, rx, start, end, 1)
    assert (msgs, stop, start == end) == (1, STOP_NEED_MORE, True)


@needs_c
def test_the_subscriber_loop_reports_a_closed_connection(pair) -> None:
    ours, theirs = pair
    theirs.sendall(msg(0))
    theirs.shutdown(socket.SHUT_WR)
    msgs, _, _, _, stop, _, _ = receive(ours, bytearray(RX_BYTES), 0, 0, 5)
    assert (msgs, stop) == (1, STOP_CLOSED)


@needs_c
def test_the_loops_leave_the_socket_as_python_set_it_up(pair) -> None:
    ours, theirs = pair
    ours.settimeout(2.5)  # Python: non-blocking descriptor, its own timeout, no SO_RCVTIMEO/SO_SNDTIMEO

    def state() -> tuple[int, bytes, bytes]:
        nonblocking = fcntl.fcntl(ours.fileno(), fcntl.F_GETFL) & os.O_NONBLOCK
        size = struct.calcsize("ll")
        return (nonblocking, ours.getsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, size),
                ours.getsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, size))

    before = state()
    theirs.sendall(msg(0))
    receive(ours, bytearray(RX_BYTES), 0, 0, 1)
    receive(ours, bytearray(RX_BYTES), 0, 0, 1, timeout_ms=1)  # and after a timeout
    frame = pub(b"bench", b"x")
    assert _loadgen is not None
    _loadgen.publish(ours.fileno(), frame, len(frame), 3, 1000, 1000)
    assert state() == before and before[0] != 0
    assert ours.gettimeout() == 2.5


class Interrupted(Exception):
    pass


@needs_c
@pytest.mark.parametrize("loop", ["receive", "publish"])
def test_a_raising_signal_handler_ends_a_blocked_loop(pair, loop: str) -> None:
    ours, _ = pair  # nobody writes to us and nobody reads what we write: both loops block

    def raise_interrupted(_signum: int, _frame: object) -> None:
        raise Interrupted

    previous = signal.signal(signal.SIGUSR1, raise_interrupted)
    poke = threading.Timer(0.05, signal.pthread_kill, (threading.main_thread().ident, signal.SIGUSR1))
    poke.start()
    try:
        with pytest.raises(Interrupted):
            if loop == "receive":
                receive(ours, bytearray(RX_BYTES), 0, 0, 1, timeout_ms=20_000)
            else:
                frame = pub(b"bench", b"w" * 1000)
                assert _loadgen is not None
                _loadgen.publish(ours.fileno(), frame * 64, len(frame), 10**9, 20_000, 60_000)
    finally:
        poke.cancel()
        poke.join()
        signal.signal(signal.SIGUSR1, previous)
    assert fcntl.fcntl(ours.fileno(), fcntl.F_GETFL) & os.O_NONBLOCK  # handed back non-blocking


@needs_c
def test_the_subscriber_loop_rejects_bad_bounds(pair) -> None:
    ours, _ = pair
    with pytest.raises(ValueError):
        receive(ours, bytearray(RX_BYTES), 10, 5, 1)
    with pytest.raises(ValueError):
        receive(ours, bytearray(RX_BYTES), 0, 0, -1)


def frames_in(data: bytes, *, broken_off: bool = False) -> list[bytes]:
    """Split what a publisher wrote into its PUB frames; all complete unless `broken_off`."""
    frames, pos = [], 0
    while pos < len(data):
        line_end = data.find(b"\r\n", pos)
        end = -1 if line_end < 0 else line_end + 2 + int(data[pos:line_end].split()[-1]) + 2
        if line_end < 0 or end > len(data):
            assert broken_off, "a frame was cut off"
            return frames
        frames.append(data[pos:end])
        pos = end
    return frames


def read_all(sock: socket.socket) -> bytes:
    sock.setblocking(False)
    chunks = []
    while True:
        try:
            chunk = sock.recv(1 << 16)
        except BlockingIOError:
            return b"".join(chunks)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


@needs_c
def test_the_publisher_loop_writes_exactly_count_whole_frames(pair) -> None:
    ours, theirs = pair
    frame = pub(b"bench", b"x" * 10)
    assert _loadgen is not None
    sent, stop = _loadgen.publish(ours.fileno(), frame * 4, len(frame), 10, 1000, 1000)
    assert (sent, stop) == (10, STOP_NEED_MORE)
    assert frames_in(read_all(theirs)) == [frame] * 10  # 4 + 4 + 2: the last write is a prefix


@needs_c
def test_the_publisher_loop_comes_back_on_a_frame_boundary_when_the_server_speaks(pair) -> None:
    ours, theirs = pair
    theirs.sendall(b"PING\r\n")
    frame = pub(b"bench", b"y")
    assert _loadgen is not None
    sent, stop = _loadgen.publish(ours.fileno(), frame, len(frame), 1000, 1000, 1000)
    assert stop == STOP_OTHER and 0 < sent < 1000
    assert frames_in(read_all(theirs)) == [frame] * sent
    assert ours.recv(100) == b"PING\r\n"  # left for Python to read and answer


@needs_c
def test_the_publisher_loop_times_out_when_nobody_reads(pair) -> None:
    ours, theirs = pair
    frame = pub(b"bench", b"z" * 1000)
    assert _loadgen is not None
    sent, stop = _loadgen.publish(ours.fileno(), frame * 64, len(frame), 1_000_000, 1, 1000)
    assert stop == STOP_TIMEOUT and 0 < sent < 1_000_000
    assert frames_in(read_all(theirs), broken_off=True) == [frame] * sent  # whole frames are counted


@needs_c
def test_the_publisher_loop_refuses_a_batch_of_partial_frames(pair) -> None:
    ours, _ = pair
    assert _loadgen is not None
    with pytest.raises(ValueError):
        _loadgen.publish(ours.fileno(), b"PUB a 1\r\nx\r\nPUB", 12, 1, 10, 10)


def test_a_subscriber_is_timed_from_its_first_message_to_its_last() -> None:
    assert core.measured_seconds(start_ns=0, first_ns=2_000_000_000, last_ns=5_000_000_000) == 3.0
    # everything in one read: first and last coincide, so the time since the start is used
    assert core.measured_seconds(start_ns=1_000_000_000, first_ns=3_000_000_000, last_ns=3_000_000_000) == 2.0
    assert core.measured_seconds(start_ns=5, first_ns=0, last_ns=0) == 0.0  # nothing arrived


def tcp_pair() -> tuple[socket.socket, socket.socket]:
    """Two ends of a TCP connection on 127.0.0.1 (a Connection sets TCP options on its socket)."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        ours = socket.socket()
        ours.connect(listener.getsockname())
        theirs, _ = listener.accept()
    return ours, theirs


@pytest.fixture
def fake_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[socket.socket]:
    """The far end of a socketpair that a Connection believes is a NATS server (INFO and PONG queued)."""
    ours, theirs = tcp_pair()
    theirs.sendall(b'INFO {"server_id":"fake","max_payload":1048576}\r\nPONG\r\n')

    def create_connection(_address: object, timeout: float) -> socket.socket:
        ours.settimeout(timeout)
        return ours

    monkeypatch.setattr(socket, "create_connection", create_connection)
    try:
        yield theirs
    finally:
        ours.close()
        theirs.close()


@pytest.mark.parametrize("native", BOTH_LOOPS)
def test_the_subscriber_answers_a_ping_mid_stream_and_counts_every_message(fake_server: socket.socket,
                                                                           native: bool) -> None:
    conn = Connection(Endpoint.parse("nats://127.0.0.1:4222"), name="sub", timeout_s=1.0)
    fake_server.sendall(b"".join(msg(i) for i in range(50)) + b"PING\r\n" + b"msg s 1 1\r\nq\r\n"
                        + b"".join(msg(i) for i in range(50, 100)))
    spec = ClientSpec(url="nats://127.0.0.1:4222", role="sub", index=0, msgs=101, size=2, subject="s")
    seen: list[int] = []
    result = core.run_sub(conn, spec, seen.append, native=native)
    assert (result.msgs, result.errors) == (101, 0)  # 100 MSG and one lower-case `msg`
    assert seen[-1] == 101
    assert read_all(fake_server).endswith(b"PONG\r\n")


@pytest.mark.parametrize("native", BOTH_LOOPS)
def test_missing_messages_fail_the_subscriber_loudly(fake_server: socket.socket, native: bool) -> None:
    conn = Connection(Endpoint.parse("nats://127.0.0.1:4222"), name="sub", timeout_s=0.05)
    fake_server.sendall(b"".join(msg(i) for i in range(9)))
    spec = ClientSpec(url="nats://127.0.0.1:4222", role="sub", index=0, msgs=10, size=2, subject="s")
    result = core.run_sub(conn, spec, lambda _done: None, native=native)
    assert (result.msgs, result.errors) == (9, 1)
    assert result.first_error == "idle for 0.05s after 9 of 10 messages"


@pytest.mark.parametrize("native", BOTH_LOOPS)
def test_the_publisher_writes_every_frame_then_flushes(fake_server: socket.socket, native: bool) -> None:
    conn = Connection(Endpoint.parse("nats://127.0.0.1:4222"), name="pub", timeout_s=1.0)
    read_all(fake_server)  # CONNECT and PING of the handshake
    fake_server.sendall(b"PONG\r\n")  # the answer to the final flush
    spec = ClientSpec(url="nats://127.0.0.1:4222", role="pub", index=0, msgs=300, size=16, subject="bench")
    result = core.run_pub(conn, spec, lambda _done: None, native=native)
    written = read_all(fake_server)
    assert written.endswith(b"PING\r\n")
    frames = frames_in(written[: -len(b"PING\r\n")])
    assert (len(frames), result.msgs, result.bytes) == (300, 300, 300 * 16)
    assert set(frames) == {pub(b"bench", core.payload_of(16))}


@pytest.mark.parametrize("native", BOTH_LOOPS)
def test_an_operation_split_across_reads_is_read_to_its_end(fake_server: socket.socket, native: bool) -> None:
    conn = Connection(Endpoint.parse("nats://127.0.0.1:4222"), name="sub", timeout_s=1.0)
    frame = b"msg s 1 5\r\nhello\r\n"  # lower case: the full parser's job, not the scanner's
    conn.buf[0:14] = frame[:14]  # already read: the whole line and the start of the payload
    conn.start, conn.end = 0, 14
    fake_server.sendall(frame[14:] + msg(1))
    spec = ClientSpec(url="nats://127.0.0.1:4222", role="sub", index=0, msgs=2, size=2, subject="s")
    result = core.run_sub(conn, spec, lambda _done: None, native=native)
    assert (result.msgs, result.errors) == (2, 0)
