"""A reload on a server with routes (two servers in one process over in-memory transports, the real
RouteConnection and RouteManager; no sockets, no clock): accounts removed and cluster settings."""

from __future__ import annotations

import asyncio

from appliance.config import options_from_text
from appliance.config.options import ServerOptions
from appliance.fabric.route import RouteConnection
from appliance.server.internal import InternalClient
from appliance.server.reload import apply_reload
from appliance.server.routes import RouteManager
from appliance.server.server import Server
from tests.server.test_route_interest import MemoryTransport

ACCOUNTS = "accounts { A: { users: [ {user: a, password: pa} ] }, B: { users: [ {user: b, password: pb} ] } }\n"


def options(name: str, cluster: str = "", accounts: str = ACCOUNTS) -> ServerOptions:
    return options_from_text(f"server_name: {name}\n{accounts}cluster {{ name: C1, listen: 127.0.0.1:-1\n{cluster}\n}}\n",
                             filename="server.conf")


class Pair:
    """Host 0 dials host 1 (with `user`/`password` in its route URL); host 1 accepts."""

    def __init__(self, accepting_cluster: str = "", user: str = "", password: str = "",
                 peer_names: tuple[str, ...] | None = None, peer_dns_names: tuple[str, ...] = ()) -> None:
        self.servers = [Server(options("h0"), server_id="ID0", start_wall_s=0.0),
                        Server(options("h1", accepting_cluster), server_id="ID1", start_wall_s=0.0)]
        self.managers = [RouteManager(server) for server in self.servers]
        for server, manager in zip(self.servers, self.managers):
            server.routes = manager
        self.user, self.password = user, password
        self.peer_names = peer_names  # what the TLS layer would have read from host 0's certificate
        self.peer_dns_names = peer_dns_names
        self.pipes: list[tuple[MemoryTransport, RouteConnection]] = []

    async def start(self) -> None:
        for manager in self.managers:
            await manager.start(None)
        dialler = self.managers[0]._new_connection(solicited=True, user=self.user, password=self.password)
        self.acceptor = self.managers[1]._new_connection(solicited=False)
        self.acceptor.peer_names, self.acceptor.peer_dns_names = self.peer_names, self.peer_dns_names
        self.to_dialler, self.to_acceptor = MemoryTransport(), MemoryTransport()
        self.pipes = [(self.to_dialler, dialler), (self.to_acceptor, self.acceptor)]  # bytes written on t go to conn
        self.acceptor.connection_made(self.to_dialler)  # type: ignore[arg-type]
        dialler.connection_made(self.to_acceptor)  # type: ignore[arg-type]
        self.pump()

    def pump(self) -> bytes:
        """Move bytes until quiet; what host 1 wrote to host 0 on the way."""
        written = bytearray()
        for _ in range(1000):
            for server in self.servers:
                server.flush_dirty()
            moved = False
            for transport, conn in self.pipes:
                if transport.out and not conn.closed:
                    data = bytes(transport.out)
                    transport.out.clear()
                    if transport is self.to_dialler:
                        written += data
                    conn.data_received(data)
                    moved = True
            if not moved:
                return bytes(written)
        raise AssertionError("routes never went quiet")


def test_a_removed_account_is_withdrawn_from_the_peers_and_their_interest_in_it_forgotten() -> None:
    async def scenario() -> None:
        pair = Pair()
        await pair.start()
        subscribers = [InternalClient(server, server.accounts["A"], "sub") for server in pair.servers]
        for client in subscribers:
            client.subscribe(b"news", lambda *_: None)
        pair.pump()
        assert pair.managers[0].peers["ID1"].interest  # host 1's interest in A reached host 0
        apply_reload(pair.servers[1], options("h1", accounts="accounts { B: {} }\n"))
        said = pair.pump()
        assert b"RS- A news" in said
        assert not pair.managers[0].peers["ID1"].interest  # host 0 forgot it
        assert not pair.managers[1].peers["ID0"].interest  # host 1 forgot host 0's interest in A
        plain, _ = pair.servers[0].accounts["A"].sublist.match(b"news")
        assert [sub.conn for sub in plain] == [subscribers[0]]  # the route's entry went with it
        subscribers[1].close()  # news of the removed account's old object is not passed on
        assert b"RS-" not in pair.pump()

    asyncio.run(scenario())


def test_new_route_credentials_close_a_route_accepted_with_the_old_ones() -> None:
    async def scenario() -> None:
        auth = "authorization { user: ru, password: rp }"
        pair = Pair(auth, user="ru", password="rp")
        await pair.start()
        assert "ID0" in pair.managers[1].peers
        apply_reload(pair.servers[1], options("h1", auth.replace("rp", "other")))
        assert b"-ERR 'Authorization Violation'" in pair.pump()
        assert pair.acceptor.closed and pair.acceptor.close_reason == "Authentication Failure"
        assert "ID0" not in pair.managers[1].peers

    asyncio.run(scenario())


def test_the_other_cluster_settings_apply_to_what_is_sent_from_now_on() -> None:
    async def scenario() -> None:
        pair = Pair()
        await pair.start()
        manager = pair.managers[1]
        apply_reload(pair.servers[1], options("h1", 'advertise: "10.0.0.9:7222"\nno_advertise: true\n'
                                                    'ping_interval: "5s"\nping_max: 4\n'))
        info = manager.info()
        assert info["ip"] == "nats-route://10.0.0.9:7222/" and "connect_urls" not in info
        assert (manager.settings.ping_interval_s, manager.settings.ping_max) == (5.0, 4)
        assert manager.settings.cluster_name == "C1"
        renamed = options("h1")
        renamed.cluster.name = "C2"
        apply_reload(pair.servers[1], renamed)
        assert manager.info()["cluster"] == "C2" and "ID0" in manager.peers  # the route up stays

    asyncio.run(scenario())

