"""The questions `stream add` asks on a terminal for what its flags left out: natscli's
(`nats stream add`, cli/stream_command.go), in its order, with its defaults and its answers
(Message TTL -1 is unlimited, "Allow message deletion" answers the opposite of --deny-delete).
Each answer goes into StreamFlags in the text the flag would take, so the flags' own parsing
(stream_config.flags_to_fields) makes the config.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from appliance.cli.format import NS_PER_S
from appliance.cli.prompts import Question, choice
from appliance.cli.stream_config import FlagError, StreamFlags, parse_duration_ns, parse_size, split_subjects

StreamQuestion = Question[StreamFlags]
STORAGE = ("file", "memory")
RETENTION = {"Limits": "limits", "Interest": "interest", "Work Queue": "workqueue"}
DISCARD = ("New", "Old")
DUPE_WINDOW_DEFAULT_NS = 120 * NS_PER_S


def _text(answer: str | bool) -> str:
    assert isinstance(answer, str), "a text question"
    return answer.strip()


def _subjects(flags: StreamFlags, answer: str | bool) -> StreamFlags:
    subjects = split_subjects((_text(answer).replace(" ", ","),))
    if not subjects:
        raise FlagError("at least one subject is required")
    return replace(flags, subjects=tuple(subjects))


def _count(field: str, *, minimum: int | None = None) -> Any:
    """An integer answer; <= 0 is unlimited (-1), as natscli reads it, unless `minimum` is given."""

    def apply(flags: StreamFlags, answer: str | bool) -> StreamFlags:
        try:
            number = int(_text(answer))
        except ValueError:
            raise FlagError(f"{_text(answer)!r} is not a whole number") from None
        if minimum is not None and number < minimum:
            raise FlagError(f"must be at least {minimum}")
        changes: dict[str, Any] = {field: number if minimum is not None or number > 0 else -1}
        return replace(flags, **changes)

    return apply


def _size(field: str) -> Any:
    def apply(flags: StreamFlags, answer: str | bool) -> StreamFlags:
        text = _text(answer)
        size = parse_size(text, flag="size")
        changes: dict[str, Any] = {field: text if size > 0 else "-1"}
        return replace(flags, **changes)

    return apply


def _duration(field: str, *, unlimited: str) -> Any:
    def apply(flags: StreamFlags, answer: str | bool) -> StreamFlags:
        text = _text(answer)
        if text != "-1":
            parse_duration_ns(text, flag="duration")
        changes: dict[str, Any] = {field: unlimited if text == "-1" else text}
        return replace(flags, **changes)

    return apply


def _dupe_window_default(flags: StreamFlags) -> str:
    """natscli's: 2m, or the message TTL when that is shorter."""
    if flags.max_age is not None:
        age_ns = parse_duration_ns(flags.max_age, flag="--max-age")
        if 0 < age_ns < DUPE_WINDOW_DEFAULT_NS:
            return flags.max_age
    return "2m0s"


def next_stream_question(flags: StreamFlags, asked: frozenset[str]) -> StreamQuestion | None:
    """The next question natscli would ask for these flags, or None when nothing is missing."""
    for question in _questions(flags):
        if question.text not in asked:
            return question
    return None


def _questions(flags: StreamFlags) -> list[StreamQuestion]:
    questions: list[StreamQuestion] = []
    if not split_subjects(flags.subjects):
        questions.append(Question("Subjects", None, _subjects))
    if flags.storage is None:
        questions.append(Question("Storage", "file", lambda f, a: replace(f, storage=choice(_text(a), STORAGE)),
                                  STORAGE))
    if flags.replicas is None:
        questions.append(Question("Replication", "1", _count("replicas", minimum=1)))
    if flags.retention is None:
        questions.append(Question("Retention Policy", "Limits",
                                  lambda f, a: replace(f, retention=RETENTION[choice(_text(a), tuple(RETENTION))]),
                                  tuple(RETENTION)))
    if flags.discard is None:
        questions.append(Question("Discard Policy", "Old",
                                  lambda f, a: replace(f, discard=choice(_text(a), DISCARD).lower()), DISCARD))
    if flags.max_msgs is None:
        questions.append(Question("Stream Messages Limit", "-1", _count("max_msgs")))
    if flags.max_msgs_per_subject is None:
        questions.append(Question("Per Subject Messages Limit", "-1", _count("max_msgs_per_subject")))
    if flags.max_bytes is None:
        questions.append(Question("Total Stream Size", "-1", _size("max_bytes")))
    if flags.max_age is None:
        questions.append(Question("Message TTL", "-1", _duration("max_age", unlimited="0")))
    if flags.max_msg_size is None:
        questions.append(Question("Max Message Size", "-1", _size("max_msg_size")))
    if flags.dupe_window is None:
        questions.append(Question("Duplicate tracking time window", _dupe_window_default(flags),
                                  _duration("dupe_window", unlimited="0")))
    if flags.allow_rollup is None:
        questions.append(Question("Allow message Roll-ups", False, lambda f, a: replace(f, allow_rollup=bool(a)),
                                  confirm=True))
    if flags.deny_delete is None:
        questions.append(Question("Allow message deletion", True, lambda f, a: replace(f, deny_delete=not a),
                                  confirm=True))
    if flags.deny_purge is None:
        questions.append(Question("Allow purging subjects or the entire stream", True,
                                  lambda f, a: replace(f, deny_purge=not a), confirm=True))
    return questions
