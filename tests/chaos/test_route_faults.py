"""The route partition proxies (appliance/testing/route_faults.py) on plain sockets: bytes flow
through a link, stop both ways while either end is cut off, and flow again late and in order."""

import socket
import time

from appliance.testing.route_faults import Partitions


def recv_exactly(sock: socket.socket, size: int, timeout_s: float) -> bytes:
    sock.settimeout(timeout_s)
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        assert chunk, "closed"
        data += chunk
    return data


def test_a_cut_holds_bytes_both_ways_and_the_heal_delivers_them_in_order() -> None:
    net = Partitions(3)
    target = socket.create_server(("127.0.0.1", net.cluster_ports[1]))  # node 1's route port
    try:
        wiring = net.wiring
        assert set(wiring.dial) == {(i, j) for i in range(3) for j in range(3) if i != j}
        proxies = set(wiring.dial.values())
        assert len(proxies) == 6 and not set(wiring.advertise.values()) & proxies
        dialler = socket.create_connection(("127.0.0.1", wiring.dial[(0, 1)]), timeout=2)
        target.settimeout(2)
        accepted, _ = target.accept()
        with dialler, accepted:
            dialler.sendall(b"one")
            assert recv_exactly(accepted, 3, 2) == b"one"
            net.isolate(2)  # another node's cut leaves this link alone
            accepted.sendall(b"two")
            assert recv_exactly(dialler, 3, 2) == b"two"
            net.isolate(1)
            dialler.sendall(b"three")
            accepted.sendall(b"back")
            accepted.settimeout(0.3)
            dialler.settimeout(0.3)
            for sock in (accepted, dialler):
                try:
                    got = sock.recv(16)
                except TimeoutError:
                    got = b"(nothing)"
                assert got == b"(nothing)"
            started = time.monotonic()
            net.heal()
            assert recv_exactly(accepted, 5, 2) == b"three"
            assert recv_exactly(dialler, 4, 2) == b"back"
            assert time.monotonic() - started < 2
    finally:
        target.close()
        net.close()


def test_a_dial_during_a_cut_waits_for_the_heal() -> None:
    net = Partitions(2)
    target = socket.create_server(("127.0.0.1", net.cluster_ports[0]))
    try:
        net.isolate(0)
        dialler = socket.create_connection(("127.0.0.1", net.wiring.dial[(1, 0)]), timeout=2)
        target.settimeout(0.3)
        try:
            target.accept()[0].close()
            reached = True
        except TimeoutError:
            reached = False
        assert not reached
        net.heal()
        target.settimeout(2)
        accepted, _ = target.accept()
        with dialler, accepted:
            dialler.sendall(b"x")
            assert recv_exactly(accepted, 1, 2) == b"x"
    finally:
        target.close()
        net.close()
