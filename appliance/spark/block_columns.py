"""A decoded store block as Arrow columns without a Python object per message (the offline reader's
hot path): speedups.msg_columns (C in native/store.c, a pure-Python twin without it) walks the
records once and hands back the seq, time, subject and payload columns as ready Arrow buffers,
where the header blocks are and where the other records (removals) are; only messages that carry
headers are parsed one by one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from appliance.spark.rows import ARROW_SCHEMA, HEADERS_TYPE, constant_strings, empty_maps
from appliance.store import speedups


class MalformedBlock(ValueError):
    """A record inside a (checksum-verified) block whose lengths do not add up."""


@dataclass(frozen=True, slots=True)
class Columns:
    """The MSG records of a buffer as column buffers (speedups.msg_columns) and where the valid
    records stop."""

    seqs: np.ndarray  # int64
    stamps: np.ndarray  # int64, ns
    subject_offsets: bytes
    subjects: bytes
    payload_offsets: bytes
    payloads: bytes
    header_spans: np.ndarray  # (row, offset, length) int64 rows
    others: list[int]  # offsets of the records of other kinds
    stop: int


def columns_of(raw: bytes | memoryview, start: int = 0, *, check: bool = False) -> Columns:
    """Every whole valid record from start (crc checked when check); stop says where they end."""
    seqs, stamps, subject_offsets, subjects, payload_offsets, payloads, spans, others, stop = speedups.msg_columns(
        raw, start, check
    )
    return Columns(
        np.frombuffer(seqs, dtype="<i8"), np.frombuffer(stamps, dtype="<i8"), subject_offsets, subjects,
        payload_offsets, payloads, np.frombuffer(spans, dtype="<i8").reshape(-1, 3),
        np.frombuffer(others, dtype="<i8").tolist(), stop,
    )


def block_layout(raw: bytes) -> Columns:
    """The columns of a verified block, every byte of which must be whole records (MalformedBlock)."""
    found = columns_of(raw)
    if found.stop != len(raw):
        raise MalformedBlock(f"malformed record in block at {found.stop}")
    return found


def block_columns(
    stream: str, raw: bytes, headers_of: Callable[[bytes], dict[str, list[str]]]
) -> tuple[pa.RecordBatch, np.ndarray, np.ndarray]:
    """Every MSG record of a verified block as one batch, with its seqs and timestamps (ns) as
    numpy arrays for filtering. MalformedBlock if a record's lengths are inconsistent; pa.ArrowInvalid
    if a subject is not UTF-8."""
    found = block_layout(raw)
    return batch_of(stream, raw, found, headers_of), found.seqs, found.stamps


def batch_of(
    stream: str, raw: bytes | memoryview, found: Columns, headers_of: Callable[[bytes], dict[str, list[str]]]
) -> pa.RecordBatch:
    n = len(found.seqs)
    subjects = pa.StringArray.from_buffers(n, pa.py_buffer(found.subject_offsets), pa.py_buffer(found.subjects))
    subjects.validate(full=True)  # UTF-8, as the store's own decode requires
    payloads = pa.BinaryArray.from_buffers(
        pa.binary(), n, [None, pa.py_buffer(found.payload_offsets), pa.py_buffer(found.payloads)]
    )
    if len(found.header_spans):
        blocks = [b""] * n
        for row, at, length in found.header_spans.tolist():
            blocks[row] = bytes(raw[at : at + length])
        headers = pa.array([list(headers_of(b).items()) if b else [] for b in blocks], HEADERS_TYPE)
    else:
        headers = empty_maps(n)
    times = pa.array(np.floor_divide(found.stamps, 1000), pa.int64()).cast(pa.timestamp("us", tz="UTC"))
    return pa.RecordBatch.from_arrays(
        [constant_strings(stream, n), pa.array(found.seqs, pa.int64()), subjects, times, headers, payloads],
        schema=ARROW_SCHEMA,
    )
