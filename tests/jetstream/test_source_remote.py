"""Reading a source or mirror whose origin is on other servers (jetstream/source_remote.py): the
pure parts (ack reply parsing, where the consumer starts, what a delivery means) and RemoteOrigin's
consumer life with a fake clock, loop and client (no sockets)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from appliance import limits
from appliance.errors import NotLeader
from appliance.jetstream import source_remote
from appliance.jetstream.source_remote import (
    Delivery,
    RemoteOrigin,
    consumer_request,
    heartbeat_gap,
    next_step,
    parse_ack_reply,
    start_policy,
)
from appliance.jetstream.sources import SourceState
from appliance.jetstream.wire import status_headers

NS = 1_000_000_000
names = st.text("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-", min_size=1, max_size=12)
counts = st.integers(min_value=0, max_value=2**63)


@given(names, names, counts, counts, counts, counts, counts)
def test_a_v1_ack_reply_gives_back_every_number(stream: str, consumer: str, dc: int, sseq: int, cseq: int,
                                                ts: int, pending: int) -> None:
    reply = f"$JS.ACK.{stream}.{consumer}.{dc}.{sseq}.{cseq}.{ts}.{pending}"
    assert parse_ack_reply(reply.encode()) == Delivery(stream, consumer, dc, sseq, cseq, ts, pending)


@given(names, names, counts, counts, counts)
def test_a_v2_ack_reply_with_domain_account_and_token_is_read_too(stream: str, consumer: str, sseq: int,
                                                                  cseq: int, pending: int) -> None:
    reply = f"$JS.ACK.hub.ACCHASH.{stream}.{consumer}.1.{sseq}.{cseq}.1700000000000000000.{pending}.tok"
    got = parse_ack_reply(reply)
    assert got is not None and (got.stream, got.consumer, got.sseq, got.cseq, got.pending) == (
        stream, consumer, sseq, cseq, pending)


@given(st.binary(max_size=80))
def test_anything_else_is_not_an_ack_reply_and_never_raises(reply: bytes) -> None:
    got = parse_ack_reply(reply)
    assert got is None or reply.startswith(b"$JS.ACK.")


@pytest.mark.parametrize("reply", [None, b"", b"_INBOX.x", b"$JS.ACK.S.C.1.2.3.4", b"$JS.ACK.S.C.1.x.3.4.5",
                                   b"$JS.FC.S.C.abc", b"$JS.ACK.S.C.1.2.-3.4.5"])
def test_malformed_replies_are_refused(reply: bytes | None) -> None:
    assert parse_ack_reply(reply) is None


def test_the_consumer_starts_at_the_next_needed_sequence_else_at_the_source_start() -> None:
    assert start_policy(42, 5, 7) == {"deliver_policy": "by_start_sequence", "opt_start_seq": 42}
    assert start_policy(0, 5, 7) == {"deliver_policy": "by_start_sequence", "opt_start_seq": 5}
    assert start_policy(0, 0, 1_700_000_000 * NS) == {"deliver_policy": "by_start_time",
                                                      "opt_start_time": "2023-11-14T22:13:20Z"}
    assert start_policy(0, 0, 0) == {"deliver_policy": "all"}


def test_the_consumer_request_is_a_flow_controlled_ack_none_push_consumer_that_expires() -> None:
    body = consumer_request("ORIG", "$JSMIR.x.0.1.d", {"deliver_policy": "all"}, ["a.>"])
    config = body["config"]
    assert body["stream_name"] == "ORIG"
    assert isinstance(config, dict)
    assert config["deliver_subject"] == "$JSMIR.x.0.1.d" and config["ack_policy"] == "none"
    assert config["flow_control"] is True
    assert config["idle_heartbeat"] == int(limits.JS_SOURCE_HEARTBEAT_S * NS)
    assert config["inactive_threshold"] > config["idle_heartbeat"]  # type: ignore[operator]
    assert config["filter_subject"] == "a.>" and "filter_subjects" not in config
    two = consumer_request("O", "d", {}, ["a", "b"])["config"]
    assert isinstance(two, dict) and two["filter_subjects"] == ["a", "b"] and "filter_subject" not in two
    assert "filter_subject" not in consumer_request("O", "d", {}, [])["config"]  # type: ignore[operator]


def delivery(sseq: int, cseq: int) -> Delivery:
    return Delivery("O", "C", 1, sseq, cseq, 0, 0)


def test_a_delivery_is_copied_skipped_or_restarts_the_consumer() -> None:
    assert next_step(3, delivery(10, 3), last_copied=9) == "copy"
    assert next_step(3, delivery(12, 3), last_copied=9) == "copy"  # origin gaps are the mirror's too
    assert next_step(3, delivery(9, 3), last_copied=9) == "skip"  # copied already (a new consumer)
    assert next_step(3, delivery(10, 4), last_copied=9) == "restart"  # a delivery was lost
    assert next_step(3, delivery(10, 1), last_copied=9) == "restart"  # another consumer


def test_a_heartbeat_naming_a_later_consumer_sequence_is_a_gap() -> None:
    def beat(last: int) -> bytes:
        pairs = [("Nats-Last-Consumer", str(last)), ("Nats-Last-Stream", "9")]
        return status_headers(100, "Idle Heartbeat", pairs)

    assert not heartbeat_gap(5, beat(4))
    assert heartbeat_gap(5, beat(5))
    assert not heartbeat_gap(5, status_headers(100, "Idle Heartbeat"))


# --- RemoteOrigin with fakes -------------------------------------------------------------------


class FakeClient:
    def __init__(self, server: object, account: object, name: str) -> None:
        self.closed = False
        self.subs: dict[bytes, object] = {}
        self.sent: list[tuple[str, bytes, str]] = []

    def subscribe(self, subject: bytes, handler: object) -> bytes:
        self.subs[subject] = handler
        return subject

    def unsubscribe(self, sub: bytes) -> None:
        self.subs.pop(sub, None)

    def publish(self, subject: bytes, payload: bytes, reply: bytes | None = None) -> None:
        self.sent.append((subject.decode(), payload, (reply or b"").decode()))

    def close(self) -> None:
        self.closed = True


class Harness:
    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, mirror: bool = True, next_seq: int = 0) -> None:
        monkeypatch.setattr(source_remote, "InternalClient", FakeClient)
        self.now = 1000 * NS
        self.soon: list[object] = []
        self.proposed: list[tuple[list[list[object]], object]] = []
        self.copied: list[tuple[int, str, bytes, bytes]] = []
        self.refuse = False
        ajs = SimpleNamespace(now_ns=lambda: self.now, call_soon=self.soon.append, server=None, account=None)
        store = SimpleNamespace(state=lambda: SimpleNamespace(last_seq=0))
        self.sourcing = SimpleNamespace(
            ajs=ajs, ident="ID", stream=SimpleNamespace(config=SimpleNamespace(name="MIR"), store=store),
            copy_one=lambda _s, _i, seq, subject, headers, payload: self.copied.append(
                (seq, subject, headers, payload)),
            mirror_batch=lambda _s, got: [[seq, subject, "", "", ts] for seq, subject, _h, _p, ts in got],
            propose_mirror=self.propose,
        )
        self.source = SourceState(name="ORIG", filter_subject="", next_seq=next_seq, mirror=mirror,
                                  last_seq=max(next_seq - 1, 0))
        self.remote = RemoteOrigin(self.sourcing, 0, self.source)  # type: ignore[arg-type]
        self.client: FakeClient = self.remote.client  # type: ignore[assignment]

    def propose(self, source: SourceState, batch: list[list[object]], then: object) -> None:
        if self.refuse:
            raise NotLeader("gone")
        source.last_seq = int(str(batch[-1][0]))
        source.next_seq = source.last_seq + 1
        self.proposed.append((batch, then))

    def run_soon(self) -> None:
        while self.soon:
            self.soon.pop(0)()  # type: ignore[operator]

    def creates(self) -> list[dict[str, object]]:
        return [json.loads(p) for s, p, _r in self.client.sent if s.startswith("$JS.API.CONSUMER.CREATE.")]

    def deliver(self, sseq: int, cseq: int, subject: bytes = b"orig.a", generation: int = 0) -> None:
        generation = generation or self.remote.generation
        handler = self.client.subs.get(f"$JSMIR.ID.0.{generation}.d".encode())
        if handler is None:
            return  # unsubscribed: an old consumer's deliveries reach nobody
        reply = f"$JS.ACK.ORIG.C{generation}.1.{sseq}.{cseq}.{sseq * 10}.0".encode()
        handler(subject, reply, None, b"payload%d" % sseq)  # type: ignore[operator]

    def answer_create(self, body: dict[str, object]) -> None:
        subject = f"$JSMIR.ID.0.{self.remote.generation}.c".encode()
        handler = self.client.subs[b"$JSMIR.ID.0.*.c"]
        handler(subject, None, None, json.dumps(body).encode())  # type: ignore[operator]


def test_a_mirror_creates_its_consumer_at_the_next_sequence_and_proposes_what_arrives(
        monkeypatch: pytest.MonkeyPatch) -> None:
    h = Harness(monkeypatch, next_seq=5)
    h.remote.tick()
    (create,) = h.creates()
    config = create["config"]
    assert isinstance(config, dict)
    assert config["opt_start_seq"] == 5 and config["deliver_subject"] == "$JSMIR.ID.0.1.d"
    h.answer_create({"name": "C1"})
    for cseq, sseq in enumerate((5, 6, 8), start=1):
        h.deliver(sseq, cseq)
    h.run_soon()
    ((batch, then),) = h.proposed
    assert [entry[0] for entry in batch] == [5, 6, 8] and [entry[4] for entry in batch] == [50, 60, 80]


def test_flow_control_is_answered_only_once_the_copy_in_flight_is_applied(
        monkeypatch: pytest.MonkeyPatch) -> None:
    h = Harness(monkeypatch)
    h.remote.tick()
    h.deliver(1, 1)
    h.run_soon()
    h.deliver(2, 2)
    fc = status_headers(100, "FlowControl Request")
    handler = h.client.subs[b"$JSMIR.ID.0.1.d"]
    handler(b"$JSMIR.ID.0.1.d", b"$JS.FC.ORIG.C.x", fc, fc)  # type: ignore[operator]
    assert not [s for s, _p, _r in h.client.sent if s.startswith("$JS.FC.")]
    h.proposed[0][1]()  # type: ignore[operator]  # the first batch applied: the second goes
    h.run_soon()
    assert len(h.proposed) == 2 and not [s for s, _p, _r in h.client.sent if s.startswith("$JS.FC.")]
    h.proposed[1][1]()  # type: ignore[operator]
    h.run_soon()
    assert [s for s, _p, _r in h.client.sent if s.startswith("$JS.FC.")] == ["$JS.FC.ORIG.C.x"]


def test_a_heartbeat_naming_a_stalled_flow_control_request_gets_it_answered(
        monkeypatch: pytest.MonkeyPatch) -> None:
    h = Harness(monkeypatch)
    h.remote.tick()
    h.deliver(1, 1)
    beat = status_headers(100, "Idle Heartbeat", [("Nats-Last-Consumer", "1"), ("Nats-Last-Stream", "1"),
                                                  ("Nats-Consumer-Stalled", "$JS.FC.ORIG.C.lost")])
    h.client.subs[b"$JSMIR.ID.0.1.d"](b"$JSMIR.ID.0.1.d", None, beat, beat)  # type: ignore[operator]
    assert h.remote.generation == 1  # no gap: the consumer waits for its flow-control answer
    h.run_soon()
    h.proposed[0][1]()  # type: ignore[operator]
    h.run_soon()
    assert ("$JS.FC.ORIG.C.lost", b"", "") in h.client.sent


def test_a_lost_delivery_makes_the_consumer_again_from_the_next_needed_sequence(
        monkeypatch: pytest.MonkeyPatch) -> None:
    h = Harness(monkeypatch)
    h.remote.tick()
    h.answer_create({"name": "C1"})
    h.deliver(1, 1)
    h.run_soon()
    h.proposed[0][1]()  # type: ignore[operator]
    h.deliver(3, 3)  # consumer sequence 2 never came
    assert h.remote.generation == 2
    assert ("$JS.API.CONSUMER.DELETE.ORIG.C1", b"", "") in h.client.sent
    assert h.creates()[-1]["config"]["opt_start_seq"] == 2  # type: ignore[index]
    h.deliver(2, 2, generation=1)  # the old consumer's: nobody listens
    h.deliver(2, 1)
    h.deliver(3, 2)
    h.run_soon()
    assert [entry[0] for entry in h.proposed[-1][0]] == [2, 3]


def test_a_silent_or_gap_reporting_consumer_is_made_again(monkeypatch: pytest.MonkeyPatch) -> None:
    h = Harness(monkeypatch)
    h.remote.tick()
    h.now += int(limits.JS_SOURCE_STALL_S * NS) // 2
    h.remote.tick()
    assert h.remote.generation == 1
    h.now += int(limits.JS_SOURCE_STALL_S * NS)
    h.remote.tick()
    assert h.remote.generation == 2
    beat = status_headers(100, "Idle Heartbeat", [("Nats-Last-Consumer", "4"), ("Nats-Last-Stream", "4")])
    h.client.subs[b"$JSMIR.ID.0.2.d"](b"$JSMIR.ID.0.2.d", None, beat, beat)  # type: ignore[operator]
    assert h.remote.generation == 3


def test_a_missing_origin_is_reported_and_asked_for_again_later(monkeypatch: pytest.MonkeyPatch) -> None:
    h = Harness(monkeypatch)
    h.remote.tick()
    h.answer_create({"error": {"code": 404, "err_code": 10059, "description": "stream not found"}})
    assert h.source.missing
    h.remote.tick()
    assert len(h.creates()) == 1
    h.now += int(limits.JS_SOURCE_STALL_S * NS) + 1
    h.remote.tick()
    assert len(h.creates()) == 2
    h.answer_create({"name": "C2"})
    assert not h.source.missing


def test_a_refused_proposal_pauses_and_reads_again_from_the_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    h = Harness(monkeypatch)
    h.remote.tick()
    h.refuse = True
    h.deliver(1, 1)
    h.run_soon()
    assert h.remote.generation == 2 and len(h.creates()) == 1  # no consumer until the delay is over
    h.refuse = False
    h.now += int(limits.JS_SOURCE_POLL_MAX_S * NS) + 1
    h.remote.tick()
    assert len(h.creates()) == 2 and h.creates()[-1]["config"]["deliver_policy"] == "all"


def test_deliveries_beyond_the_pending_limit_restart_instead_of_growing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    h = Harness(monkeypatch)
    h.remote.tick()
    h.deliver(1, 1)
    h.run_soon()  # in flight, never applied here
    for n in range(2, limits.JS_SOURCE_PENDING_MAX + 3):
        h.deliver(n, n)
    assert len(h.remote.pending) <= limits.JS_SOURCE_PENDING_MAX
    assert h.remote.generation == 2


def test_a_source_copies_each_delivery_under_its_stream_subject(monkeypatch: pytest.MonkeyPatch) -> None:
    h = Harness(monkeypatch, mirror=False)
    h.remote.tick()
    h.deliver(4, 1, subject=b"orig.x")
    reply = b"$JS.ACK.ORIG.C1.1.5.2.50.0@orig.y"  # a route's form, if it reaches us
    h.client.subs[b"$JSMIR.ID.0.1.d"](b"$JSMIR.ID.0.1.d", reply, None, b"p5")  # type: ignore[operator]
    h.run_soon()
    assert h.copied == [(4, "orig.x", b"", b"payload4"), (5, "orig.y", b"", b"p5")]
    assert h.source.next_seq == 6


def test_stopping_deletes_the_consumer_and_drops_later_deliveries(monkeypatch: pytest.MonkeyPatch) -> None:
    h = Harness(monkeypatch)
    h.remote.tick()
    h.answer_create(["not", "an", "object"])  # type: ignore[arg-type]  # ignored, no crash
    h.answer_create({"name": "C1"})
    h.remote.close()
    assert ("$JS.API.CONSUMER.DELETE.ORIG.C1", b"", "") in h.client.sent and h.client.closed
    h.deliver(1, 1)
    h.run_soon()
    assert h.proposed == [] and h.remote.pending == []
