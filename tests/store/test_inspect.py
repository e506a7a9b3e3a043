"""`appliance store inspect DIR`: summary, segment table, --verify, --dump; never modifies DIR."""

from __future__ import annotations

import hashlib
from pathlib import Path

from click.testing import CliRunner

from appliance.cli.main import main
from appliance.store import records, segment
from appliance.store.filestore import FileStoreConfig, FileStreamStore

T0 = 1_700_000_000_000_000_000


def make_stream(directory: Path) -> None:
    store = FileStreamStore(FileStoreConfig(str(directory), segment_bytes=4000, block_raw_bytes=1000))
    for i in range(120):
        store.store_msg(f"orders.{i % 3}", b"", b'{"order":%d,"status":"new"}' % i, T0 + i * 1_000_000)
    store.delete(5)
    store.close()


def fingerprint(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())}


def test_inspect_prints_a_summary_and_one_row_per_segment(tmp_path: Path) -> None:
    make_stream(tmp_path / "s")
    before = fingerprint(tmp_path / "s")
    result = CliRunner().invoke(main, ["store", "inspect", str(tmp_path / "s")])
    assert result.exit_code == 0, result.output
    assert "Messages: 119" in result.output and "Deleted: 1" in result.output
    assert "First: 1 @ 2023-11-14T22:13:20.000Z" in result.output
    segments = sorted(p.name for p in (tmp_path / "s").iterdir() if p.suffix == ".seg")
    rows = [line for line in result.output.splitlines() if line.startswith("0000")]
    assert [r.split()[0] for r in rows] == segments
    assert any(" sealed " in r for r in rows) and rows[-1].split()[1] == "active"
    assert fingerprint(tmp_path / "s") == before


def test_verify_passes_on_a_good_stream_and_fails_with_file_and_offset(tmp_path: Path) -> None:
    make_stream(tmp_path / "s")
    assert "Verify: OK" in CliRunner().invoke(main, ["store", "inspect", "--verify", str(tmp_path / "s")]).output
    first = tmp_path / "s" / segment.segment_name(1)
    data = bytearray(first.read_bytes())
    data[segment.HEADER_BYTES + segment.BLOCK_HEADER.size + 5] ^= 0x10
    first.write_bytes(bytes(data))
    result = CliRunner().invoke(main, ["store", "inspect", "--verify", str(tmp_path / "s")])
    assert result.exit_code == 1
    assert f"{first}:{segment.HEADER_BYTES}: block checksum mismatch" in result.output


def test_verify_reports_a_torn_active_tail_and_inspect_leaves_it_alone(tmp_path: Path) -> None:
    make_stream(tmp_path / "s")
    active = sorted((tmp_path / "s").glob("*.seg"))[-1]
    with active.open("ab") as f:
        f.write(records.encode_msg(999, b"x", b"", b"torn", 0)[:20])
    before = fingerprint(tmp_path / "s")
    result = CliRunner().invoke(main, ["store", "inspect", "--verify", str(tmp_path / "s")])
    assert result.exit_code == 1 and "torn tail" in result.output
    assert "Recovery: torn tail 20 B" in result.output
    assert fingerprint(tmp_path / "s") == before


def test_dump_prints_live_messages_with_a_subject_filter(tmp_path: Path) -> None:
    make_stream(tmp_path / "s")
    result = CliRunner().invoke(main, ["store", "inspect", "--dump", "--subject", "orders.2", str(tmp_path / "s")])
    dumped = [line for line in result.output.splitlines() if " orders." in line]
    assert len(dumped) == 40
    assert dumped[0].startswith("3 2023-11-14T22:13:20.002Z orders.2 hdr=0 {\"order\":2")
