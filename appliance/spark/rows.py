"""Rows out of the readers as Arrow record batches (Spark takes them without per-row Python work)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

HEADERS_TYPE = pa.map_(pa.string(), pa.list_(pa.string()))
ARROW_SCHEMA = pa.schema([
    ("stream", pa.string()), ("seq", pa.int64()), ("subject", pa.string()),
    ("time", pa.timestamp("us", tz="UTC")), ("headers", HEADERS_TYPE), ("data", pa.binary()),
])
BATCH_ROWS = 8192


class BatchBuilder:
    """Columns of up to BATCH_ROWS messages of one stream; full() says when to emit."""

    def __init__(self, stream: str) -> None:
        self.stream = stream
        self.clear()

    def clear(self) -> None:
        self.seqs: list[int] = []
        self.subjects: list[str] = []
        self.times: list[int] = []
        self.headers: list[list[tuple[str, list[str]]]] = []
        self.data: list[bytes] = []

    def add(self, seq: int, subject: str, time_us: int, headers: dict[str, list[str]], data: bytes) -> None:
        self.seqs.append(seq)
        self.subjects.append(subject)
        self.times.append(time_us)
        self.headers.append(list(headers.items()) if headers else [])
        self.data.append(data)

    def full(self) -> bool:
        return len(self.seqs) >= BATCH_ROWS

    def __len__(self) -> int:
        return len(self.seqs)

    def take(self) -> pa.RecordBatch:
        n = len(self.seqs)
        batch = pa.RecordBatch.from_arrays([
            pa.array([self.stream] * n, pa.string()), pa.array(self.seqs, pa.int64()),
            pa.array(self.subjects, pa.string()), pa.array(self.times, pa.timestamp("us", tz="UTC")),
            pa.array(self.headers, HEADERS_TYPE), pa.array(self.data, pa.binary()),
        ], schema=ARROW_SCHEMA)
        self.clear()
        return batch


def constant_strings(value: str, n: int) -> pa.Array:
    """n copies of one string as a StringArray, built from buffers (no list of n Python strings)."""
    encoded = value.encode()
    offsets = np.arange(n + 1, dtype=np.int32) * len(encoded)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(encoded * n))


def empty_maps(n: int) -> pa.Array:
    """n empty header maps, from zero offsets."""
    return pa.MapArray.from_arrays(
        pa.array(np.zeros(n + 1, dtype=np.int32)), pa.array([], pa.string()), pa.array([], pa.list_(pa.string()))
    )
