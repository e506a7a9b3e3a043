"""The JetStream rows of `make bench`: every issue row at 128 B and 1 KiB, fewer messages against
nats-server sync=always (said in the table), sync p99, and where the appliance client landed."""

import pytest

from appliance.bench import servers
from appliance.bench.compare import ALWAYS_MSGS, SCENARIOS, Cell, placement, scaled
from appliance.bench.servers import APPLIANCE, NATS_DEFAULT, NATS_SYNC_ALWAYS
from appliance.bench.table import markdown

from .test_output import INFO

BY_KEY = {s.key: s for s in SCENARIOS}
TARGETS = (NATS_DEFAULT, NATS_SYNC_ALWAYS, APPLIANCE)


@pytest.mark.parametrize("tag,size", [("", 128), ("-1k", 1024)])
def test_the_issue_rows_exist_at_both_sizes(tag: str, size: int) -> None:
    async_pub = BY_KEY[f"js-pub-async{tag}"].request
    assert (async_pub.verb, async_pub.window, async_pub.size) == ("js-pub", 256, size)
    sync_pub = BY_KEY[f"js-pub-sync{tag}"].request
    assert (sync_pub.verb, sync_pub.window, sync_pub.size) == ("js-pub", 0, size)
    for ack in ("explicit", "all"):
        fetch = BY_KEY[f"js-fetch-{ack}{tag}"].request
        assert (fetch.verb, fetch.ack, fetch.batch, fetch.size) == ("js-fetch", ack, 500, size)


def test_only_nats_server_sync_always_runs_fewer_messages_and_never_more() -> None:
    scenario = BY_KEY["js-pub-async"]
    assert scenario.request_for(NATS_DEFAULT, 0.25) == scaled(scenario.request, 0.25)
    assert scenario.request_for(APPLIANCE, 0.25).msgs == 50_000
    assert scenario.request_for(NATS_SYNC_ALWAYS, 0.25).msgs == ALWAYS_MSGS // 4
    assert scenario.request_for(NATS_SYNC_ALWAYS, 0.01).msgs == 200  # scaled like the rest
    sync = BY_KEY["js-pub-sync"]  # one fsync per message for every server: the same count
    assert sync.request_for(NATS_SYNC_ALWAYS, 0.25) == sync.request_for(APPLIANCE, 0.25)
    small = BY_KEY["kv-put"]
    assert small.request_for(NATS_SYNC_ALWAYS, 1.0).msgs == small.request.msgs


def test_placement_names_the_worker_from_the_client_id() -> None:
    # appliance hands out client ids worker + 1 + k * workers
    assert [placement((cid,), 2) for cid in (1, 2, 3, 4, 5)] == ["w0", "w1", "w0", "w1", "w0"]
    assert placement((7, 9, 8), 3) == "w0+w2+w1"
    assert placement((4,), 1) == ""  # one process: nothing to say
    assert placement((), 2) == "" and placement((0,), 2) == "w?"


def test_the_table_has_p99_placement_per_round_and_the_differing_message_counts() -> None:
    scenarios = (BY_KEY["js-pub-sync"], BY_KEY["js-pub-async-1k"])
    cells = {
        "js-pub-sync": {
            NATS_DEFAULT.name: Cell([7000.0], p50_us=[98.0], p99_us=[250.0], msgs=5000),
            NATS_SYNC_ALWAYS.name: Cell([1100.0], p50_us=[620.0], p99_us=[2100.0], msgs=5000),
            APPLIANCE.name: Cell([900.0, 950.0], p50_us=[990.0, 1000.0], p99_us=[3000.0, 3100.0],
                                 server_cores=[0.5, 0.5], server_us_per_msg=[500.0, 540.0],
                                 placement=["w1", "w0"], msgs=5000),
        },
        "js-pub-async-1k": {
            NATS_DEFAULT.name: Cell([100_000.0], msgs=50_000),
            NATS_SYNC_ALWAYS.name: Cell([2_000.0], msgs=5_000),
            APPLIANCE.name: Cell([60_000.0], placement=["w0"], msgs=50_000),
        },
    }
    text = markdown(cells, scenarios, TARGETS, info=INFO, rounds=2, scale=0.25)
    lines = text.splitlines()
    sync_latency = [line for line in lines if line.startswith("| JS R1 sync pub 128 B |")][1]
    assert "| 98 / 250 / " in sync_latency and "| 995 / 3,050 / " in sync_latency
    assert " / 0.50 / 520.0 / " in sync_latency  # server cores busy, then server CPU µs per message
    assert "| JS R1 sync pub 128 B | appliance | w1 900, w0 950 | w0 950 (1), w1 900 (1) |" in lines
    assert "| JS R1 async pub 1 KiB, window 256 | appliance | w0 60,000 | w0 60,000 (1) |" in lines
    counts = next(line for line in lines if line.startswith("Messages per run where they differ"))
    assert "JS R1 async pub 1 KiB, window 256: nats-server 50,000, nats-server sync=always 5,000" in counts
    assert "JS R1 sync pub" not in counts


@pytest.mark.integration
def test_an_appliance_server_counts_its_workers() -> None:
    server = servers.start(APPLIANCE)
    try:
        assert server.workers() >= 1
    finally:
        server.stop()
    nats = servers.start(NATS_DEFAULT)
    try:
        assert nats.workers() == 1
    finally:
        nats.stop()
