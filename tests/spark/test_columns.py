"""The columnar decoders agree row for row with the per-message decoders they replace (random data,
no Spark session needed): store blocks vs speedups.block_msgs_py."""

from __future__ import annotations

import pytest

pytest.importorskip("pyarrow", reason="pyarrow is not installed (pip install '.[spark]')")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from appliance.errors import CorruptData  # noqa: E402
from appliance.spark import store_files  # noqa: E402
from appliance.spark.block_columns import MalformedBlock, block_columns  # noqa: E402
from appliance.spark.directget import stored_headers  # noqa: E402
from appliance.store import records, speedups  # noqa: E402

SUBJECTS = st.text(alphabet=st.sampled_from("abcé.ü0"), min_size=1, max_size=12)
HEADERS = st.sampled_from([b"", b"NATS/1.0\r\nA: 1\r\nA: 2\r\n\r\n", "NATS/1.0\r\nK-é: v w\r\n\r\n".encode()])
MESSAGES = st.lists(
    st.tuples(SUBJECTS, HEADERS, st.binary(max_size=40), st.integers(-(1 << 62), 1 << 62), st.booleans()),
    max_size=40,
)


def _block(messages: list[tuple[str, bytes, bytes, int, bool]], first_seq: int) -> bytes:
    parts = []
    for k, (subject, headers, payload, ts, delete_after) in enumerate(messages):
        parts.append(records.encode_msg(first_seq + k, subject.encode(), headers, payload, ts))
        if delete_after:  # removal records between messages are skipped by both decoders
            parts.append(records.encode_delete([(first_seq + k, first_seq + k)], ts))
    return b"".join(parts)


def _expected(raw: bytes) -> list[tuple[object, ...]]:
    msgs = speedups.block_msgs_py(raw, 0, lambda seq, subject, headers, payload, ts: (seq, subject, headers, payload, ts))
    return [("S", seq, subject, ts // 1000, stored_headers(headers), payload) for seq, subject, headers, payload, ts in msgs]


@settings(max_examples=150, deadline=None)
@given(MESSAGES, st.integers(1, 1 << 40))
def test_block_columns_equal_row_decoder(messages, first_seq) -> None:
    raw = _block(messages, first_seq)
    batch, seqs, stamps = block_columns("S", raw, stored_headers)
    got = [
        (r["stream"], r["seq"], r["subject"], batch.column("time").cast("int64")[k].as_py(), dict(r["headers"]), r["data"])
        for k, r in enumerate(batch.to_pylist())
    ]
    assert got == _expected(raw)
    assert seqs.tolist() == [e[1] for e in _expected(raw)]
    assert stamps.tolist() == [m[3] for m in messages]


def test_malformed_record_inside_block() -> None:
    raw = bytearray(_block([("a.b", b"", b"xyz", 1, False), ("a.c", b"", b"xyz", 2, False)], 1))
    raw[8 + 1 + 8 + 8] = 200  # first record's subject length no longer adds up to its length
    with pytest.raises(MalformedBlock):
        block_columns("S", bytes(raw), stored_headers)


def test_corrupt_block_names_file_and_offset(tmp_path, monkeypatch) -> None:
    from appliance.spark import source_store

    piece = store_files.Piece("S", str(tmp_path / "x.seg"), 4096, 1, 1, 0, 0, 1)
    raw = bytearray(_block([("a.b", b"", b"xyz", 1, False)], 1))
    raw[records.HEAD_BYTES] = 0xFF  # the subject is no longer UTF-8
    monkeypatch.setattr(store_files, "piece_records", lambda *a, **k: bytes(raw))
    with pytest.raises(CorruptData, match="x.seg"):
        source_store.piece_batch(piece, None)
