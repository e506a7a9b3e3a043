"""The meta state records, per stream and consumer, its RAFT group: name, peers, preferred leader
(and its created time), decided by placement when the asset is first proposed, kept on update,
across a snapshot, and for consumers following their stream."""

import random
from collections.abc import Callable

import pytest

from appliance.clock import ManualClock
from appliance.cluster.placement import PlacementError, ServerInfo
from appliance.jetstream.meta import MetaGroup


class Loop:
    def __init__(self) -> None:
        self.soon: list[Callable[[], None]] = []

    def call_soon(self, fn: Callable[[], None]) -> None:
        self.soon.append(fn)

    def call_later(self, delay_s: float, fn: Callable[[], None]) -> object:
        raise AssertionError("no timers expected")

    def settle(self) -> None:
        while self.soon:
            soon, self.soon = self.soon, []
            for fn in soon:
                fn()


def meta(loop: Loop) -> MetaGroup:
    return MetaGroup(root=None, peer="p1", clock=ManualClock(), rng=random.Random(1), scheduler=loop,
                     server_name="n1", cluster="C1")


def stream_put(name: str, replicas: int = 1, created: int = 7) -> dict[str, object]:
    config = {"name": name, "num_replicas": replicas}
    return {"op": "stream_put", "acc": "A", "config": config, "created": created}


def consumer_put(stream: str, name: str) -> dict[str, object]:
    return {"op": "consumer_put", "acc": "A", "stream": stream, "config": {"name": name}, "created": 9}


def test_a_new_stream_and_its_consumer_record_their_group() -> None:
    loop = Loop()
    group = meta(loop)
    done: list[bool] = []
    group.propose(stream_put("S"), done.append)
    group.propose(consumer_put("S", "D"), done.append)
    loop.settle()
    assert done == [True, True]
    record = group.state.accounts["A"]["S"]
    assert record["created"] == 7
    stream_group = record["group"]
    assert isinstance(stream_group, dict)
    assert stream_group["peers"] == ["p1"] and stream_group["preferred"] == "p1"
    assert str(stream_group["name"]).startswith("S-")
    consumers = record["consumers"]
    assert isinstance(consumers, dict)
    consumer_group = consumers["D"]["group"]
    assert consumer_group["peers"] == ["p1"] and str(consumer_group["name"]).startswith("C-")
    assert group.state.group_of("A", "S") == stream_group
    assert group.state.group_of("A", "S", "D") == consumer_group


def test_an_update_keeps_the_placement_and_a_snapshot_keeps_the_groups() -> None:
    loop = Loop()
    group = meta(loop)
    group.propose(stream_put("S"), lambda ok: None)
    loop.settle()
    before = group.state.group_of("A", "S")
    group.servers = [ServerInfo("n2", "p2", "C1")]  # placement would now choose another server
    group.propose(stream_put("S", created=7), lambda ok: None)
    loop.settle()
    assert group.state.group_of("A", "S") == before
    twin = meta(Loop())
    twin.state.restore(group.state.snapshot())
    assert twin.state.group_of("A", "S") == before


def test_a_server_without_a_cluster_holds_every_asset_itself() -> None:
    loop = Loop()
    alone = MetaGroup(root=None, peer="p1", clock=ManualClock(), rng=random.Random(1), scheduler=loop)
    op = stream_put("S")
    op["config"] = {"name": "S", "placement": {"cluster": "ELSEWHERE"}}
    alone.propose(op, lambda ok: None)
    loop.settle()
    recorded = alone.state.group_of("A", "S")
    assert isinstance(recorded, dict) and (recorded["peers"], recorded["preferred"]) == (["p1"], "p1")


def test_more_replicas_than_servers_is_refused_before_anything_is_proposed() -> None:
    loop = Loop()
    group = meta(loop)
    with pytest.raises(PlacementError, match="no suitable peers for placement"):
        group.propose(stream_put("S", replicas=3), lambda ok: None)
    loop.settle()
    assert group.state.accounts == {}
