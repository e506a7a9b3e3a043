"""The shared status table: nothing in /dev/shm, rows shared across mappings, consistent counters."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from appliance.clock import ManualClock
from appliance.supervisor.status_row import OFFSETS, ROW_BYTES, attach_writer
from appliance.supervisor.status_table import ROW_DTYPE, StatusTable, WorkerState


@pytest.fixture
def table() -> Iterator[StatusTable]:
    created = StatusTable.create(3)
    yield created
    created.close()


def test_rows_are_two_cache_lines() -> None:
    assert ROW_DTYPE.itemsize == ROW_BYTES == 128


def test_the_name_is_gone_from_dev_shm_as_soon_as_it_exists(table: StatusTable) -> None:
    assert [n for n in os.listdir("/dev/shm") if n.startswith(f"appliance-status-{os.getpid()}-")] == []
    assert table.row_count == 3


def test_a_second_mapping_of_the_fd_sees_the_same_rows(table: StatusTable) -> None:
    table.reset_row(1, pid=4242, core=1, numa_node=0, restarts=2, now_mono_s=50.0)
    worker_side = StatusTable.attach(os.dup(table.fd))  # what a worker does with its inherited fd
    try:
        clock = ManualClock(start_s=51.5)
        writer = worker_side.writer(1, clock=clock)
        writer.heartbeat()
        writer.set_counters(connections=3, msgs_in=10, msgs_out=20, bytes_in=100, bytes_out=200)
        writer.set_ring_fill(0.25)
    finally:
        worker_side.close()
    row = table.snapshot(1)
    assert (row.pid, row.core, row.restarts, row.state) == (4242, 1, 2, WorkerState.STARTING)
    assert (row.heartbeat_mono_s, row.heartbeats) == (51.5, 1)
    assert (row.connections, row.msgs_in, row.msgs_out, row.bytes_in, row.bytes_out) == (3, 10, 20, 100, 200)
    assert row.ring_fill == 0.25


def test_a_new_process_in_a_slot_starts_from_zero(table: StatusTable) -> None:
    writer = table.writer(0)
    writer.set_counters(connections=1, msgs_in=1, msgs_out=1, bytes_in=1, bytes_out=1)
    table.reset_row(0, pid=7, core=0, numa_node=0, restarts=1, now_mono_s=3.0)
    row = table.snapshot(0)
    assert (row.connections, row.msgs_in, row.heartbeats, row.heartbeat_mono_s) == (0, 0, 0, 3.0)


def test_counters_are_published_under_an_even_sequence(table: StatusTable) -> None:
    writer = table.writer(2)
    for n in range(5):
        writer.set_counters(connections=n, msgs_in=n, msgs_out=n, bytes_in=n, bytes_out=n)
    assert int(table.rows[2]["seq"]) == 10
    assert table.snapshot(2).msgs_in == 4


def test_the_supervisor_writes_states(table: StatusTable) -> None:
    table.set_state(0, WorkerState.BACKOFF)
    assert [row.state for row in table.snapshots()] == [WorkerState.BACKOFF, WorkerState.EMPTY, WorkerState.EMPTY]


def test_attach_refuses_what_is_not_a_table() -> None:
    read, write = os.pipe()
    os.close(write)
    try:
        with pytest.raises(ValueError):
            StatusTable.attach(read)
    finally:
        os.close(read)


def test_a_worker_writes_its_row_through_the_fd_alone(table: StatusTable) -> None:
    writer = attach_writer(os.dup(table.fd), 2, clock=ManualClock(start_s=7.0))
    writer.heartbeat()
    writer.heartbeat()
    writer.set_counters(connections=1, msgs_in=2, msgs_out=3, bytes_in=4, bytes_out=5)
    row = table.snapshot(2)
    assert (row.heartbeat_mono_s, row.heartbeats, row.msgs_out, row.bytes_out) == (7.0, 2, 3, 5)


def test_the_numpy_view_and_the_struct_layout_agree() -> None:
    assert ROW_DTYPE.fields is not None
    assert {name: ROW_DTYPE.fields[name][1] for name in ROW_DTYPE.names or ()} == OFFSETS


def test_workers_do_not_import_numpy() -> None:
    probe = "import sys, appliance.worker.process; print('numpy' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout.strip() == "False"


WRITER = """
import sys
from appliance.supervisor.status_row import attach_writer
writer = attach_writer(int(sys.argv[1]), 0)
for n in range(int(sys.argv[2])):
    writer.set_counters(connections=n, msgs_in=n, msgs_out=n, bytes_in=n, bytes_out=n)
"""


def test_a_reader_never_sees_half_an_update_from_a_writer_process(table: StatusTable) -> None:
    updates = 100_000
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(table.fd), str(updates)], pass_fds=(table.fd,))
    try:
        while writer.poll() is None:
            row = table.snapshot(0)
            assert row.connections == row.msgs_in == row.msgs_out == row.bytes_in == row.bytes_out, row
    finally:
        assert writer.wait(timeout=60) == 0
    assert table.snapshot(0).msgs_in == updates - 1
