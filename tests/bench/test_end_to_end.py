"""Small end-to-end runs of every bench verb against the real nats-server 2.15.1 (tiny counts)."""

import json

import pytest
from click.testing import CliRunner

from appliance.bench import core, js, servers
from appliance.bench.conn import Connection, Endpoint
from appliance.bench.plan import BenchRequest
from appliance.bench.run import run_bench
from appliance.bench.spec import ClientSpec
from appliance.bench.sync import run_sync
from appliance.bench.wire import pub
from appliance.cli.bench import bench

pytestmark = pytest.mark.integration


def counts(report: object) -> dict[str, int]:
    return {row.label: row.rate.msgs for row in report.totals}  # type: ignore[attr-defined]


def test_core_publish_and_subscribe(nats_server: servers.RunningServer) -> None:
    report = run_bench(BenchRequest("pubsub", url=nats_server.url, msgs=3000, size=64, pubs=2, subs=2),
                       server_pids=(nats_server.pid,))
    assert report.errors == 0
    assert counts(report) == {"pub total": 3000, "sub total": 6000, "pub+sub total": 9000}
    assert [row.rate.msgs for row in report.clients] == [1500, 1500, 3000, 3000]
    assert report.server_cpu_s is not None and report.client_cpu_s > 0


def test_request_reply_measures_latency(nats_server: servers.RunningServer) -> None:
    report = run_bench(BenchRequest("request", url=nats_server.url, msgs=300, size=16))
    assert report.errors == 0
    headline = report.headline()
    assert (headline.label, headline.rate.msgs) == ("request total", 300)
    assert headline.latency is not None and headline.latency.count == 300
    assert 0 < headline.latency.p50_ns <= headline.latency.p99_ns <= headline.latency.max_ns


@pytest.mark.parametrize("window", [0, 16])
def test_jetstream_publish(nats_server: servers.RunningServer, window: int) -> None:
    report = run_bench(BenchRequest("js-pub", url=nats_server.url, msgs=500, window=window, storage="memory",
                                    stream=f"pub{window}", subject=f"js.pub.{window}"))
    assert report.errors == 0
    assert counts(report) == {"js-pub total": 500}
    assert report.headline().latency is not None


@pytest.mark.parametrize("ack", ["explicit", "all", "none"])
def test_jetstream_fetch(nats_server: servers.RunningServer, ack: str) -> None:
    report = run_bench(BenchRequest("js-fetch", url=nats_server.url, msgs=1000, batch=100, ack=ack, clients=2,  # type: ignore[arg-type]
                                    stream=f"fetch{ack}", subject=f"js.fetch.{ack}"))
    assert report.errors == 0
    assert counts(report) == {"js-fetch total": 1000}


def test_jetstream_push(nats_server: servers.RunningServer) -> None:
    report = run_bench(BenchRequest("js-push", url=nats_server.url, msgs=800, ack="explicit", clients=2,
                                    stream="push", subject="js.push"))
    assert report.errors == 0
    assert counts(report) == {"js-push total": 1600}  # every push client reads the whole stream


def test_key_value_put_and_get(nats_server: servers.RunningServer) -> None:
    put = run_bench(BenchRequest("kv-put", url=nats_server.url, msgs=200, keys=20, bucket="b1"))
    get = run_bench(BenchRequest("kv-get", url=nats_server.url, msgs=200, keys=20, bucket="b2"))
    assert (put.errors, get.errors) == (0, 0)
    assert (counts(put), counts(get)) == ({"kv-put total": 200}, {"kv-get total": 200})


def test_missing_keys_and_streams_are_counted_as_errors(nats_server: servers.RunningServer) -> None:
    conn = Connection(Endpoint.parse(nats_server.url), name="test")
    try:
        spec = ClientSpec(url=nats_server.url, role="js-pub", index=0, msgs=5, size=1, subject="nowhere")
        for native in (True, False):  # the C loop and its Python twin see the same 503 no-responders
            frame = pub(b"nowhere.at.all", b"x", conn.inbox_prefix + b".n")
            result = run_sync(conn, spec, lambda _done: None, frame, native=native)
            assert (result.msgs, result.errors) == (0, 5)
            assert result.first_error.startswith("status 503")
    finally:
        conn.close()


def test_python_sync_loop_matches_the_c_loop(nats_server: servers.RunningServer) -> None:
    conn = Connection(Endpoint.parse(nats_server.url), name="test")
    try:
        conn.subscribe(b"echo.me")
        spec = ClientSpec(url=nats_server.url, role="request", index=0, msgs=50, size=1, subject="x")
        for native in (True, False):
            # a PING between requests and replies from ourselves: both loops must cope
            conn.send(b"PING\r\n")
            result = run_sync(conn, spec, lambda _done: None, pub(b"echo.me", b"x"), native=native)
            assert (result.msgs, result.errors, result.latency_count) == (50, 0, 50)
    finally:
        conn.close()


def test_cli_prints_json(nats_server: servers.RunningServer) -> None:
    out = CliRunner().invoke(bench, ["pub", "--url", nats_server.url, "--msgs", "1000", "--size", "8", "--json"])
    assert out.exit_code == 0, out.output
    result = json.loads(out.output)
    assert (result["verb"], result["totals"][0]["msgs"], result["errors"]) == ("pub", 1000, 0)


def test_cli_prints_a_table(nats_server: servers.RunningServer) -> None:
    out = CliRunner().invoke(bench, ["js", "pub", "--url", nats_server.url, "--msgs", "100", "--sync",
                                     "--storage", "memory", "--no-progress"])
    assert out.exit_code == 0, out.output
    assert "js-pub total" in out.output and "p50 µs" in out.output and "CPU over" in out.output


def test_cli_reports_an_unreachable_server() -> None:
    out = CliRunner().invoke(bench, ["pub", "--url", f"nats://127.0.0.1:{servers.free_port()}", "--msgs", "10"])
    assert out.exit_code == 1
    assert "ConnectionRefusedError" in out.output


@pytest.mark.slow
def test_replicated_stream_on_a_three_node_cluster() -> None:
    cluster = servers.start(servers.NATS_DEFAULT, nodes=3)
    try:
        report = run_bench(BenchRequest("js-pub", url=cluster.url, msgs=300, window=32, replicas=3, stream="r3",
                                        subject="js.r3"), server_pids=cluster.pids)
        assert report.errors == 0
        assert counts(report) == {"js-pub total": 300}
        assert report.server_cpu_s is not None and len(cluster.pids) == 3
    finally:
        cluster.stop()


def test_jetstream_push_with_ack_all_acks_as_it_goes(nats_server: servers.RunningServer) -> None:
    # more messages than max_ack_pending: acking only at the end would stall the consumer
    report = run_bench(BenchRequest("js-push", url=nats_server.url, msgs=25_000, size=8, ack="all",
                                    storage="memory", stream="pushall", subject="js.pushall"))
    assert report.errors == 0
    assert counts(report) == {"js-push total": 25_000}


def test_a_subscriber_without_publisher_gives_up_and_says_so(nats_server: servers.RunningServer) -> None:
    report = run_bench(BenchRequest("sub", url=nats_server.url, msgs=10, subject="nobody.publishes", timeout_s=0.3))
    assert report.errors == 1
    assert report.first_error == "idle for 0.3s after 0 of 10 messages"


def test_fetching_from_a_missing_consumer_stops_with_the_reason(nats_server: servers.RunningServer) -> None:
    conn = Connection(Endpoint.parse(nats_server.url), name="test")
    try:
        spec = ClientSpec(url=nats_server.url, role="js-fetch", index=0, msgs=10, size=1, subject="x",
                          stream="nostream", consumer="noconsumer", batch=5)
        result = js.run_js_fetch(conn, spec, lambda _done: None)
        assert (result.msgs, result.errors) == (0, 1)
        assert result.first_error == "status 503"
    finally:
        conn.close()


@pytest.mark.parametrize("native", [True, False])
def test_responders_echo_until_their_budget_is_served(nats_server: servers.RunningServer, native: bool) -> None:
    replier = Connection(Endpoint.parse(nats_server.url), name="replier")
    requester = Connection(Endpoint.parse(nats_server.url), name="requester")
    try:
        replier.subscribe(b"svc.echo", queue=b"bench")
        replier.flush()
        requester.ensure_inbox()
        for i in range(20):
            requester.send(pub(b"svc.echo", b"n%d" % i, requester.inbox_prefix + b".%d" % i))
        requester.send(b"PING\r\n")
        replier.send(b"PING\r\n")  # the PONG arrives mid-stream: the responder hands it to the full parser
        spec = ClientSpec(url=nats_server.url, role="reply", index=0, msgs=20, size=2, subject="svc.echo")
        result = core.run_reply(replier, spec, lambda _done: None, lambda: False, native=native)
        assert result.msgs == 20
        replies = sorted(requester.next_msg(5.0).payload for _ in range(20))
        assert replies == sorted(b"n%d" % i for i in range(20))
    finally:
        replier.close()
        requester.close()


def test_js_publishers_can_be_counted_with_pub(nats_server: servers.RunningServer) -> None:
    out = CliRunner().invoke(bench, ["js", "pub", "js.multi", "--url", nats_server.url, "--msgs", "400", "--pub", "2",
                                     "--window", "8", "--storage", "memory", "--stream", "multi", "--json"])
    assert out.exit_code == 0, out.output
    result = json.loads(out.output)
    assert [c["msgs"] for c in result["clients"]] == [200, 200]


@pytest.mark.parametrize("argv", [
    ["pubsub", "cli.pubsub", "--msgs", "500", "--pub", "1", "--sub", "2"],
    ["request", "cli.req", "--msgs", "50", "--clients", "2", "--repliers", "2"],
    ["js", "fetch", "cli.fetch", "--msgs", "300", "--batch", "50", "--ack", "all", "--storage", "memory",
     "--stream", "clifetch"],
    ["js", "push", "cli.push", "--msgs", "300", "--storage", "memory", "--stream", "clipush"],
    ["kv", "put", "--msgs", "50", "--keys", "5", "--bucket", "cliput"],
    ["kv", "get", "--msgs", "50", "--keys", "5", "--bucket", "cliget"],
])
def test_every_cli_verb_runs_cleanly(nats_server: servers.RunningServer, argv: list[str]) -> None:
    out = CliRunner().invoke(bench, [*argv, "--url", nats_server.url, "--size", "16", "--json",
                                     "--server-pid", str(nats_server.pid)])
    assert out.exit_code == 0, out.output
    result = json.loads(out.output)
    assert result["errors"] == 0 and result["cpu"]["server_s"] is not None
    assert all(row["msgs"] > 0 for row in result["totals"])
