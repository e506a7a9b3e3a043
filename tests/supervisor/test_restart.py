"""Restart backoff per worker and the restart budget per host."""

from __future__ import annotations

import pytest

from appliance.supervisor.restart import RestartPolicy, RestartTracker, failures_after_exit, restart_delay_s

POLICY = RestartPolicy(backoff_initial_s=0.1, backoff_max_s=1.0, budget_count=3, budget_window_s=10.0,
                       stable_after_s=30.0)


def test_backoff_doubles_up_to_the_ceiling() -> None:
    assert [restart_delay_s(POLICY, n) for n in range(1, 7)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]


def test_backoff_of_a_long_crash_loop_stays_at_the_ceiling() -> None:
    assert restart_delay_s(POLICY, 10_000) == 1.0


def test_a_worker_that_stayed_up_starts_over() -> None:
    assert failures_after_exit(POLICY, previous_failures=4, uptime_s=29.0) == 5
    assert failures_after_exit(POLICY, previous_failures=4, uptime_s=30.0) == 1


def test_budget_refuses_the_restart_beyond_the_count_within_the_window() -> None:
    tracker = RestartTracker(POLICY)
    assert [tracker.maybe_spend(t) for t in (0.0, 1.0, 2.0)] == [True, True, True]
    assert not tracker.maybe_spend(3.0)
    assert tracker.restarts_in_window(3.0) == 3


def test_budget_window_slides() -> None:
    tracker = RestartTracker(POLICY)
    for t in (0.0, 1.0, 2.0):
        assert tracker.maybe_spend(t)
    assert tracker.maybe_spend(10.5)  # the restart at 0.0 left the window
    assert not tracker.maybe_spend(10.9)
    assert tracker.restarts_in_window(100.0) == 0


def test_a_zero_budget_refuses_every_restart() -> None:
    assert not RestartTracker(RestartPolicy(budget_count=0)).maybe_spend(0.0)


def test_inconsistent_policies_are_bugs() -> None:
    with pytest.raises(AssertionError):
        RestartPolicy(backoff_initial_s=2.0, backoff_max_s=1.0)
    with pytest.raises(AssertionError):
        RestartPolicy(heartbeat_late_s=5.0, heartbeat_dead_s=1.0)
