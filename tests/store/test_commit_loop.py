"""GroupCommitter driven the way a worker drives it: an asyncio loop, fsyncs on an executor thread.

Many producers publish concurrently; each awaits its acknowledgement. Every acknowledged message
must already be durable (present on the disk a crash would leave), and fsyncs are shared: far
fewer fsyncs than publishes.
"""

from __future__ import annotations

import asyncio
import concurrent.futures

from appliance.store.commit import GroupCommitter, Ticket
from appliance.store.filestore import FileStoreConfig, FileStreamStore
from appliance.testing.faultfs import FaultFS

PRODUCERS = 20
PUBLISHES_EACH = 15


def durable_seqs(fs: FaultFS) -> set[int]:
    return {m.seq for m in FileStreamStore(FileStoreConfig("/loop"), ops=fs.after_crash("lose")).scan()}


async def run_loop(fs: FaultFS) -> tuple[list[int], int]:
    store = FileStreamStore(FileStoreConfig("/loop", segment_bytes=4000), ops=fs)
    committer = GroupCommitter(store)
    waiters: dict[int, asyncio.Future[None]] = {}
    wake = asyncio.Event()
    acked: list[int] = []
    loop = asyncio.get_running_loop()

    async def committer_task(pool: concurrent.futures.Executor) -> None:
        while True:
            await wake.wait()
            wake.clear()
            while (job := committer.next_job(loop.time())) is not None:
                await loop.run_in_executor(pool, job.run)
                for ticket in committer.complete(job):
                    waiters.pop(id(ticket)).set_result(None)

    async def producer(number: int) -> None:
        for i in range(PUBLISHES_EACH):
            ticket: Ticket = committer.submit([(f"p.{number}", b"", b"%d-%d" % (number, i), i)])
            done = loop.create_future()
            waiters[id(ticket)] = done
            wake.set()
            await done
            assert set(ticket.seqs) <= durable_seqs(fs), "acknowledged before durable"
            acked.extend(ticket.seqs)

    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        driver = asyncio.create_task(committer_task(pool))
        await asyncio.wait_for(asyncio.gather(*(producer(n) for n in range(PRODUCERS))), timeout=60)
        driver.cancel()
    return acked, committer.fsyncs


def test_concurrent_producers_share_fsyncs_and_are_acked_only_when_durable() -> None:
    fs = FaultFS()
    acked, fsyncs = asyncio.run(run_loop(fs))
    assert sorted(acked) == list(range(1, PRODUCERS * PUBLISHES_EACH + 1))
    assert fsyncs < PRODUCERS * PUBLISHES_EACH // 2, f"{fsyncs} fsyncs for {len(acked)} publishes"
    assert durable_seqs(fs) == set(acked)
