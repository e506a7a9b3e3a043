"""API handlers answer from the meta group's commit callback, not from inside `propose`: a meta
group whose quorum is remote commits many loop turns later, or never (leadership lost)."""

import json
from collections.abc import Callable
from types import SimpleNamespace

from appliance.errors import NotLeader
from appliance.jetstream import api


class SlowMeta:
    """A meta group that commits only when the test says so."""

    clustered = False  # a standalone server answers every request itself (responder.py)

    def __init__(self, *, refuse: bool = False) -> None:
        self.waiting: list[tuple[dict[str, object], Callable[[bool], None]]] = []
        self.refuse = refuse

    def propose(self, op: dict[str, object], done: Callable[[bool], None]) -> None:
        if self.refuse:
            raise NotLeader("not the meta leader", leader_hint=None)
        self.waiting.append((op, done))


class FakeAjs:
    def __init__(self, meta: SlowMeta) -> None:
        self.service = SimpleNamespace(meta=meta)
        self.account = SimpleNamespace(name="A")
        self.sent: list[tuple[str, dict[str, object]]] = []
        self.api_total = self.api_errors = 0
        self.streams = {"S": SimpleNamespace(config=SimpleNamespace(name="S"))}

    def send(self, subject: str, payload: bytes) -> None:
        self.sent.append((subject, json.loads(payload)))

    def has_interest(self, _subject: str) -> bool:
        return False  # no API audit listener


def delete_request(ajs: FakeAjs) -> None:
    api.dispatch(ajs, "$JS.API.STREAM.DELETE.S", "_INBOX.1", b"", b"")  # type: ignore[arg-type]


def test_the_answer_waits_for_the_commit_and_the_request_is_counted_once_answered() -> None:
    meta = SlowMeta()
    ajs = FakeAjs(meta)
    delete_request(ajs)
    assert ajs.sent == [] and ajs.api_total == 0  # proposed, not committed: no answer yet
    [(op, done)] = meta.waiting
    assert op == {"op": "stream_del", "acc": "A", "stream": "S"}
    done(True)
    kind = "io.nats.jetstream.api.v1.stream_delete_response"
    assert ajs.sent == [("_INBOX.1", {"type": kind, "success": True})]
    assert ajs.api_total == 1 and ajs.api_errors == 0


def test_a_proposal_lost_before_it_committed_is_answered_with_an_error() -> None:
    meta = SlowMeta()
    ajs = FakeAjs(meta)
    delete_request(ajs)
    meta.waiting[0][1](False)
    [(_, answer)] = ajs.sent
    error = {"code": 500, "err_code": 10051, "description": "meta proposal was not committed"}
    assert answer["error"] == error
    assert ajs.api_total == 1 and ajs.api_errors == 1


def test_a_proposal_refused_at_once_is_answered_at_once() -> None:
    ajs = FakeAjs(SlowMeta(refuse=True))
    delete_request(ajs)
    [(_, answer)] = ajs.sent
    error = answer["error"]
    assert isinstance(error, dict) and error["err_code"] == 10051
    assert ajs.api_total == 1

