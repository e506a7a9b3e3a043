"""Overall health from the workers' rows: ok, degraded (with reasons), down."""

from __future__ import annotations

import dataclasses

from hypothesis import given
from hypothesis import strategies as st

from appliance.supervisor.health import assess_health
from appliance.supervisor.status_table import RowSnapshot, WorkerState

NOW = 1000.0
READY = RowSnapshot(index=0, pid=100, core=0, numa_node=0, state=WorkerState.READY, restarts=0,
                    started_mono_s=900.0, heartbeat_mono_s=NOW - 0.2, heartbeats=10, connections=1, msgs_in=0,
                    msgs_out=0, bytes_in=0, bytes_out=0, ring_fill=0.0)


def row(index: int, **changes: object) -> RowSnapshot:
    return dataclasses.replace(READY, index=index, pid=100 + index, **changes)  # type: ignore[arg-type]


def health(*rows: RowSnapshot, stopping: bool = False) -> tuple[str, list[str], int]:
    result = assess_health(list(rows), now_mono_s=NOW, heartbeat_late_s=2.0, stopping=stopping)
    return result.level, result.reasons, result.exit_code


def test_all_ready_and_fresh_is_ok() -> None:
    assert health(row(0), row(1)) == ("ok", [], 0)


def test_a_late_worker_is_degraded() -> None:
    level, reasons, code = health(row(0), row(1, heartbeat_mono_s=NOW - 5.0))
    assert (level, code) == ("degraded", 1)
    assert reasons == ["worker 1 (pid 101) heartbeat late: 5.0s ago"]


def test_a_restarting_worker_is_degraded() -> None:
    assert health(row(0), row(1, state=WorkerState.BACKOFF, restarts=2)) == (
        "degraded", ["worker 1 restarting (restarts: 2)"], 1)


def test_a_starting_worker_is_degraded() -> None:
    assert health(row(0), row(1, state=WorkerState.STARTING))[0] == "degraded"


def test_lame_duck_is_degraded_but_serving() -> None:
    level, reasons, _ = health(row(0, state=WorkerState.LAME_DUCK))
    assert level == "degraded"
    assert reasons == ["worker 0 (pid 100) in lame duck mode"]


def test_no_serving_worker_is_down() -> None:
    level, reasons, code = health(row(0, heartbeat_mono_s=NOW - 9.0), row(1, state=WorkerState.BACKOFF))
    assert (level, code) == ("down", 2)
    assert reasons[0] == "no worker is serving clients"


def test_a_slot_never_started_is_degraded() -> None:
    assert health(row(0), row(1, state=WorkerState.EMPTY)) == ("degraded", ["worker 1 not started"], 1)


def test_no_workers_is_down() -> None:
    assert health()[0] == "down"


def test_a_stopping_supervisor_is_down() -> None:
    assert health(row(0), stopping=True) == ("down", ["supervisor is stopping"], 2)


_STATES = st.sampled_from(list(WorkerState))
_FRESH_READY = st.tuples(st.just(WorkerState.READY), st.floats(min_value=0.0, max_value=2.0))
_ANY = st.tuples(_STATES, st.floats(min_value=0.0, max_value=10.0))
_ROWS = st.lists(st.one_of(_FRESH_READY, _ANY), min_size=1, max_size=8)  # healthy rows are common


@given(_ROWS)
def test_health_levels_follow_from_the_rows(specs: list[tuple[WorkerState, float]]) -> None:
    rows = [row(index, state=state, heartbeat_mono_s=NOW - age_s) for index, (state, age_s) in enumerate(specs)]
    level, reasons, code = health(*rows)
    serving = [s for s, age in specs if (s == WorkerState.READY and age <= 2.0) or s == WorkerState.LAME_DUCK]
    all_fresh = all(s == WorkerState.READY and age <= 2.0 for s, age in specs)
    assert code == {"ok": 0, "degraded": 1, "down": 2}[level]
    assert (level == "ok") == all_fresh
    assert (level == "down") == (not serving)
    assert (reasons == []) == (level == "ok")


def test_a_stream_with_unrepaired_damage_makes_the_server_degraded() -> None:
    level, reasons, code = health(row(0, damaged_assets=1), row(1))
    assert (level, code) == ("degraded", 1)
    assert reasons == ["1 JetStream stream(s)/consumer(s) with unrepaired damage (see /healthz?details=true)"]
