"""Consumer deliveries that cross a route and then a worker link: a pull consumer whose leader is on
another server delivers to a client on either worker of its server under the stream subject, with
the plain ack reply (the route's `<ack>@<stream subject>` form never reaches a client). Found by
`appliance chaos --workers 2` (the consumer's client got MSG <inbox> with reply `$JS.ACK...@chaos.m`)."""

import pytest

from appliance.bench import jsapi, replicas, servers, wire
from appliance.bench.conn import Connection, Endpoint

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
CONNECTIONS_PER_NODE = 6  # each lands on either worker: both are met with near certainty


def test_pull_deliveries_from_a_remote_consumer_leader_reach_clients_on_both_workers_intact() -> None:
    cluster = servers.start(servers.ServerKind("appliance 2 workers", "appliance", workers=2), nodes=3,
                            timeout_s=90)
    try:
        setup = Connection(Endpoint.parse(cluster.url), name="setup")
        try:
            jsapi.create_stream(setup, jsapi.stream_config("RD", ["rd.m"], storage="file", replicas=3))
            replicas.wait_healthy(setup, "RD", 3, timeout_s=60)
            jsapi.create_consumer(setup, "RD", jsapi.consumer_config("C", ack="explicit"))
            info = replicas.wait_healthy(setup, "RD", 3, consumer="C", timeout_s=60)
            total = 3 * CONNECTIONS_PER_NODE
            for i in range(total):
                jsapi.parse_pub_ack(setup.request(b"rd.m", b"m%d" % i, 5).payload)
        finally:
            setup.close()
        leader = str(info["cluster"]["leader"])  # type: ignore[index]
        got = []
        for index, node in enumerate(cluster.nodes):
            for _ in range(CONNECTIONS_PER_NODE):
                conn = Connection(Endpoint.parse(cluster.urls[index]), name="puller")
                try:
                    conn.ensure_inbox()
                    inbox = conn.inbox_prefix + b".pull"
                    conn.send(wire.pub(b"$JS.API.CONSUMER.MSG.NEXT.RD.C", jsapi.pull_request(1, expires_ns=2 * 10**9),
                                       inbox))
                    msg = conn.next_msg(5)
                    got.append((node.name, msg.subject, msg.reply))
                    assert msg.reply is not None
                    conn.send(wire.pub(msg.reply, b"+ACK"))
                    conn.flush()
                finally:
                    conn.close()
        bad = [g for g in got if g[1] != b"rd.m" or g[2] is None or b"@" in g[2]]
        assert bad == [], f"consumer leader {leader}: {bad}"
    finally:
        cluster.stop()


def test_queue_push_deliveries_from_a_remote_consumer_leader_reach_members_on_both_workers_intact() -> None:
    cluster = servers.start(servers.ServerKind("appliance 2 workers", "appliance", workers=2), nodes=3,
                            timeout_s=90)
    members: list[Connection] = []
    try:
        setup = Connection(Endpoint.parse(cluster.url), name="setup")
        try:
            jsapi.create_stream(setup, jsapi.stream_config("RQ", ["rq.m"], storage="file", replicas=3))
            replicas.wait_healthy(setup, "RQ", 3, timeout_s=60)
            for index in range(len(cluster.nodes)):
                for _ in range(CONNECTIONS_PER_NODE):
                    member = Connection(Endpoint.parse(cluster.urls[index]), name="member")
                    members.append(member)
                    member.subscribe(b"rq.deliver", b"G")
                    member.flush()
            config = jsapi.consumer_config("Q", ack="explicit", deliver_subject="rq.deliver")
            config["deliver_group"] = "G"
            jsapi.create_consumer(setup, "RQ", config)
            replicas.wait_healthy(setup, "RQ", 3, consumer="Q", timeout_s=60)
            total = 60
            for i in range(total):
                jsapi.parse_pub_ack(setup.request(b"rq.m", b"m%d" % i, 5).payload)
        finally:
            setup.close()
        got = []
        for member in members:
            while True:
                try:
                    msg = member.next_msg(0.5 if got else 5)
                except TimeoutError:
                    break
                got.append((msg.subject, msg.reply))
        bad = [g for g in got if g[0] != b"rq.m" or g[1] is None or b"@" in g[1]]
        assert len(got) >= total and bad == [], bad[:5]
    finally:
        for member in members:
            member.close()
        cluster.stop()
