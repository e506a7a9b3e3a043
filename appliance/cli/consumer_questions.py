"""The questions `consumer add` asks on a terminal for what its flags left out: natscli's
(`nats consumer add`, cli/consumer_command.go), in its order, with its defaults. Each answer goes
into ConsumerFlags as the flag would, so consumer_config makes the config from them.

Not asked (as flags only, or not at all): natscli's start by time ("1h") and its backoff
questions; a start-policy answer that is a duration says so and is asked again.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from appliance.cli.consumer_config import ConsumerFlags
from appliance.cli.prompts import Question, choice
from appliance.cli.stream_config import FlagError, parse_duration_ns

ConsumerQuestion = Question[ConsumerFlags]
ACK = ("explicit", "all", "none")
REPLAY = ("instant", "original")
START = {"all": "all", "new": "new", "last": "last", "subject": "last_per_subject",
         "last_per_subject": "last_per_subject"}


def _text(answer: str | bool) -> str:
    assert isinstance(answer, str), "a text question"
    return answer.strip()


def _target(flags: ConsumerFlags, answer: str | bool) -> ConsumerFlags:
    subject = _text(answer)
    return replace(flags, deliver_subject=subject) if subject else replace(flags, pull=True)


def _start(flags: ConsumerFlags, answer: str | bool) -> ConsumerFlags:
    text = _text(answer)
    if text.lower() in START:
        return replace(flags, deliver_policy=START[text.lower()])
    if text.isdigit() and int(text) > 0:
        return replace(flags, deliver_policy="by_start_sequence", start_seq=int(text))
    raise FlagError(f"{text!r}: answer all, new, last, subject or a message sequence (a start time is not "
                    "supported here)")


def _integer(field: str, *, unset_at: int) -> Any:
    """An integer answer; `unset_at` (natscli's default) leaves the field to the server."""

    def apply(flags: ConsumerFlags, answer: str | bool) -> ConsumerFlags:
        try:
            number = int(_text(answer))
        except ValueError:
            raise FlagError(f"{_text(answer)!r} is not a whole number") from None
        changes: dict[str, Any] = {field: None if number == unset_at else number}
        return replace(flags, **changes)

    return apply


def _heartbeat(flags: ConsumerFlags, answer: str | bool) -> ConsumerFlags:
    text = _text(answer)
    return replace(flags, heartbeat=text if parse_duration_ns(text, flag="heartbeat") > 0 else None)


def next_consumer_question(flags: ConsumerFlags, asked: frozenset[str]) -> ConsumerQuestion | None:
    """The next question natscli would ask for these flags, or None when nothing is missing."""
    for question in _questions(flags):
        if question.text not in asked:
            return question
    return None


def _questions(flags: ConsumerFlags) -> list[ConsumerQuestion]:
    push = flags.deliver_subject is not None
    questions: list[ConsumerQuestion] = []
    if not flags.pull and not push:
        questions.append(Question("Delivery target (empty for Pull Consumers)", "", _target))
        return questions  # the rest depends on the answer
    if push and flags.deliver_group is None:
        questions.append(Question("Delivery Queue Group", "",
                                  lambda f, a: replace(f, deliver_group=_text(a) or None)))
    if flags.deliver_policy is None:
        questions.append(Question("Start policy (all, new, last, subject, 1h, msg sequence)", "all", _start))
    if flags.ack_policy is None:
        questions.append(Question("Acknowledgment policy", "none" if push else "explicit",
                                  lambda f, a: replace(f, ack_policy=choice(_text(a), ACK)), ACK))
    if flags.replay is None:
        questions.append(Question("Replay policy", "instant",
                                  lambda f, a: replace(f, replay=choice(_text(a), REPLAY)), REPLAY))
    if not flags.filters:
        questions.append(Question("Filter Stream by subjects (blank for all)", "",
                                  lambda f, a: replace(f, filters=tuple(_text(a).replace(" ", ",").split(",")))))
    if flags.ack_policy != "none":
        if flags.max_deliver is None:
            questions.append(Question("Maximum Allowed Deliveries", "-1", _integer("max_deliver", unset_at=-1)))
        if flags.max_pending is None:
            questions.append(Question("Maximum Acknowledgments Pending", "0", _integer("max_pending", unset_at=0)))
    if push:
        if flags.heartbeat is None:
            questions.append(Question("Idle Heartbeat", "0s", _heartbeat))
        if flags.flow_control is None:
            questions.append(Question("Enable Flow Control, ie --flow-control", False,
                                      lambda f, a: replace(f, flow_control=bool(a)), confirm=True))
    if flags.headers_only is None:
        questions.append(Question("Deliver headers only without bodies", False,
                                  lambda f, a: replace(f, headers_only=bool(a)), confirm=True))
    return questions
