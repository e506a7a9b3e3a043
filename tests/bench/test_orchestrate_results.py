"""The orchestrator reads client results from a queue and watches the client processes: a client
that sent its result and exited is not a failure, even when the result arrives after the process
was seen dead; a client that died silently is one."""

from __future__ import annotations

import queue
from typing import Any

import pytest

from appliance.bench import orchestrate


class DeadProcess:
    exitcode = 0

    def is_alive(self) -> bool:
        return False


class LateQueue:
    """Empty at the first look; the result is there at the second (it was in flight)."""

    def __init__(self, items: list[Any]) -> None:
        self.items = items
        self.gets = 0

    def get(self, timeout: float) -> Any:
        self.gets += 1
        if self.gets == 1 or not self.items:
            raise queue.Empty
        return self.items.pop(0)


def test_a_result_that_arrives_after_its_client_exited_is_taken() -> None:
    results = LateQueue([("result", 0, "the result")])
    assert orchestrate._next(results, [DeadProcess()], {0}) == ("result", 0, "the result")


def test_a_client_that_exited_without_a_result_fails_the_run() -> None:
    with pytest.raises(orchestrate.BenchFailed, match="client process 0 exited \\(code 0\\) without a result"):
        orchestrate._next(LateQueue([]), [DeadProcess()], {0})


def test_an_error_that_arrives_late_is_still_the_reason() -> None:
    results = LateQueue([("error", 0, "js-push #0: ClosedError: server closed the connection")])
    with pytest.raises(orchestrate.BenchFailed, match="ClosedError"):
        orchestrate._next(results, [DeadProcess()], {0})
