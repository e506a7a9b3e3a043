"""DrainWatch: frames waiting, unpaused, with no batch taken for stuck_after_s make a stuck link."""

from __future__ import annotations

from appliance.fabric.drain_watch import DrainWatch


def test_waiting_without_progress_is_stuck_only_after_the_limit() -> None:
    watch = DrainWatch(10.0)
    assert not watch.stuck(0.0, waiting=True, paused=False, progress=5)
    assert not watch.stuck(9.9, waiting=True, paused=False, progress=5)
    assert watch.stuck(10.0, waiting=True, paused=False, progress=5)
    assert watch.stuck(30.0, waiting=True, paused=False, progress=5)


def test_progress_an_empty_link_or_a_pause_restart_the_clock() -> None:
    watch = DrainWatch(10.0)
    assert not watch.stuck(0.0, waiting=True, paused=False, progress=1)
    assert not watch.stuck(9.0, waiting=True, paused=False, progress=2)  # a batch was taken
    assert not watch.stuck(18.0, waiting=True, paused=False, progress=2)
    assert not watch.stuck(18.5, waiting=False, paused=False, progress=2)  # drained
    assert not watch.stuck(19.0, waiting=True, paused=False, progress=2)
    assert not watch.stuck(28.0, waiting=True, paused=False, progress=2)
    assert not watch.stuck(28.5, waiting=True, paused=True, progress=2)  # backpressure is not a stall
    assert not watch.stuck(100.0, waiting=True, paused=True, progress=2)
    assert not watch.stuck(101.0, waiting=True, paused=False, progress=2)
    assert watch.stuck(111.0, waiting=True, paused=False, progress=2)
