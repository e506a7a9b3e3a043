"""FsyncThreads: group-commit fsyncs run off the loop and report back on it, failures included."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

from appliance.jetstream.fsync import FsyncThreads
from appliance.store.layout import SyncJob

DEADLINE_S = 10.0


def test_jobs_run_off_the_loop_and_complete_on_it() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        runner = FsyncThreads(loop, 2)
        ran_on: list[str] = []
        results: list[tuple[int, OSError | None, bool]] = []
        finished = asyncio.Event()

        def fsync() -> None:
            ran_on.append(threading.current_thread().name)

        def failing() -> None:
            raise OSError(5, "Input/output error")

        def done_for(seq: int) -> Callable[[OSError | None], None]:
            def done(error: OSError | None) -> None:
                results.append((seq, error, threading.current_thread() is threading.main_thread()))
                if len(results) == 3:
                    finished.set()

            return done

        runner.submit(SyncJob(1, [fsync]), done_for(1))
        runner.submit(SyncJob(2, [failing]), done_for(2))
        runner.submit(SyncJob(3, [fsync, fsync]), done_for(3))
        await asyncio.wait_for(finished.wait(), DEADLINE_S)
        runner.stop()
        assert all(name.startswith("js-fsync") for name in ran_on) and len(ran_on) == 3
        by_seq = {seq: (error, on_loop) for seq, error, on_loop in results}
        assert by_seq[1] == (None, True) and by_seq[3] == (None, True)
        failed, on_loop = by_seq[2]
        assert isinstance(failed, OSError) and failed.errno == 5 and on_loop

    asyncio.run(main())


def test_stop_finishes_the_jobs_already_submitted() -> None:
    async def main() -> None:
        runner = FsyncThreads(asyncio.get_running_loop(), 1)
        ran: list[int] = []
        for seq in range(20):
            runner.submit(SyncJob(seq, [lambda seq=seq: ran.append(seq)]), lambda _error: None)
        runner.stop()
        assert ran == list(range(20))

    asyncio.run(main())
