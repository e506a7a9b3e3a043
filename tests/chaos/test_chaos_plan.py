"""The chaos suite's pure parts: the seeded fault plan and the verdict on replicas' copies."""

import pytest
from hypothesis import given, strategies as st

from appliance.store.api import StoredMsg
from appliance.testing import chaos_plan
from appliance.testing.chaos import ack_stream_seq
from appliance.testing.chaos_ops import stepdown_subject, stream_peers
from appliance.testing.chaos_plan import Record, judge


def rec(seq: int, msg_id: str | None, payload: bytes = b"x", ts: int = 7) -> Record:
    return Record.of(StoredMsg(seq, "chaos.m", b"NATS/1.0\r\n\r\n", payload, ts), msg_id)


@given(st.integers(0, 2**32), st.integers(0, 40))
def test_a_seed_always_gives_the_same_plan(seed: int, faults: int) -> None:
    assert chaos_plan.plan(seed, faults) == chaos_plan.plan(seed, faults)
    assert len(chaos_plan.plan(seed, faults)) == faults


def test_plans_stay_within_the_kinds_asked_and_their_bounds() -> None:
    faults = chaos_plan.plan(5, 200, (chaos_plan.KILL_LEADER, chaos_plan.PAUSE_OTHER))
    assert {f.kind for f in faults} == {chaos_plan.KILL_LEADER, chaos_plan.PAUSE_OTHER}
    assert all(f.victim == 0 for f in faults if f.kind == chaos_plan.KILL_LEADER)
    pauses = [f.hold_s for f in faults if f.kind == chaos_plan.PAUSE_OTHER]
    assert chaos_plan.PAUSE_MIN_S <= min(pauses) and max(pauses) <= chaos_plan.PAUSE_MAX_S
    assert all(chaos_plan.GAP_MIN_S <= f.gap_s <= chaos_plan.GAP_MAX_S for f in faults)
    assert chaos_plan.plan(1, 50) != chaos_plan.plan(2, 50)


def test_unknown_fault_kinds_are_refused() -> None:
    with pytest.raises(ValueError, match="bit-rot"):
        chaos_plan.parse_kinds("kill-leader,bit-rot")
    with pytest.raises(ValueError):
        chaos_plan.parse_kinds("")
    assert chaos_plan.parse_kinds("all") == chaos_plan.FAULT_KINDS
    assert chaos_plan.parse_kinds(" pause-leader , restart") == ("pause-leader", "restart")


def test_identical_copies_of_every_acked_id_are_clean() -> None:
    copy = [rec(1, "a"), rec(2, "b"), rec(3, None)]
    verdict = judge({"a", "b"}, {"n1": copy, "n2": list(copy), "n3": list(copy)})
    assert verdict.clean and verdict.acknowledged == 2 and verdict.examples == []


def test_an_acked_id_missing_on_one_replica_is_lost_once_and_that_replica_diverged() -> None:
    full = [rec(1, "a"), rec(2, "b")]
    verdict = judge({"a", "b"}, {"n1": full, "n2": list(full), "n3": [rec(1, "a")]})
    assert (verdict.lost, verdict.duplicated, verdict.diverged) == (1, 0, 1)
    assert "n3: lost b" in verdict.examples
    assert any(e.startswith("n3: diverged (1 records vs 2)") for e in verdict.examples)


def test_an_id_stored_twice_everywhere_is_duplicated_not_diverged() -> None:
    copy = [rec(1, "a"), rec(2, "a")]
    verdict = judge({"a"}, {"n1": copy, "n2": list(copy), "n3": list(copy)})
    assert (verdict.lost, verdict.duplicated, verdict.diverged) == (0, 1, 0)


def test_a_replica_with_other_bytes_or_times_diverged() -> None:
    copy = [rec(1, "a")]
    assert judge({"a"}, {"n1": copy, "n2": copy, "n3": [rec(1, "a", payload=b"y")]}).diverged == 1
    other_time = judge({"a"}, {"n1": copy, "n2": [rec(1, "a", ts=8)], "n3": copy})
    assert other_time.diverged == 1 and "n2: diverged (at seq 1" in other_time.examples[0]


def test_an_unacked_stored_message_is_neither_lost_nor_duplicated() -> None:
    copy = [rec(1, "a"), rec(2, "given-up")]
    assert judge({"a"}, {"n1": copy, "n2": copy, "n3": copy}).clean


def test_the_ack_floor_may_not_cover_a_sequence_never_delivered() -> None:
    assert chaos_plan.ack_floor_ahead(3, delivered=[1, 2, 3, 5], stored=[1, 2, 3, 4, 5]) == []
    assert chaos_plan.ack_floor_ahead(5, delivered=[1, 2, 3, 5], stored=[1, 2, 3, 4, 5]) == [4]
    assert chaos_plan.ack_floor_ahead(0, delivered=[], stored=[1, 2]) == []


def test_verdicts_add_up_into_the_one_line() -> None:
    total = chaos_plan.Verdict()
    total.add(chaos_plan.Verdict(acknowledged=10, lost=1, examples=["x"]))
    total.add(chaos_plan.Verdict(acknowledged=5, diverged=2))
    assert chaos_plan.summary_line(2, total) == (
        "runs=2 acknowledged=15 lost=1 duplicated=0 diverged=2 ack_floor_ahead=0 acks_lost=0")
    assert not total.clean and total.examples == ["x"]


def test_the_stream_sequence_of_both_ack_subject_forms() -> None:
    assert ack_stream_seq("$JS.ACK.S.C.1.42.7.1700000000.3") == 42
    assert ack_stream_seq("$JS.ACK.dom.ACCHASH.S.C.2.43.8.1700000000.0.tok") == 43
    with pytest.raises(ValueError):
        ack_stream_seq("_INBOX.abc")


@given(st.integers(0, 2**32), st.integers(0, 30))
def test_a_plan_as_long_as_the_kinds_has_each_of_them(seed: int, extra: int) -> None:
    kinds = chaos_plan.FAULT_KINDS
    faults = chaos_plan.plan(seed, len(kinds) + extra)
    assert {f.kind for f in faults} == set(kinds)


def test_the_floor_confirmed_acks_promise_stops_at_the_first_unconfirmed_message() -> None:
    assert chaos_plan.confirmed_floor([1, 2, 3, 5], stored=[1, 2, 3, 4, 5]) == 3
    assert chaos_plan.confirmed_floor([1, 2, 3, 5], stored=[1, 2, 3, 5]) == 5  # 4 was never stored
    assert chaos_plan.confirmed_floor([2], stored=[1, 2]) == 0
    assert not chaos_plan.Verdict(acks_lost=1).clean


def test_a_failover_lasts_until_the_first_ack_of_a_publish_begun_after_the_kill() -> None:
    acks = [(0.0, 1.0), (1.0, 5.5), (5.5, 5.6), (9.0, 9.2)]  # (first attempt, PubAck)
    assert chaos_plan.failover_times([0.5, 5.0, 10.0], acks) == pytest.approx([5.0, 0.6])


def test_a_delivery_with_an_internal_reply_or_subject_is_refused() -> None:
    from appliance.testing.chaos import delivery_seq

    assert delivery_seq(b"chaos.m", b"$JS.ACK.CHAOS.C.1.7.7.1795808106603196340.3") == 7
    with pytest.raises(ValueError, match="not an ack subject"):  # the route's `reply@subject` form leaked
        delivery_seq(b"chaos.m", b"$JS.ACK.CHAOS.C.1.7.7.1795808106603196340.3@chaos.m")
    with pytest.raises(ValueError, match="delivery on subject"):
        delivery_seq(b"_INBOX.x.pull", b"$JS.ACK.CHAOS.C.1.7.7.1795808106603196340.3")


def test_operator_faults_aim_at_the_current_leader_or_a_peer_within_their_bounds() -> None:
    faults = chaos_plan.plan(11, 300, (*chaos_plan.STEPDOWNS, chaos_plan.PEER_REMOVE))
    assert {f.kind for f in faults} == {*chaos_plan.STEPDOWNS, chaos_plan.PEER_REMOVE}
    stepdowns = [f for f in faults if f.kind in chaos_plan.STEPDOWNS]
    assert all(f.victim == 0 and f.hold_s == 0.0 for f in stepdowns)  # the group's leader, nothing to heal
    removals = [f for f in faults if f.kind == chaos_plan.PEER_REMOVE]
    assert chaos_plan.PEER_REMOVE_MIN_S <= min(f.hold_s for f in removals)
    assert max(f.hold_s for f in removals) <= chaos_plan.PEER_REMOVE_MAX_S
    assert len({f.victim % 3 for f in removals}) == 3  # the leader and both others get removed
    assert all(chaos_plan.GAP_MIN_S <= f.gap_s <= chaos_plan.GAP_MAX_S for f in faults)


def test_a_default_run_has_every_kind_once_and_the_crash_kinds_plans_are_unchanged() -> None:
    every = chaos_plan.FAULT_KINDS
    assert sorted(f.kind for f in chaos_plan.plan(9, len(every))) == sorted(every)
    # the kinds before the operator's faults draw what they drew: a seed of the earlier soaks replays
    crashes = chaos_plan.FAULT_KINDS[:8]
    assert [(f.kind, f.victim, f.hold_s, f.gap_s) for f in chaos_plan.plan(3, 8, crashes)][:3] == [
        ("kill-leader", 0, 0.939, 0.411), ("kill-all", 1725, 1.363, 1.098),
        ("partition-other", 30714, 3.15, 1.519)]
    assert chaos_plan.parse_kinds("stepdown-meta,peer-remove") == ("stepdown-meta", "peer-remove")


def test_a_peer_removes_victim_indexes_the_streams_peers_leader_first() -> None:
    info = {"cluster": {"leader": "n2", "replicas": [{"name": "n3"}, {"name": "n1"}]}}
    assert stream_peers(info) == ["n2", "n1", "n3"]
    assert stream_peers({"cluster": {}}) == [] and stream_peers({}) == []


def test_each_step_down_kind_has_its_api_subject() -> None:
    assert stepdown_subject(chaos_plan.STEPDOWN_STREAM, "S", "C") == "$JS.API.STREAM.LEADER.STEPDOWN.S"
    assert stepdown_subject(chaos_plan.STEPDOWN_CONSUMER, "S", "C") == "$JS.API.CONSUMER.LEADER.STEPDOWN.S.C"
    assert stepdown_subject(chaos_plan.STEPDOWN_META, "S", "C") == "$JS.API.META.LEADER.STEPDOWN"
    with pytest.raises(ValueError):
        stepdown_subject(chaos_plan.KILL_LEADER, "S", "C")
