"""R3 rows and failover against a real three-node nats-server cluster (the same code measures appliance)."""

from collections.abc import Iterator

import pytest

from appliance.bench import compare, jsapi, servers
from appliance.bench.conn import Connection, Endpoint
from appliance.bench.plan import BenchRequest

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def pool() -> Iterator[compare.ServerPool]:
    pool = compare.ServerPool()
    pool.servers[(servers.NATS_DEFAULT.name, 3)] = servers.start(servers.NATS_DEFAULT, nodes=3)
    try:
        yield pool
    finally:
        pool.stop()


def leader_seen_from(url: str, stream: str) -> str:
    conn = Connection(Endpoint.parse(url), name="test-info")
    try:
        return str(jsapi.stream_info(conn, stream)["cluster"]["leader"])  # type: ignore[index]
    finally:
        conn.close()


@pytest.mark.parametrize("client_on", ["leader", "follower"])
def test_the_client_is_placed_on_the_leaders_node_or_a_followers(pool: compare.ServerPool, client_on: str) -> None:
    cluster = pool.servers[(servers.NATS_DEFAULT.name, 3)]
    request = BenchRequest("js-pub", url=cluster.url, stream=f"place{client_on}", subject=f"place.{client_on}",
                           replicas=3, msgs=10)
    placed, node = compare.place_client(cluster, request, client_on)  # type: ignore[arg-type]
    assert placed.stream_ready and placed.url == cluster.urls[cluster.index_of(node)]  # type: ignore[index]
    leader = leader_seen_from(placed.url, request.stream)
    assert (node == leader) == (client_on == "leader")


def test_an_r3_row_runs_with_the_client_on_a_follower(pool: compare.ServerPool) -> None:
    scenarios = tuple(s for s in compare.SCENARIOS if s.key == "r3-js-pub-sync-follower")
    lines: list[str] = []
    cells = compare.run_all(scenarios, (servers.NATS_DEFAULT,), rounds=1, scale=0.02, log=lines.append, pool=pool)
    cell = cells["r3-js-pub-sync-follower"][servers.NATS_DEFAULT.name]
    assert cell.failure == "" and cell.msgs == 100 and len(cell.p99_us) == 1
    assert "client on follower n" in lines[-1]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_one_failover_is_timed_and_loses_nothing(pool: compare.ServerPool) -> None:
    lines: list[str] = []
    results = compare.run_failovers(pool, (servers.NATS_DEFAULT,), 1, lines.append)
    result = results[servers.NATS_DEFAULT.name]
    assert result.failure == "" and len(result.seconds) == 1 and 0 < result.seconds[0] < 60
    assert result.checked and result.acked == result.stored == 2 * 20 + 1
    assert (result.lost, result.duplicated, result.unacked) == (0, 0, 0)
    assert lines[0].startswith("failover nats-server kill 1: n") and "PubAck after" in lines[0]
    assert pool.servers[(servers.NATS_DEFAULT.name, 3)].dead_node() is None  # the killed node is back
    conn = Connection(Endpoint.parse(pool.servers[(servers.NATS_DEFAULT.name, 3)].url), name="test")
    try:
        assert not jsapi.delete_stream(conn, "benchfailover")  # the measurement removed its stream
    finally:
        conn.close()
