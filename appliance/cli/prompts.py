"""Asking for what a verb's flags left out, as the `nats` CLI does, but only on a terminal.

A verb describes its questions as data (stream_questions.py, consumer_questions.py): natscli's
wording and default answer, the choices, and how an answer goes into the verb's flags (raising
FlagError for an answer that does not parse, which asks again). `ask_missing` walks them with
click's prompts; without a terminal on stdin the verb keeps its plain error instead ("... required
(or pass --defaults)"), so a script never hangs on a question.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

import click

from appliance.cli.stream_config import FlagError

F = TypeVar("F")
ANSWERS_MAX = 64  # questions one verb may ask: a bound on the loop, far above any verb's list


@dataclass(frozen=True, slots=True)
class Question(Generic[F]):
    """One question; `apply` puts an answer (text, or a bool for a confirmation) into the flags."""

    text: str
    default: str | bool | None  # None: an answer is required
    apply: Callable[[F, str | bool], F]
    choices: tuple[str, ...] = ()
    confirm: bool = False

    def prompt_text(self) -> str:
        return f"{self.text} ({', '.join(self.choices)})" if self.choices else self.text


NextQuestion = Callable[[F, frozenset[str]], "Question[F] | None"]
Ask = Callable[[Question[F], F], F]


def on_terminal() -> bool:
    """Whether a person can answer: stdin is a terminal."""
    return sys.stdin.isatty()


def ask_missing(flags: F, next_question: NextQuestion[F], ask: Ask[F] | None = None) -> F:
    """Ask every question `next_question` still has for `flags`, in its order; each text once."""
    asker: Ask[F] = ask or click_ask
    asked: frozenset[str] = frozenset()
    for _ in range(ANSWERS_MAX):
        question = next_question(flags, asked)
        if question is None:
            return flags
        asked |= {question.text}
        flags = asker(question, flags)
    raise AssertionError("a question list longer than ANSWERS_MAX")


def choice(text: str, choices: tuple[str, ...]) -> str:
    """The choice `text` names (case and spaces do not matter), else FlagError."""
    wanted = text.strip().lower().replace(" ", "")
    for option in choices:
        if option.lower().replace(" ", "") == wanted:
            return option
    raise FlagError(f"{text!r} is not one of {', '.join(choices)}")


def click_ask(question: Question[F], flags: F) -> F:
    """Ask on the terminal with click; a bad answer is explained and asked again."""
    if question.confirm:
        return question.apply(flags, click.confirm(question.text, default=bool(question.default)))
    answered: list[F] = []

    def convert(text: str) -> str:
        try:
            answered.append(question.apply(flags, text))
        except FlagError as exc:
            raise click.UsageError(str(exc)) from None
        return text

    default = question.default if isinstance(question.default, str) else None
    click.prompt(question.prompt_text(), default=default, value_proc=convert, show_default=bool(default))
    return answered[-1]
