"""The failover measurement's pure parts: the lost/duplicated check, the stored message ids, the
percentiles and the table row; then the three-node nats-server launcher it runs on."""

import base64
import time

import pytest

from appliance.bench import jsapi, replicas, servers
from appliance.bench.conn import Connection, Endpoint
from appliance.bench.failover import (
    FailoverResult,
    delivery_check,
    header_value,
    publish_until_acked,
    run_failover,
    stored_msg_id,
)
from appliance.bench.table import failover_row, failover_lines


def test_every_acked_id_stored_once_is_clean() -> None:
    assert delivery_check({"a", "b"}, ["a", "b"]) == ([], [])


def test_an_acked_id_missing_from_the_stream_is_lost() -> None:
    assert delivery_check({"a", "b", "c"}, ["b"]) == (["a", "c"], [])


def test_an_id_stored_twice_is_duplicated() -> None:
    assert delivery_check({"a", "b"}, ["a", "b", "b", "a", "b"]) == ([], ["a", "b"])


def test_a_stored_message_never_acked_is_neither_lost_nor_duplicated() -> None:
    assert delivery_check({"a"}, ["a", "z"]) == ([], [])


def test_header_values_are_found_case_insensitively() -> None:
    block = b"NATS/1.0\r\nFoo: 1\r\nnats-msg-id: k3a7\r\n\r\n"
    assert header_value(block, "Nats-Msg-Id") == "k3a7"
    assert header_value(block, "Bar") is None
    assert header_value(b"NATS/1.0\r\n\r\n", "Foo") is None


def test_the_msg_id_of_a_stream_msg_get_response() -> None:
    hdrs = base64.b64encode(b"NATS/1.0\r\nNats-Msg-Id: k1f\r\n\r\n").decode()
    assert stored_msg_id({"message": {"subject": "s", "seq": 4, "hdrs": hdrs, "data": ""}}) == "k1f"
    assert stored_msg_id({"message": {"subject": "s", "seq": 4, "data": ""}}) is None
    assert stored_msg_id({"error": {"code": 404}}) is None


def test_failover_percentiles_are_nearest_rank_over_the_kills() -> None:
    result = FailoverResult(seconds=[5.0, 1.0, 3.0, 2.0, 4.0])
    assert (result.p50_s(), result.p99_s()) == (3.0, 5.0)
    assert FailoverResult().p50_s() is None and FailoverResult().p99_s() is None


def test_a_failover_row_shows_times_in_ms_and_the_check() -> None:
    result = FailoverResult(seconds=[5.6, 4.4, 6.2], attempts=[500, 400, 600], acked=123, stored=123, checked=True)
    assert failover_row("nats-server", result) == (
        "| nats-server | 3 | 5,600 | 6,200 | 6,200 | 500 | 123 acked, 123 stored: none lost or duplicated | ok |")


def test_a_failover_row_shows_losses_and_the_failure() -> None:
    result = FailoverResult(seconds=[1.0], attempts=[3], acked=3, stored=2, lost=1, checked=True,
                            examples=["lost k1f"], failure="failed: FailoverFailed: no PubAck")
    row = failover_row("appliance", result)
    assert "| 3 acked, 2 stored: 1 lost, 0 duplicated: lost k1f | failed: FailoverFailed: no PubAck |" in row


def test_a_failover_that_never_ran_says_why() -> None:
    result = FailoverResult(failure="failed: ApiError: replicas > 1 not supported in non-clustered mode (500/10074)")
    assert failover_row("appliance", result) == (
        "| appliance | 0 | – | – | – | – | not checked | "
        "failed: ApiError: replicas > 1 not supported in non-clustered mode (500/10074) |")
    lines = failover_lines({"appliance": result}, 20)
    assert "kills asked: 20" in lines[1] and lines[-1].startswith("| appliance |")


def test_a_two_node_cluster_cannot_measure_failover() -> None:
    fake = servers.RunningServer(servers.NATS_DEFAULT, [], servers.Path("/nonexistent"))
    assert run_failover(fake, 1, log=lambda _l: None).failure == "failed: failover needs a 3-node cluster, not 0 node(s)"


@pytest.mark.integration
@pytest.mark.timeout(90)
def test_three_nats_server_nodes_take_an_r3_stream_and_ack_100_publishes() -> None:
    """The launcher's smoke test: 3 nodes up, an R3 stream healthy, 100 publishes acked on a
    follower's node, then kill -9 of the leader and a restart on the same ports and store."""
    cluster = servers.start(servers.NATS_DEFAULT, nodes=3)
    try:
        assert [node.name for node in cluster.nodes] == ["n1", "n2", "n3"]
        setup = Connection(Endpoint.parse(cluster.url), name="test-setup")
        try:
            jsapi.create_stream(setup, jsapi.stream_config("smoke", ["smoke"], storage="file", replicas=3))
            info = replicas.wait_healthy(setup, "smoke", 3)
        finally:
            setup.close()
        group = replicas.group_of(info)
        assert sorted(group) == ["n1", "n2", "n3"]
        names = [node.name for node in cluster.nodes]
        follower = replicas.node_for(names, group, "follower")
        client = Connection(Endpoint.parse(cluster.urls[follower]), name="test-pub")
        try:
            deadline = time.monotonic() + 30
            seqs = [publish_until_acked(client, "smoke", f"m{i}", b"x", deadline=deadline)[0].seq for i in range(100)]
            assert seqs == list(range(1, 101))
            assert publish_until_acked(client, "smoke", "m99", b"x", deadline=deadline)[0].duplicate  # same id: not stored twice
        finally:
            client.close()

        leader = replicas.node_for(names, group, "leader")
        old_pid = cluster.nodes[leader].proc.pid
        cluster.kill9(leader)
        assert cluster.nodes[leader].proc.returncode == -9
        cluster.restart(leader)
        assert cluster.nodes[leader].proc.pid != old_pid
        check = Connection(Endpoint.parse(cluster.urls[leader]), name="test-check")
        try:
            info = replicas.wait_healthy(check, "smoke", 3, timeout_s=60)
            assert info["state"]["messages"] == 100  # type: ignore[index]
        finally:
            check.close()
    finally:
        cluster.stop()
