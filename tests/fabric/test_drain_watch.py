"""DrainWatch: frames waiting, unpaused, with no batch taken for stuck_after_s make a stuck link."""

from __future__ import annotations

from appliance.fabric.drain_watch import DrainWatch


def checked(watch: DrainWatch, start_s: float, end_s: float, **state: object) -> bool:
    """Checks every 0.25 s from start_s to end_s (as the heartbeat does); the last answer."""
    steps = round((end_s - start_s) / 0.25)
    answer = False
    for step in range(steps + 1):
        answer = watch.stuck(start_s + step * 0.25, **state)  # type: ignore[arg-type]
    return answer


def test_waiting_without_progress_is_stuck_only_after_the_limit() -> None:
    watch = DrainWatch(10.0)
    assert not checked(watch, 0.0, 9.75, waiting=True, paused=False, progress=5)
    assert checked(watch, 10.0, 10.0, waiting=True, paused=False, progress=5)
    assert checked(watch, 10.25, 30.0, waiting=True, paused=False, progress=5)


def test_a_long_gap_between_checks_is_a_blocked_loop_not_a_stuck_link() -> None:
    watch = DrainWatch(10.0)
    assert not watch.stuck(0.0, waiting=True, paused=False, progress=5)
    assert not watch.stuck(12.0, waiting=True, paused=False, progress=5)  # the loop was busy 12 s
    assert not checked(watch, 12.25, 21.75, waiting=True, paused=False, progress=5)
    assert checked(watch, 22.0, 22.0, waiting=True, paused=False, progress=5)


def test_progress_an_empty_link_or_a_pause_restart_the_clock() -> None:
    watch = DrainWatch(10.0)
    assert not checked(watch, 0.0, 8.75, waiting=True, paused=False, progress=1)
    assert not checked(watch, 9.0, 18.0, waiting=True, paused=False, progress=2)  # a batch was taken at 9
    assert not checked(watch, 18.25, 18.5, waiting=False, paused=False, progress=2)  # drained
    assert not checked(watch, 18.75, 28.5, waiting=True, paused=False, progress=2)
    assert not checked(watch, 28.75, 100.0, waiting=True, paused=True, progress=2)  # backpressure: no stall
    assert not checked(watch, 100.25, 110.0, waiting=True, paused=False, progress=2)
    assert checked(watch, 110.25, 110.25, waiting=True, paused=False, progress=2)
