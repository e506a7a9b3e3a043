"""Who answers a step-down, and a new leader that has not applied its predecessors' entries yet
(responder.py, api.dispatch): no sockets, no clock — fake groups and a fake timer list."""

from __future__ import annotations

import json
from collections.abc import Callable
from types import SimpleNamespace

from appliance.jetstream import api
from appliance.jetstream.responder import LEADERLESS_DELAY_S, Answer, responder


class FakeGroup:
    def __init__(self, *, leads: bool, leader: str = "P1", ready: bool = True) -> None:
        self.leads, self.lead, self.ready = leads, leader, ready

    def is_leader(self) -> bool:
        return self.leads

    def leader(self) -> str:
        return self.lead

    def ready_to_lead(self) -> bool:
        return self.leads and self.ready

    voting: tuple[str, ...] = ("P1",)  # one voter: a step-down answers success without a transfer

    def voters(self) -> tuple[str, ...]:
        return self.voting


class FakeState:
    def __init__(self) -> None:
        self.accounts = {"A": {"S": {"consumers": {"C": {}}}}}

    def group_of(self, _account: str, stream: str, consumer: str = "") -> object:
        return {"name": "G"} if stream == "S" else None


class FakeMeta:
    clustered = True

    def __init__(self, *, leads: bool) -> None:
        self.leads = leads
        self.state = FakeState()

    def leader(self) -> str:
        return "M"

    def is_leader(self) -> bool:
        return self.leads


class FakeAjs:
    def __init__(self, *, leads_meta: bool, stream_group: FakeGroup, consumer_group: FakeGroup) -> None:
        self.service = SimpleNamespace(meta=FakeMeta(leads=leads_meta), peer="P1")
        self.account = SimpleNamespace(name="A")
        consumer = SimpleNamespace(name="C", group=consumer_group)
        self.streams = {"S": SimpleNamespace(config=SimpleNamespace(name="S"), group=stream_group,
                                             consumers={"C": consumer})}
        self.sent: list[tuple[str, dict[str, object]]] = []
        self.timers: list[tuple[float, Callable[[], None]]] = []
        self.api_total = self.api_errors = 0

    def send(self, subject: str, payload: bytes) -> None:
        self.sent.append((subject, json.loads(payload)))

    def has_interest(self, _subject: str) -> bool:
        return False

    def call_later(self, delay_s: float, fn: Callable[[], None]) -> None:
        self.timers.append((delay_s, fn))

    def run_timers(self) -> float:
        """Run the timers due in turn (each may add another); returns the time they stood for."""
        waited = 0.0
        while self.timers:
            delay, fn = self.timers.pop(0)
            waited += delay
            fn()
        return waited


def ajs(*, leads_meta: bool = False, stream: FakeGroup | None = None, consumer: FakeGroup | None = None) -> FakeAjs:
    return FakeAjs(leads_meta=leads_meta, stream_group=stream or FakeGroup(leads=False),
                   consumer_group=consumer or FakeGroup(leads=False))


STREAM_SD = ["STREAM", "LEADER", "STEPDOWN", "S"]
CONSUMER_SD = ["CONSUMER", "LEADER", "STEPDOWN", "S", "C"]


def test_the_stream_leader_answers_a_stream_step_down_not_the_meta_leader() -> None:
    assert responder(ajs(stream=FakeGroup(leads=True)), STREAM_SD) is Answer.HERE  # type: ignore[arg-type]
    assert responder(ajs(leads_meta=True), STREAM_SD) is Answer.SILENT  # type: ignore[arg-type]


def test_the_consumer_leader_answers_a_consumer_step_down() -> None:
    assert responder(ajs(consumer=FakeGroup(leads=True)), CONSUMER_SD) is Answer.HERE  # type: ignore[arg-type]
    assert responder(ajs(stream=FakeGroup(leads=True), leads_meta=True), CONSUMER_SD) is Answer.SILENT  # type: ignore[arg-type]


def test_the_meta_leader_answers_for_an_unknown_stream() -> None:
    tokens = ["STREAM", "LEADER", "STEPDOWN", "NOPE"]
    assert responder(ajs(leads_meta=True), tokens) is Answer.HERE  # type: ignore[arg-type]
    assert responder(ajs(), tokens) is Answer.SILENT  # type: ignore[arg-type]
    consumer_of_unknown = ["CONSUMER", "LEADER", "STEPDOWN", "NOPE", "C"]
    assert responder(ajs(leads_meta=True), consumer_of_unknown) is Answer.HERE  # type: ignore[arg-type]


def test_a_leaderless_stream_group_is_answered_by_its_replicas_later() -> None:
    assert responder(ajs(stream=FakeGroup(leads=False, leader="")), STREAM_SD) is Answer.LEADERLESS  # type: ignore[arg-type]


def test_a_joiner_not_yet_a_voter_does_not_answer_for_the_stream_or_its_consumers() -> None:
    """A server opened as a joiner (its log has no voters until the leader adds it) knows no
    leader because nobody contacted it yet: it stays silent, the leader answers (measured by
    `python -m appliance.bench.catchup`: its STREAM.INFO said `leader: n3`, no replicas)."""
    joiner = FakeGroup(leads=False, leader="")
    joiner.voting = ()
    assert responder(ajs(stream=joiner), ["STREAM", "INFO", "S"]) is Answer.SILENT  # type: ignore[arg-type]
    assert responder(ajs(consumer=joiner), ["CONSUMER", "INFO", "S", "C"]) is Answer.SILENT  # type: ignore[arg-type]
    joiner.voting = ("P2", "P3")  # the leader's log names voters, this server not among them
    assert responder(ajs(stream=joiner), ["STREAM", "INFO", "S"]) is Answer.SILENT  # type: ignore[arg-type]
    voter = FakeGroup(leads=False, leader="")
    assert responder(ajs(stream=voter), ["STREAM", "INFO", "S"]) is Answer.LEADERLESS  # type: ignore[arg-type]
    assert responder(ajs(consumer=voter), ["CONSUMER", "INFO", "S", "C"]) is Answer.LEADERLESS  # type: ignore[arg-type]


def test_a_new_leader_not_ready_yet_does_not_answer_from_stale_state() -> None:
    new = FakeGroup(leads=True, ready=False)
    assert responder(ajs(consumer=new), ["CONSUMER", "INFO", "S", "C"]) is Answer.NOT_READY  # type: ignore[arg-type]
    assert responder(ajs(stream=new), ["STREAM", "INFO", "S"]) is Answer.NOT_READY  # type: ignore[arg-type]


def test_dispatch_answers_as_soon_as_the_new_leader_is_ready() -> None:
    group = FakeGroup(leads=True, ready=False)
    fake = ajs(stream=group)
    api.dispatch(fake, "$JS.API.STREAM.LEADER.STEPDOWN.S", "_INBOX.1", b"", b"")  # type: ignore[arg-type]
    assert fake.sent == [] and fake.timers
    for _ in range(3):  # still applying: it looks again
        delay, fn = fake.timers.pop(0)
        fn()
    group.ready = True
    waited = fake.run_timers()
    assert waited < LEADERLESS_DELAY_S
    assert fake.sent == [("_INBOX.1", {"type": "io.nats.jetstream.api.v1.stream_leader_stepdown_response",
                                       "success": True})]


def test_dispatch_gives_up_waiting_with_10008_for_a_step_down() -> None:
    fake = ajs(stream=FakeGroup(leads=True, ready=False))
    api.dispatch(fake, "$JS.API.STREAM.LEADER.STEPDOWN.S", "_INBOX.1", b"", b"")  # type: ignore[arg-type]
    waited = fake.run_timers()
    assert abs(waited - LEADERLESS_DELAY_S) < 0.05
    assert [answer["error"] for _, answer in fake.sent] == [  # type: ignore[index]
        {"code": 503, "err_code": 10008, "description": "JetStream system temporarily unavailable"}]


def test_dispatch_stays_silent_when_another_server_leads_meanwhile() -> None:
    group = FakeGroup(leads=False, leader="")
    fake = ajs(stream=group)
    api.dispatch(fake, "$JS.API.STREAM.LEADER.STEPDOWN.S", "_INBOX.1", b"", b"")  # type: ignore[arg-type]
    group.lead = "P2"
    fake.run_timers()
    assert fake.sent == []
