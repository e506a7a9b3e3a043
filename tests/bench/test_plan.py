"""Which clients a bench request starts, and how the work is shared among them."""

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from appliance.bench import scan
from appliance.bench.plan import VERBS, BenchRequest, make_plan, split
from appliance.limits import BENCH_CLIENTS_MAX


@given(total=st.integers(min_value=0, max_value=10**9), parts=st.integers(min_value=1, max_value=64))
def test_split_shares_all_the_work_evenly(total: int, parts: int) -> None:
    shares = split(total, parts)
    assert len(shares) == parts and sum(shares) == total
    assert max(shares) - min(shares) <= 1


def roles(request: BenchRequest) -> list[tuple[str, int, int]]:
    return [(c.role, c.index, c.msgs) for c in make_plan(request).clients]


def test_publishers_share_the_messages_and_every_subscriber_expects_all() -> None:
    assert roles(BenchRequest("pubsub", msgs=10, pubs=3, subs=2)) == [
        ("pub", 0, 4), ("pub", 1, 3), ("pub", 2, 3), ("sub", 0, 10), ("sub", 1, 10)]


def test_request_brings_its_responders_unless_told_otherwise() -> None:
    assert roles(BenchRequest("request", msgs=10, clients=2)) == [
        ("request", 0, 5), ("request", 1, 5), ("reply", 0, 0)]
    assert roles(BenchRequest("request", msgs=10, repliers=0)) == [("request", 0, 10)]


def test_across_nodes_receivers_go_to_the_other_node_and_senders_wait_for_their_interest() -> None:
    plan = make_plan(BenchRequest("pubsub", url="nats://n1:1", sub_url="nats://n2:2", msgs=10, pubs=2, subs=3))
    assert [(c.role, c.url, c.probe, c.probe_answers) for c in plan.clients] == (
        [("pub", "nats://n1:1", "_BENCH_PROBE.bench", 3)] * 2 + [("sub", "nats://n2:2", "_BENCH_PROBE.bench", 2)] * 3)
    request = make_plan(BenchRequest("request", url="nats://n1:1", sub_url="nats://n2:2", msgs=10))
    assert [(c.role, c.url, c.probe_answers) for c in request.clients] == [
        ("request", "nats://n1:1", 1), ("reply", "nats://n2:2", 1)]
    alone = make_plan(BenchRequest("sub", url="nats://n1:1", sub_url="nats://n2:2"))
    assert [(c.url, c.probe) for c in alone.clients] == [("nats://n2:2", "")]  # nobody to wait for it
    assert all(c.probe == "" for c in make_plan(BenchRequest("pubsub", msgs=10)).clients)


def test_push_clients_each_read_the_whole_stream_with_their_own_consumer() -> None:
    plan = make_plan(BenchRequest("js-push", msgs=10, clients=2, consumer="c"))
    assert [(c.msgs, c.consumer) for c in plan.clients] == [(10, "c0"), (10, "c1")]


def test_every_verb_makes_a_plan() -> None:
    for verb in VERBS:
        assert make_plan(BenchRequest(verb, msgs=10)).clients


@pytest.mark.parametrize("request_", [BenchRequest("pub", msgs=0), BenchRequest("pub", size=-1),
                                      BenchRequest("pub", pubs=BENCH_CLIENTS_MAX + 1), BenchRequest("pub", pubs=0),
                                      BenchRequest("js-pub", window=-1), BenchRequest("js-fetch", batch=0),
                                      BenchRequest("js-pub", replicas=6), BenchRequest("request", repliers=-1)])
def test_impossible_requests_are_refused(request_: BenchRequest) -> None:
    with pytest.raises(ValueError):
        make_plan(request_)


def test_the_c_scanner_is_in_use_unless_disabled() -> None:
    if os.environ.get("APPLIANCE_NO_NATIVE") == "1":
        assert not scan.NATIVE
    else:
        assert scan.NATIVE, "appliance.bench._loadgen is not built: run `make test` (or set APPLIANCE_NO_NATIVE=1)"
