"""Model-based: random operation sequences give the same stream in the file store as in memory.

Tiny segments and blocks make sealing, head-segment removal and reopening happen often; the
memory store is the model (same StreamIndex semantics, independent storage).
"""

from __future__ import annotations

import itertools
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from appliance.store.api import StoreLimitError, StoreLimits, StreamStore
from appliance.store.filestore import FileStoreConfig, FileStreamStore
from appliance.store.memory import MemoryStreamStore
from appliance.testing.faultfs import FaultFS

SUBJECTS = ["a.1", "a.2", "b.1", "b.x.y"]
op = st.one_of(
    st.tuples(st.just("store"), st.sampled_from(SUBJECTS), st.binary(max_size=90)),
    st.tuples(st.just("batch"), st.integers(1, 12), st.sampled_from(SUBJECTS)),
    st.tuples(st.just("delete"), st.integers(0, 80), st.booleans()),
    st.tuples(st.just("purge"), st.sampled_from(["", "a.*", "b.>", "a.1"]), st.integers(0, 3)),
    st.tuples(st.just("purge_seq"), st.integers(0, 80)),
    st.tuples(st.just("compact"), st.integers(0, 90)),
    st.tuples(st.just("expire"), st.integers(0, 200)),
    st.tuples(st.just("reopen")),
    st.tuples(st.just("seal")),
)
limits = st.builds(
    StoreLimits,
    max_msgs=st.sampled_from([-1, 5, 20]),
    max_msgs_per_subject=st.sampled_from([-1, 1, 3]),
    max_age_ns=st.sampled_from([0, 50]),
    discard=st.sampled_from(["old", "new"]),
)
counter = itertools.count()


def apply(store: StreamStore, step: tuple[object, ...], clock: list[int]) -> object:
    kind = step[0]
    try:
        if kind == "store":
            clock[0] += 1
            return store.store_msg(str(step[1]), b"", bytes(step[2]), clock[0])  # type: ignore[arg-type]
        if kind == "batch":
            clock[0] += 1
            return store.store_batch([(str(step[2]), b"h" if i % 2 else b"", b"%d" % i, clock[0]) for i in range(int(step[1]))])  # type: ignore[call-overload]
        if kind == "delete":
            return store.delete(int(step[1]), erase=bool(step[2]))  # type: ignore[call-overload]
        if kind == "purge":
            return store.purge(str(step[1]), keep=int(step[2]))  # type: ignore[call-overload]
        if kind == "purge_seq":
            return store.purge(up_to_seq=int(step[1]))  # type: ignore[call-overload]
        if kind == "compact":
            return store.compact(int(step[1]))  # type: ignore[call-overload]
        if kind == "expire":
            return store.expire(int(step[1]))  # type: ignore[call-overload]
    except StoreLimitError as exc:
        return exc.reason
    return None


def view(store: StreamStore) -> tuple[object, ...]:
    state = store.state(with_deleted=True)
    return (
        list(store.scan()),
        state.msgs, state.first_seq, state.last_seq, state.first_ts_ns, state.last_ts_ns, state.num_subjects,
        state.deleted,
        store.subject_counts(),
        [store.load_last(s) for s in ["a.*", "b.>", ">"] + SUBJECTS],
        [store.load_next(f, 3) for f in ["a.*", "b.>", "b.1"]],
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(op, max_size=40), limits, st.booleans())
def test_file_store_behaves_like_the_memory_model(
    tmp_path: Path, steps: list[tuple[object, ...]], lim: StoreLimits, seal_inline: bool
) -> None:
    fs = FaultFS()
    config = FileStoreConfig(
        str(tmp_path / f"m{next(counter)}"), limits=lim, segment_bytes=600, block_raw_bytes=200, seal_inline=seal_inline
    )
    model = MemoryStreamStore(lim)
    store = FileStreamStore(config, ops=fs)
    model_clock, store_clock = [0], [0]
    for step in steps:
        if step[0] == "reopen":
            store.close()
            store = FileStreamStore(config, ops=fs)
            continue
        if step[0] == "seal":
            job = store.begin_seal()
            if job is not None:
                job.run()
                assert store.finish_seal(job)
            continue
        assert apply(store, step, store_clock) == apply(model, step, model_clock), step
        assert view(store) == view(model), step
    store.close()
    assert view(FileStreamStore(config, ops=fs)) == view(model)
