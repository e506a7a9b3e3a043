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


def store_dir_with_two_streams(base: Path) -> tuple[Path, Path]:
    """The layout of `-sd base`: base/jetstream/<account>/streams/<stream>/msgs."""
    streams = base / "jetstream" / "$G" / "streams"
    make_stream(streams / "GOOD" / "msgs")
    store = FileStreamStore(FileStoreConfig(str(streams / "EVENTS" / "msgs"), segment_bytes=1 << 20))
    for i in range(300):
        store.store_msg(f"events.{i % 20}", b"", b'{"event":%d,"pad":"%s"}' % (i, b"x" * 100), T0 + i)
    store.close()
    return streams / "EVENTS", max((streams / "EVENTS" / "msgs").glob("*.seg"))


def test_verify_finds_damage_below_a_store_dir_a_stream_dir_and_a_msgs_dir(tmp_path: Path) -> None:
    stream_dir, active = store_dir_with_two_streams(tmp_path / "sd")
    data = bytearray(active.read_bytes())
    middle = len(data) // 2
    data[middle] ^= 0x40
    active.write_bytes(bytes(data))
    for path in (tmp_path / "sd", tmp_path / "sd" / "jetstream", stream_dir, stream_dir / "msgs"):
        result = CliRunner().invoke(main, ["store", "inspect", "--verify", str(path)])
        assert result.exit_code == 1, (path, result.output)
        assert "damaged records" in result.output and "records after offset" in result.output
        assert "torn tail (" not in result.output, "damage mid-segment is never called a torn tail"
    whole = CliRunner().invoke(main, ["store", "inspect", "--verify", str(tmp_path / "sd")]).output
    summaries = [line for line in whole.splitlines() if line.startswith("$G > ")]
    assert [line.split(":")[0] for line in summaries] == ["$G > EVENTS", "$G > GOOD"]
    assert "Messages: 299" in summaries[0] and "Verify: 1 problem(s)" in summaries[0]
    assert "Messages: 119" in summaries[1] and "Verify: OK" in summaries[1]
    single = CliRunner().invoke(main, ["store", "inspect", "--verify", str(stream_dir)]).output
    assert single.count("SEGMENT ") == 1, "the segment table is printed once"
    assert "seq " in single and "Messages: 299" in single


def test_a_path_without_stream_data_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "empty" / "jetstream").mkdir(parents=True)
    result = CliRunner().invoke(main, ["store", "inspect", "--verify", str(tmp_path / "empty")])
    assert result.exit_code == 2
    assert f"no stream found under {tmp_path / 'empty'}" in result.output


def test_a_good_store_dir_verifies_ok_with_one_line_per_stream(tmp_path: Path) -> None:
    store_dir_with_two_streams(tmp_path / "sd")
    result = CliRunner().invoke(main, ["store", "inspect", "--verify", str(tmp_path / "sd")])
    assert result.exit_code == 0, result.output
    assert result.output.count("Verify: OK") == 3  # two streams and the total
