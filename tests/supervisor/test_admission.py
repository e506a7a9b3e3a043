"""The server-wide connection count of supervisor/admission.py: every worker's admissions add up
against one max_connections, a dead worker's connections stop counting, and the admission lock
can neither be overtaken by a concurrent worker nor left held by a killed one."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from appliance.supervisor.admission import ConnectionGate, attach_gate
from appliance.supervisor.status_table import StatusTable

DEADLINE_S = 30.0


@pytest.fixture
def table() -> Iterator[StatusTable]:
    made = StatusTable.create(4)
    yield made
    made.close()


def gates(table: StatusTable, limit: int, count: int = 2) -> list[ConnectionGate]:
    return [attach_gate(table.fd, index, limit=limit) for index in range(count)]


def test_admissions_of_every_worker_add_up_against_one_limit(table: StatusTable) -> None:
    zero, one = gates(table, limit=3)
    assert zero.admit(1) and one.admit(2) and zero.admit(3)
    assert not one.admit(4) and not zero.admit(5), "the 4th is refused whichever worker it lands on"
    assert zero.total() == one.total() == 3
    assert [row.index for row in table.snapshots()] == [0, 1, 2, 3]
    assert [int(table.rows[i]["admitted"]) for i in range(4)] == [2, 1, 0, 0]
    one.release(4)  # refused: it was never counted
    assert zero.total() == 3
    zero.release(1)
    assert one.admit(6)
    assert not one.admit(7)
    for gate in (zero, one):
        gate.close()


def test_a_dead_workers_connections_stop_counting_when_the_supervisor_reaps_it(table: StatusTable) -> None:
    zero, one = gates(table, limit=2)
    assert one.admit(2) and one.admit(4)
    assert not zero.admit(1)
    table.release_admitted(1)  # what the supervisor does when worker 1 has died
    assert zero.admit(3)
    successor = attach_gate(table.fd, 1, limit=2)
    assert successor.admit(5)  # it may admit before the supervisor resets the rest of its row
    table.reset_row(1, pid=99, core=0, numa_node=0, restarts=1, now_mono_s=0.0)
    assert zero.total() == 2, "resetting the row keeps what the successor admitted"
    assert not zero.admit(7)
    successor.close()
    for gate in (zero, one):
        gate.close()


def test_a_negative_or_zero_room_refuses_everything(table: StatusTable) -> None:
    (gate,) = gates(table, limit=0, count=1)
    assert not gate.admit(1)
    gate.close()


CONTENDER = """
import fcntl, os, sys
from appliance.supervisor.admission import LOCK_BYTES, LOCK_OFFSET, attach_gate
fd = int(sys.argv[1])
gate = attach_gate(fd, int(sys.argv[2]), limit=int(sys.argv[3]))
sys.stdin.read(1)  # all start together
highest = admitted = 0
for cid in range(int(sys.argv[4])):
    if gate.admit(cid):
        admitted += 1
        # counted by every worker, ours included, under the admission lock: a sum read without
        # it can mix one worker's count from before its release with another's admission after
        # it (a total no moment had); under it no admission runs, so the sum is at most the
        # total when the lock was taken
        fcntl.lockf(fd, fcntl.LOCK_EX, LOCK_BYTES, LOCK_OFFSET, os.SEEK_SET)
        highest = max(highest, gate.total())
        fcntl.lockf(fd, fcntl.LOCK_UN, LOCK_BYTES, LOCK_OFFSET, os.SEEK_SET)
        gate.release(cid)
print(highest, admitted)
"""


def test_concurrent_workers_never_admit_past_the_limit(table: StatusTable) -> None:
    """Four processes admit and release as fast as they can against a limit of 2: without the
    lock two of them see 1 at the same moment and both admit (a total of 3 is seen)."""
    limit, attempts, workers = 2, 20_000, 4
    children = [subprocess.Popen([sys.executable, "-c", CONTENDER, str(table.fd), str(index), str(limit),
                                  str(attempts)], pass_fds=[table.fd], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
                for index in range(workers)]
    for child in children:
        assert child.stdin is not None
        child.stdin.write(b"g")
        child.stdin.flush()
    results = [child.communicate(timeout=DEADLINE_S)[0].split() for child in children]
    assert all(int(highest) <= limit for highest, _ in results), results
    assert all(int(admitted) > 0 for _, admitted in results), results
    assert sum(int(table.rows[i]["admitted"]) for i in range(workers)) == 0, "every admission was released"


HOLDER = """
import fcntl, os, sys
from appliance.supervisor.admission import LOCK_BYTES, LOCK_OFFSET
fcntl.lockf(int(sys.argv[1]), fcntl.LOCK_EX, LOCK_BYTES, LOCK_OFFSET, os.SEEK_SET)
print("holding", flush=True)
sys.stdin.read()
"""


def test_a_held_lock_refuses_rather_than_blocks_and_a_killed_holder_leaves_it_free(table: StatusTable) -> None:
    (gate,) = gates(table, limit=10, count=1)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(table.fd)], pass_fds=[table.fd],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"holding\n"
        assert not gate.admit(1), "a sibling stopped while holding the lock: refuse, never wait"
        assert gate.lock_failures == 1
        holder.kill()  # SIGKILL: the kernel drops its record locks
        holder.wait(timeout=DEADLINE_S)
        assert gate.admit(2)
        assert gate.total() == 1
    finally:
        if holder.poll() is None:
            holder.kill()
        holder.communicate(timeout=DEADLINE_S)  # reaps it and closes our ends of its pipes
        gate.close()
