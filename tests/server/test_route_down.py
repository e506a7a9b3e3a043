"""Server.route_down_listeners: told the name of a server whose route closed (clustered RAFT's
fast failover listens), but not when a duplicate route to a live server is closed in favour of
the other one. The three-server in-memory route mesh of test_route_interest.py, no sockets."""

from __future__ import annotations

import asyncio

from appliance.server.routes import DUPLICATE_ROUTE
from tests.server.test_route_interest import Cluster


def test_a_closed_route_is_told_by_name_and_a_replaced_duplicate_is_not() -> None:
    async def scenario() -> None:
        mesh = Cluster()
        await mesh.start()
        heard: list[list[str]] = [[] for _ in mesh.servers]
        for server, names in zip(mesh.servers, heard):
            server.route_down_listeners.append(names.append)
        mesh.isolate(1)
        assert sorted(heard[0]) == ["h1"] and sorted(heard[2]) == ["h1"]
        assert sorted(heard[1]) == ["h0", "h2"]
        heard = [[] for _ in mesh.servers]
        for server, names in zip(mesh.servers, heard):
            server.route_down_listeners[:] = [names.append]
        mesh.connect(1, 0)  # h1 dials back in
        mesh.pump()
        mesh.connect(0, 1)  # and h0 dials it too: this one (the lower solicitor) replaces the first
        mesh.pump()
        assert any(c.close_reason == DUPLICATE_ROUTE for c in mesh.managers[0].connections | {
            c for _, c in mesh.pipes})
        assert "ID1" in mesh.managers[0].peers and "ID0" in mesh.managers[1].peers
        assert heard == [[], [], []]

    asyncio.run(scenario())
