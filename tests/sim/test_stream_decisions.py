"""A replicated stream's leader decides every publish when it proposes it, counting what it has
proposed and not applied yet (jetstream/decide.py); the replicated entry carries the decision and
the replicas store it without checking again. Three real Stream replicas over the simulator's
network (appliance/testing/sim/streams.py); no sockets, no real clock.

The leader is cut off from its followers while it decides, so nothing commits: what is answered
then was answered without a quorum, from the decision alone (a refusal needs no proposal)."""

import json

import pytest

from appliance.jetstream import ops
from appliance.jetstream.config import parse_stream_config
from appliance.testing.sim.streams import Replica, StreamReplicas

SEEDS = [1, 2, 3]


def acks(replica: Replica) -> dict[bytes, dict[str, object]]:
    return {reply: json.loads(body) for reply, body in replica.host.sent if reply.startswith(b"r.")}


def header(*pairs: tuple[str, str]) -> bytes:
    return b"NATS/1.0\r\n" + b"".join(f"{k}: {v}\r\n".encode() for k, v in pairs) + b"\r\n"


def contents(replica: Replica) -> list[tuple[int, str, bytes, bytes, int]]:
    store = replica.stream.store
    return [(m.seq, m.subject, m.headers, m.payload, m.timestamp_ns) for m in store.scan(1)]


def isolated_leader(replicas: StreamReplicas) -> Replica:
    leader = replicas.elect()
    replicas.run_until(leader.stream.group.ready_to_lead)
    replicas.network.partition({leader.name}, list(replicas.peers))
    return leader


def turn(replicas: StreamReplicas, ticks: int = 3) -> None:
    for _ in range(ticks):  # far shorter than an election timeout: the leader stays leader
        replicas.step()


def error(body: dict[str, object]) -> tuple[int, str]:
    err = body["error"]
    assert isinstance(err, dict)
    return int(err["err_code"]), str(err["description"])


def decided_entries(replica: Replica) -> list[bytes]:
    log = replica.stream.group.core.log
    entries = log.slice(log.first_index(), log.last_index() + 1, 1 << 30)
    return [entry.data for entry in entries if entry.data[:1] == b"S"]


def settle(replicas: StreamReplicas, leader: Replica, replies: list[bytes]) -> None:
    replicas.network.heal()
    replicas.run_until(lambda: all(r in acks(leader) for r in replies))
    last = leader.stream.store.state().last_seq
    replicas.run_until(lambda: all(r.stream.store.state().last_seq == last for r in replicas.replicas.values()))


@pytest.mark.sim
@pytest.mark.parametrize("seed", SEEDS)
def test_a_second_in_flight_publish_with_the_same_msg_id_is_refused_at_once_and_stored_once(seed: int) -> None:
    replicas = StreamReplicas(seed=seed)
    leader = isolated_leader(replicas)
    leader.publish("s.a", b"one", reply="r.1", header=header(("Nats-Msg-Id", "x")))
    turn(replicas)
    leader.publish("s.a", b"two", reply="r.2", header=header(("Nats-Msg-Id", "x")))
    turn(replicas)
    # answered while the first is still in flight (no quorum yet): nats-server's conflict error
    assert b"r.1" not in acks(leader)
    assert error(acks(leader)[b"r.2"]) == (10158, "duplicate message id is in process")
    settle(replicas, leader, [b"r.1"])
    assert acks(leader)[b"r.1"] == {"stream": "S", "seq": 1}
    leader.publish("s.a", b"three", reply="r.3", header=header(("Nats-Msg-Id", "x")))
    replicas.run_until(lambda: b"r.3" in acks(leader))
    assert acks(leader)[b"r.3"] == {"stream": "S", "seq": 1, "duplicate": True}
    for replica in replicas.replicas.values():
        assert [m[2:4] for m in contents(replica)] == [(header(("Nats-Msg-Id", "x")), b"one")]


@pytest.mark.sim
@pytest.mark.parametrize("seed", SEEDS)
def test_expected_last_sequence_counts_in_flight_publishes(seed: int) -> None:
    replicas = StreamReplicas(seed=seed)
    leader = isolated_leader(replicas)
    leader.publish("s.a", b"one", reply="r.1")
    leader.publish("s.b", b"two", reply="r.2", header=header(("Nats-Expected-Last-Sequence", "1")))
    leader.publish("s.c", b"late", reply="r.3", header=header(("Nats-Expected-Last-Sequence", "1")))
    turn(replicas)
    assert set(acks(leader)) == {b"r.3"}, "only the refusal is answered before the quorum"
    assert error(acks(leader)[b"r.3"]) == (10071, "wrong last sequence: 2")
    (entry,) = decided_entries(leader)  # one proposal: the two accepted messages, from sequence 1
    first, msgs = ops.decode_decided(entry)
    assert (first, [m.payload for m in msgs]) == (1, [b"one", b"two"])
    settle(replicas, leader, [b"r.1", b"r.2"])
    assert acks(leader)[b"r.2"] == {"stream": "S", "seq": 2}


@pytest.mark.sim
@pytest.mark.parametrize("seed", SEEDS)
def test_expected_last_subject_sequence_is_refused_while_its_subject_is_in_flight(seed: int) -> None:
    replicas = StreamReplicas(seed=seed)
    leader = isolated_leader(replicas)
    leader.publish("s.k", b"v1", reply="r.1", header=header(("Nats-Expected-Last-Subject-Sequence", "0")))
    leader.publish("s.k", b"v2", reply="r.2", header=header(("Nats-Expected-Last-Subject-Sequence", "0")))
    leader.publish("s.j", b"w1", reply="r.3", header=header(("Nats-Expected-Last-Subject-Sequence", "0")))
    turn(replicas)
    assert set(acks(leader)) == {b"r.2"}
    assert error(acks(leader)[b"r.2"]) == (10164, "wrong last sequence")
    settle(replicas, leader, [b"r.1", b"r.3"])
    leader.publish("s.k", b"v2", reply="r.4", header=header(("Nats-Expected-Last-Subject-Sequence", "0")))
    replicas.run_until(lambda: b"r.4" in acks(leader))
    assert error(acks(leader)[b"r.4"]) == (10071, "wrong last sequence: 1")  # applied now: the stored one


@pytest.mark.sim
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(
    ("limit", "text"),
    [({"max_msgs": 2}, "maximum messages exceeded"), ({"max_bytes": 100}, "maximum bytes exceeded"),
     ({"max_msgs_per_subject": 2, "discard_new_per_subject": True}, "maximum messages per subject exceeded")],
)
def test_discard_new_counts_in_flight_messages(seed: int, limit: dict[str, object], text: str) -> None:
    config = parse_stream_config({"name": "S", "subjects": ["s.>"], "discard": "new", **limit})
    replicas = StreamReplicas(seed=seed, config=config)
    leader = isolated_leader(replicas)
    for n in range(3):
        leader.publish("s.a", b"x" * 20, reply=f"r.{n}")
    turn(replicas)
    assert set(acks(leader)) == {b"r.2"}, "the third is refused before the first two commit"
    assert error(acks(leader)[b"r.2"]) == (10077, text)
    settle(replicas, leader, [b"r.0", b"r.1"])
    for replica in replicas.replicas.values():
        assert replica.stream.store.state().msgs == 2


@pytest.mark.sim
@pytest.mark.parametrize("seed", SEEDS)
def test_rollup_and_expected_last_msg_id_are_decided_on_the_leader(seed: int) -> None:
    config = parse_stream_config({"name": "S", "subjects": ["s.>"], "allow_rollup_hdrs": True})
    replicas = StreamReplicas(seed=seed, config=config)
    leader = isolated_leader(replicas)
    leader.publish("s.a", b"1", reply="r.1", header=header(("Nats-Msg-Id", "a")))
    leader.publish("s.a", b"2", reply="r.2", header=header(("Nats-Expected-Last-Msg-Id", "a")))
    leader.publish("s.a", b"3", reply="r.3", header=header(("Nats-Expected-Last-Msg-Id", "a")))
    leader.publish("s.a", b"4", reply="r.4", header=header(("Nats-Rollup", "bogus")))
    leader.publish("s.b", b"5", reply="r.5", header=header(("Nats-Rollup", "all")))
    turn(replicas)
    assert set(acks(leader)) == {b"r.3", b"r.4"}
    assert error(acks(leader)[b"r.3"]) == (10070, "wrong last msg ID: ")  # the second had no id
    assert error(acks(leader)[b"r.4"]) == (10111, 'rollup value invalid: "bogus"')
    settle(replicas, leader, [b"r.1", b"r.2", b"r.5"])
    stores = [contents(r) for r in replicas.replicas.values()]
    assert stores[0] == stores[1] == stores[2]
    assert [m[0] for m in stores[0]] == [3]  # the rollup kept only itself, on every replica


@pytest.mark.sim
@pytest.mark.parametrize("seed", SEEDS)
def test_replicas_stay_identical_under_mixed_decisions(seed: int) -> None:
    config = parse_stream_config({"name": "S", "subjects": ["s.>"], "discard": "new", "max_msgs_per_subject": 3,
                                  "discard_new_per_subject": True, "allow_rollup_hdrs": True})
    replicas = StreamReplicas(seed=seed, config=config)
    leader = replicas.elect()
    replies = []
    for n in range(60):
        pairs = []
        if n % 3 == 0:
            pairs.append(("Nats-Msg-Id", f"id{n % 7}"))
        if n % 11 == 5:
            pairs.append(("Nats-Rollup", "sub"))
        if n % 13 == 4:
            pairs.append(("Nats-Expected-Last-Sequence", str(n // 2)))
        leader.publish(f"s.{n % 4}", b"p%d" % n, reply=f"r.{n}", header=header(*pairs) if pairs else b"")
        replies.append(f"r.{n}".encode())
        if n % 5 == 0:
            replicas.step()
    replicas.run_until(lambda: all(r in acks(leader) for r in replies))
    last = leader.stream.store.state().last_seq
    replicas.run_until(lambda: all(r.stream.store.state().last_seq == last for r in replicas.replicas.values()))
    stores = [contents(r) for r in replicas.replicas.values()]
    assert stores[0] == stores[1] == stores[2]
    stored = {int(a["seq"]) for a in acks(leader).values() if "error" not in a and not a.get("duplicate")}
    assert stored == set(range(1, last + 1)), "every accepted publish got its own sequence, in order"
    assert all(r.stream.mismatches == 0 for r in replicas.replicas.values())


@pytest.mark.sim
def test_a_leader_whose_own_batch_does_not_follow_its_store_refuses_it_and_decides_again() -> None:
    replicas = StreamReplicas(seed=6)
    leader = isolated_leader(replicas)
    leader.publish("s.a", b"one", reply="r.1")
    turn(replicas)
    for replica in replicas.replicas.values():  # every replica gets a message the leader did not decide
        replica.stream.store.store_msg("s.x", b"", b"stray", 1)
    replicas.network.heal()
    replicas.run_until(lambda: b"r.1" in acks(leader))
    assert error(acks(leader)[b"r.1"]) == (10063, "expected stream sequence does not match")
    leader.publish("s.a", b"two", reply="r.2")
    replicas.run_until(lambda: b"r.2" in acks(leader))
    assert acks(leader)[b"r.2"] == {"stream": "S", "seq": 2}
    replicas.run_until(lambda: all(r.stream.store.state().last_seq == 2 for r in replicas.replicas.values()))
    stores = [contents(r) for r in replicas.replicas.values()]
    assert stores[0] == stores[1] == stores[2]
