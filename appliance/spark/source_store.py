"""The `jetstream-store` data source: reads stream directories directly (no server).

    spark.read.format("jetstream-store").load("/var/lib/appliance/jetstream")          # every stream
    spark.read.format("jetstream-store").option("stream", "ORDERS").load(store_dir)    # one of them

Same columns as `jetstream`. Options: stream (a name; default all found), startSeq, endSeq,
startTime, endTime, subject, numPartitions, corrupt ("fail", the default: a damaged block fails
the read naming file:offset; "skip": damaged blocks are left out and counted in the driver log
and by `corrupt_blocks()`). Pushed-down seq/time filters prune blocks by the footer index.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, Filter, InputPartition

from appliance.errors import CorruptData
from appliance.spark import plan, store_files
from appliance.store.subjects import matches_all
from appliance.spark.directget import stored_headers
from appliance.spark.block_columns import MalformedBlock, block_columns
from appliance.spark.source import PushdownSlot, push_into

logger = logging.getLogger(__name__)



@dataclass(frozen=True)
class Pieces(InputPartition):  # type: ignore[misc]
    """Blocks to read and the removals that apply to them (planned on the driver: the partitions
    travel to the tasks, the reader's own state may be pickled before partitions() ran)."""

    pieces: tuple[store_files.Piece, ...]
    removed_below: tuple[tuple[str, int], ...] = ()
    removed: tuple[tuple[str, frozenset[int]], ...] = ()


def corrupt_blocks(path: str, stream: str = "") -> list[CorruptData]:
    """Every damaged block or record a `corrupt=skip` read of `path` leaves out (file:offset)."""
    problems: list[CorruptData] = []
    for found in store_files.stream_dirs(path):
        if stream and found.name != stream:
            continue
        zdict = store_files.dictionary(found.path)
        result = store_files.plan_stream(found, 1, plan.SEQ_MAX, store_files.TIME_MIN_NS, store_files.TIME_MAX_NS,
                                         skip_corrupt=True, removals=False)
        problems.extend(result.corrupt)
        for piece in result.pieces:
            try:
                store_files.piece_records(piece, zdict)
            except CorruptData as exc:
                problems.append(exc)
    return problems


class StoreReader(DataSourceReader):  # type: ignore[misc]
    pushFilters = PushdownSlot()

    def __init__(self, options: dict[str, str]) -> None:
        self.options = options
        self.path = options.get("path", "")
        if not self.path:
            raise ValueError("jetstream-store: give the store or stream directory: .load(path)")
        self.stream = options.get("stream", "")
        self.plan = plan.from_options(options)
        self.skip_corrupt = options.get("corrupt", "fail") == "skip"
        self.num_partitions = int(options.get("numpartitions", "0"))

    def push_filters(self, filters: list[Filter]) -> Iterator[Filter]:
        return push_into(self, filters)

    def partitions(self) -> Sequence[InputPartition]:
        wanted = self.plan
        if wanted.empty:
            return [Pieces(())]
        pieces: list[store_files.Piece] = []
        below: dict[str, int] = {}
        seqs: dict[str, frozenset[int]] = {}
        skipped: list[CorruptData] = []
        ts_lo = wanted.time_lo * 1000 if wanted.time_lo != plan.TIME_MIN_US else store_files.TIME_MIN_NS
        ts_hi = wanted.time_hi * 1000 + 999 if wanted.time_hi != plan.TIME_MAX_US else store_files.TIME_MAX_NS
        for found in store_files.stream_dirs(self.path):
            if self.stream and found.name != self.stream:
                continue
            result = store_files.plan_stream(found, wanted.seq_lo, wanted.seq_hi, ts_lo, ts_hi,
                                             skip_corrupt=self.skip_corrupt)
            pieces.extend(result.pieces)
            below.update(result.removed_below)
            seqs.update({k: frozenset(v) for k, v in result.removed.items()})
            skipped.extend(result.corrupt)
        if skipped:
            logger.warning("jetstream-store: skipped %d damaged block(s): %s", len(skipped), "; ".join(map(str, skipped)))
        count = self.num_partitions or min(max(len(pieces) // 8, 1), 64)
        groups: list[list[store_files.Piece]] = [[] for _ in range(max(min(count, len(pieces)), 1))]
        for k, piece in enumerate(pieces):
            groups[k * len(groups) // max(len(pieces), 1)].append(piece)
        return [_with_removals(g, below, seqs) for g in groups]

    def read(self, partition: Pieces) -> Iterator[pa.RecordBatch]:
        wanted = self.plan
        zdicts: dict[str, Any] = {}
        for piece in partition.pieces:
            if piece.path not in zdicts:
                zdicts[piece.path] = store_files.dictionary(piece.path.rsplit("/", 1)[0])
            try:
                batch, seqs, stamps = piece_batch(piece, zdicts[piece.path])
            except CorruptData as exc:
                if self.skip_corrupt:
                    logger.warning("jetstream-store: skipped damaged block %s", exc)
                    continue
                raise
            if not batch.num_rows:
                continue
            below = dict(partition.removed_below).get(piece.stream, 0)
            removed = dict(partition.removed).get(piece.stream, frozenset())
            if not _whole(piece, wanted, below, removed):
                batch = batch.filter(_wanted_mask(batch, seqs, stamps, wanted, below, removed))
            if batch.num_rows:
                yield batch


def piece_batch(piece: store_files.Piece, zdict: Any) -> tuple[pa.RecordBatch, np.ndarray, np.ndarray]:
    """Every message of a piece as one Arrow batch (checksums verified), with its seqs and times (ns)."""
    raw = store_files.piece_records(piece, zdict, frames=False)
    try:
        return block_columns(piece.stream, raw, stored_headers)
    except (MalformedBlock, pa.ArrowInvalid) as exc:  # a malformed record inside a block whose checksum held
        raise CorruptData(f"damaged record inside block: {exc}", path=piece.path, offset=piece.block_offset) from None


def _wanted_mask(
    batch: pa.RecordBatch, seqs: np.ndarray, stamps: np.ndarray, wanted: plan.Plan, below: int, removed: frozenset[int]
) -> pa.Array:
    """plan.accepts and the removals for every row, as a boolean column (seq and time vectorised)."""
    times = np.floor_divide(stamps, 1000)
    keep = (seqs >= max(below, wanted.seq_lo)) & (seqs <= wanted.seq_hi)
    keep &= (times >= wanted.time_lo) & (times <= wanted.time_hi)
    if removed:
        keep &= ~np.isin(seqs, np.fromiter(removed, dtype=np.int64, count=len(removed)))
    if wanted.subject_eq is not None or wanted.subject_prefixes or not matches_all(wanted.subject_filter):
        subjects = batch.column("subject").to_pylist()
        keep &= np.fromiter(
            (wanted.accepts(int(s), subject, int(t)) for s, subject, t in zip(seqs, subjects, times)), dtype=bool, count=len(subjects)
        )
    return pa.array(keep)


def _whole(piece: store_files.Piece, wanted: plan.Plan, below: int, removed: frozenset[int]) -> bool:
    """Does the plan take every message of the piece (so no row needs checking)?"""
    if wanted.subject_eq is not None or wanted.subject_prefixes or not matches_all(wanted.subject_filter):
        return False
    if piece.first_seq < max(wanted.seq_lo, below) or piece.last_seq > wanted.seq_hi:
        return False
    if wanted.has_time and (piece.ts_min // 1000 < wanted.time_lo or piece.ts_max // 1000 > wanted.time_hi):
        return False
    return not any(piece.first_seq <= seq <= piece.last_seq for seq in removed)


def _with_removals(group: list[store_files.Piece], below: dict[str, int], seqs: dict[str, frozenset[int]]) -> Pieces:
    streams = {p.stream for p in group}
    ranges = [(p.stream, p.first_seq, p.last_seq) for p in group]
    mine = {
        name: frozenset(s for s in seqs.get(name, ()) if any(n == name and a <= s <= b for n, a, b in ranges))
        for name in streams
    }
    return Pieces(
        tuple(group),
        tuple((name, below[name]) for name in streams if name in below),
        tuple((name, found) for name, found in mine.items() if found),
    )
