"""After a client's SUB and a PING/PONG round trip, a message published by any client on any worker
reaches it — also right after a worker restart, and when a sibling is busy or slow.

Deterministic: each worker runs only when the test runs its loop (appliance/testing/sim_workers.py),
time moves only when the test advances it, and a killed worker's successor reads the same link
queues, as a restarted worker reads the same rings.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from appliance import limits
from appliance.fabric import link
from appliance.server import internal, links
from appliance.testing.sim_workers import SimClient, SimWorker, SimWorkers



@pytest.fixture(autouse=True)
def no_contained_errors() -> Iterator[None]:
    """Links, the fabric and internal clients contain what their handlers raise (the worker goes on);
    here, where every step is deterministic, a contained error is a bug: fail on it."""
    counters = (link.HANDLER_ERRORS, links.FRAME_ERRORS, internal.HANDLER_ERRORS)
    before = [counter.total for counter in counters]
    yield
    assert [counter.total for counter in counters] == before, "an exception was contained (see the log)"


CONNECT = b'CONNECT {"verbose":false,"pedantic":false,"protocol":1}\r\nPING\r\n'


def connected(worker: SimWorker, workers: SimWorkers, *, run: tuple[int, ...] | None = None) -> SimClient:
    """A client on `worker` that has seen its connect PONG (running the workers in `run`)."""
    client = worker.connect()
    client.send(CONNECT)
    workers.run(run)
    assert b"PONG\r\n" in client.read(), "connect PONG"
    return client


def answers(client: SimClient) -> bytes:
    """What the server wrote to `client`, less the server's own PINGs (its first PING measures the
    client's RTT a moment after CONNECT, as nats-server's does; the simulated clock runs past it)."""
    return client.read().replace(b"PING\r\n", b"")


def msgs(data: bytes) -> list[bytes]:
    """The payloads of the MSG lines in `data`."""
    found = []
    lines = data.split(b"\r\n")
    for i, line in enumerate(lines):
        if line.startswith(b"MSG "):
            found.append(lines[i + 1])
    return found


def test_a_restarted_worker_holds_its_first_client_until_a_busy_sibling_told_it_the_interest() -> None:
    """The rare loss of test_worker_killed_is_restarted_while_the_other_serves: the new worker 1
    took a client's PUB before worker 0 (busy) had answered its HELLO, knew no subscriber, and
    dropped the message. Now its clients wait until it knows every live sibling's interest."""
    workers = SimWorkers(2)
    workers.run()
    subscriber = connected(workers[0], workers)
    subscriber.send(b"SUB across 1\r\nPING\r\n")
    workers.run()
    assert subscriber.read() == b"PONG\r\n"

    workers.kill(1)
    restarted = workers.restart(1)
    publisher = restarted.connect()
    publisher.send(CONNECT)
    workers.run([1])  # worker 0 is busy: it has not read the new worker's HELLO yet
    early = publisher.read()
    assert b"PONG" not in early, "the new worker answered its first client before it knew worker 0's interest"

    workers.run()  # worker 0 answers the HELLO; worker 1 learns its interest and lets the client go
    assert b"PONG\r\n" in publisher.read()
    publisher.send(b"PUB across 5\r\nafter\r\n")
    workers.run()
    assert msgs(subscriber.read()) == [b"after"], "the first message from the restarted worker was lost"


def test_a_pub_sent_with_the_connect_waits_for_the_interest_too() -> None:
    """A raw client that does not wait for its connect PONG: its first read is held as a whole."""
    workers = SimWorkers(2)
    workers.run()
    subscriber = connected(workers[0], workers)
    subscriber.send(b"SUB early.bird 1\r\nPING\r\n")
    workers.run()
    subscriber.read()

    workers.kill(1)
    restarted = workers.restart(1)
    eager = restarted.connect()
    eager.send(CONNECT + b"PUB early.bird 2\r\nhi\r\n")
    workers.run([1])
    workers.run()
    assert msgs(subscriber.read()) == [b"hi"]


def test_a_pong_waits_for_a_busy_sibling_past_the_sync_timeout() -> None:
    """A timeout may only release a PONG when the sibling is really gone: worker 1 is alive but does
    not run for three timeouts; the PONG waits, and comes once worker 1 has applied the interest."""
    workers = SimWorkers(2)
    workers.run()
    subscriber = connected(workers[0], workers)
    publisher = connected(workers[1], workers)
    subscriber.send(b"SUB busy.sibling 1\r\nPING\r\n")
    workers.run([0])
    workers[0].advance(3 * limits.INTEREST_SYNC_TIMEOUT_S)
    assert answers(subscriber) == b"", "PONG released by a timeout while the sibling was alive"

    workers.run()
    assert answers(subscriber) == b"PONG\r\n"
    publisher.send(b"PUB busy.sibling 2\r\nok\r\n")
    workers.run()
    assert msgs(subscriber.read()) == [b"ok"]


def test_a_pong_does_not_wait_for_a_sibling_whose_process_exited() -> None:
    workers = SimWorkers(2)
    workers.run()
    subscriber = connected(workers[0], workers)
    subscriber.send(b"SUB nobody.acks 1\r\nPING\r\n")
    workers.run([0])
    assert subscriber.read() == b""
    workers.kill(1)  # its pidfd turns readable: no timeout needed
    workers.run([0])
    assert subscriber.read() == b"PONG\r\n"


def test_a_dead_sibling_is_found_at_the_timeout_when_its_exit_was_not_reported() -> None:
    """Without a pidfd event (an old kernel), the timer asks whether the process is alive."""
    workers = SimWorkers(2)
    workers.run()
    subscriber = connected(workers[0], workers)
    subscriber.send(b"SUB no.pidfd 1\r\nPING\r\n")
    workers.run([0])
    workers[1].alive = False
    workers.table.dead.add(workers[1].pid)  # dead, but no watcher is told
    workers.run([0])
    assert answers(subscriber) == b""
    workers[0].advance(limits.INTEREST_SYNC_TIMEOUT_S)
    assert answers(subscriber) == b"PONG\r\n"


def test_the_restarted_workers_own_subscription_reaches_the_survivor_before_its_pong() -> None:
    workers = SimWorkers(2)
    workers.run()
    publisher = connected(workers[0], workers)
    workers.kill(1)
    restarted = workers.restart(1)
    subscriber = connected(restarted, workers)
    subscriber.send(b"SUB back 7\r\nPING\r\n")
    workers.run([1])
    assert subscriber.read() == b"", "PONG before worker 0 applied the subscription"
    workers.run()
    assert subscriber.read() == b"PONG\r\n"
    publisher.send(b"PUB back 4\r\nback\r\n")
    workers.run()
    assert msgs(subscriber.read()) == [b"back"]


def test_a_worker_starting_next_to_a_dead_sibling_waits_for_its_successor() -> None:
    """Both restart: the new worker 1 cannot know whether worker 0 (never heard from) had clients,
    so its clients wait until worker 0's successor has answered; then everything flows."""
    workers = SimWorkers(2)
    workers.run()
    workers.kill(0)
    workers.kill(1)
    one = workers.restart(1)
    client = one.connect()
    client.send(CONNECT)
    workers.run([1])
    one.advance(3 * limits.INTEREST_SYNC_TIMEOUT_S)
    assert b"PONG" not in client.read()
    zero = workers.restart(0)
    workers.run()
    assert b"PONG\r\n" in client.read()
    other = connected(zero, workers)
    other.send(b"SUB z 1\r\nPING\r\n")
    workers.run()
    assert other.read() == b"PONG\r\n"
    client.send(b"PUB z 1\r\nz\r\n")
    workers.run()
    assert msgs(other.read()) == [b"z"]


def test_three_workers_a_pong_waits_for_every_live_sibling() -> None:
    workers = SimWorkers(3)
    workers.run()
    subscriber = connected(workers[0], workers)
    subscriber.send(b"SUB three 1\r\nPING\r\n")
    workers.run([0, 1])  # worker 2 is busy
    assert subscriber.read() == b""
    workers.run()
    assert subscriber.read() == b"PONG\r\n"
    for index in (1, 2):
        publisher = connected(workers[index], workers)
        publisher.send(b"PUB three 1\r\n%d\r\n" % index)
        workers.run()
    assert msgs(subscriber.read()) == [b"1", b"2"]


def test_a_flush_ping_read_apart_from_the_sub_behind_it_waits_for_that_sub() -> None:
    """nats-py writes its flush PING to the socket at once and the SUB still pending in its buffer a
    moment later; a worker may read the PING alone. When the SUB is already waiting in the socket,
    the PONG covers it: it waits for that read and for the sibling's ACK of the interest."""
    workers = SimWorkers(2)
    workers.run()
    subscriber = connected(workers[0], workers)
    publisher = connected(workers[1], workers)
    subscriber.send_split(b"PING\r\n", b"SUB split 1\r\n")
    workers[0].step()  # the read with the PING alone; then worker 0 is descheduled
    assert subscriber.read() == b"", "PONG before the SUB waiting behind the PING was read"
    workers.run()
    assert subscriber.read() == b"PONG\r\n"
    publisher.send(b"PUB split 5\r\nfirst\r\n")
    workers.run()
    assert msgs(subscriber.read()) == [b"first"]


def test_the_connect_ping_is_answered_in_its_read_even_with_bytes_behind_it() -> None:
    """A client's first PING is the one it sends with CONNECT and waits for before it subscribes
    anything (nats-py, nats.go): its PONG is not held for the read behind it (nor is the socket
    looked at: most connections, TLS ones above all, never live past it)."""
    workers = SimWorkers(2)
    workers.run()
    client = workers[0].connect()
    client.read()  # the INFO
    client.send_split(CONNECT, b"SUB later 1\r\nPING\r\n")
    workers[0].step()  # the read with CONNECT and its PING alone
    assert b"PONG\r\n" in client.read(), "the connect PONG waited for the read behind it"
    workers.run()
    assert b"PONG\r\n" in client.read()  # the second PING: answered once its SUB is known everywhere


def test_a_ping_with_nothing_behind_it_is_answered_in_its_read() -> None:
    workers = SimWorkers(2)
    workers.run()
    client = connected(workers[0], workers)
    client.send(b"PING\r\n")
    workers[0].step()
    assert client.read() == b"PONG\r\n"
