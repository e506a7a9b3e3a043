"""SiblingSync, the pure bookkeeping of the interest sync (fabric/sync.py), and the pidfd liveness."""

from __future__ import annotations

import asyncio
import subprocess
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.fabric.liveness import PidfdLiveness, process_alive
from appliance.fabric.sync import SiblingSync, decode_pid, encode_pid


def released(sync: SiblingSync) -> list[str]:
    return [callback.__name__ for callback in sync.take_released()]  # type: ignore[attr-defined]


def named(name: str):  # type: ignore[no-untyped-def]
    def callback() -> None:
        return None
    callback.__name__ = name
    return callback


def test_pids_round_trip_and_an_empty_payload_names_none() -> None:
    assert decode_pid(encode_pid(4242)) == 4242
    assert decode_pid(b"") is None
    assert decode_pid(encode_pid(0)) is None


def test_a_fresh_worker_is_neither_joined_nor_synced_until_every_sibling_is_known() -> None:
    sync = SiblingSync([1, 2], base_seq=100)
    assert not sync.joined() and not sync.synced()
    sync.on_answer(1, pid=11)
    assert not sync.joined()
    sync.on_hello(2, pid=12)  # a sibling's own HELLO: its interest is empty, adds follow
    assert sync.joined() and sync.synced()


def test_a_waiter_is_released_when_every_live_sibling_acked_its_change() -> None:
    sync = SiblingSync([1, 2], base_seq=0)
    sync.on_answer(1, 11)
    sync.on_answer(2, 12)
    sync.next_seq()
    sync.add_waiter(named("first"))
    sync.next_seq()
    sync.add_waiter(named("second"))
    sync.on_ack(1, 2)
    assert released(sync) == []
    assert sync.blocking_waiters() == [2]
    sync.on_ack(2, 1)
    assert released(sync) == ["first"]
    sync.on_ack(2, 2)
    assert released(sync) == ["second"]
    assert sync.waiting == 0


def test_only_the_exit_of_the_current_incarnation_releases() -> None:
    sync = SiblingSync([1], base_seq=0)
    sync.on_answer(1, 11)
    sync.next_seq()
    sync.add_waiter(named("pong"))
    sync.on_hello(1, 21)  # the successor said HELLO before the old pid's exit was reported
    assert released(sync) == ["pong"]
    sync.next_seq()
    sync.add_waiter(named("later"))
    assert not sync.on_exit(1, 11), "the old incarnation's exit says nothing about the new one"
    assert released(sync) == []
    assert sync.on_exit(1, 21)
    assert released(sync) == ["later"]


def test_an_answer_from_an_incarnation_already_gone_is_stale() -> None:
    """Found by the model test below: HELLO, a change and its waiter, the sibling exits (waiter
    released), then its INTEREST_SYNCED written before dying arrives: it must not revive it."""
    sync = SiblingSync([1], base_seq=0)
    sync.on_hello(1, 21)
    sync.next_seq()
    sync.add_waiter(named("pong"))
    assert sync.on_exit(1, 21)
    assert released(sync) == ["pong"]
    sync.on_answer(1, 21)
    assert sync.siblings[1].gone and sync.synced()
    sync.on_hello(1, 31)  # only a successor's HELLO brings it back
    assert not sync.siblings[1].gone


def test_a_broken_link_is_not_waited_for() -> None:
    sync = SiblingSync([1, 2], base_seq=0)
    sync.on_answer(1, 11)
    sync.add_waiter(named("join"))
    sync.on_broken(2)
    assert released(sync) == ["join"]


@settings(max_examples=500, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["change", "wait", "ack", "hello", "answer", "exit"]),
                          st.integers(1, 3), st.integers(0, 5)), max_size=40))
def test_a_waiter_is_released_exactly_when_no_live_sibling_is_unknown_or_behind(
        steps: list[tuple[str, int, int]]) -> None:
    """Against a plain model: a waiter of change T is released as soon as, and only when, every sibling
    is either gone or known and acked at least T."""
    sync = SiblingSync([1, 2, 3], base_seq=0)
    pending: dict[int, int] = {}  # waiter id -> target
    done: set[int] = set()
    pids = {1: 11, 2: 12, 3: 13}
    for n, (op, sibling, value) in enumerate(steps):
        if op == "change":
            sync.next_seq()
        elif op == "wait":
            pending[n] = sync.seq
            sync.add_waiter(lambda n=n: done.add(n))  # type: ignore[misc]
        elif op == "ack":
            sync.on_ack(sibling, min(value, sync.seq))
        elif op == "hello":
            pids[sibling] += 10
            sync.on_hello(sibling, pids[sibling])
        elif op == "answer":
            sync.on_answer(sibling, pids[sibling])
        else:
            sync.on_exit(sibling, pids[sibling])
        for callback in sync.take_released():
            callback()
        for waiter, target in pending.items():
            free = all(s.gone or (s.known and s.acked_seq >= target) for s in sync.siblings.values())
            assert (waiter in done) == free, (op, waiter, target)
    assert sync.waiting == len(set(pending) - done)


def test_pidfd_liveness_reports_a_real_child_exit_on_the_loop() -> None:
    async def scenario() -> list[int]:
        loop = asyncio.get_running_loop()
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        liveness = PidfdLiveness(loop)
        exited: list[int] = []
        gone = asyncio.Event()
        try:
            liveness.watch(child.pid, lambda pid: (exited.append(pid), gone.set()))
            assert liveness.alive(child.pid)
            child.kill()
            await asyncio.wait_for(gone.wait(), 30)
            assert not liveness.alive(child.pid)  # a zombie until reaped: still not alive
        finally:
            child.kill()
            child.wait(30)
            liveness.close()
        return exited

    child_pids = asyncio.run(scenario())
    assert len(child_pids) == 1


def test_a_pid_that_is_already_gone_is_reported_at_once() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(30)
    assert not process_alive(child.pid)

    async def scenario() -> list[int]:
        liveness = PidfdLiveness(asyncio.get_running_loop())
        exited: list[int] = []
        liveness.watch(child.pid, exited.append)
        for _ in range(3):
            await asyncio.sleep(0)
        liveness.close()
        return exited

    assert asyncio.run(scenario()) == [child.pid]
