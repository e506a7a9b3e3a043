"""The group ledger (store/group_ledger.py): what a store held survives restarts; a torn last line
or a damaged one is skipped; a group deleted on purpose is forgotten."""

from __future__ import annotations

from pathlib import Path

from appliance.store.group_ledger import LEDGER_FILE, GroupLedger, GroupState


def reopen(directory: Path) -> GroupLedger:
    return GroupLedger(str(directory))


def test_held_recovering_recovered_and_forgot_survive_a_restart(tmp_path: Path) -> None:
    ledger = reopen(tmp_path)
    ledger.held("S-a", 7)
    ledger.held("S-b", 8)
    ledger.held("S-c", 9)
    ledger.recovering("S-b", 8)
    ledger.recovering("S-c", 9)
    ledger.recovered("S-c", 9)
    ledger.forgot("S-a", 7)
    ledger.close()
    again = reopen(tmp_path)
    assert again.state("S-a", 7) is GroupState.UNKNOWN
    assert again.state("S-b", 8) is GroupState.RECOVERING
    assert again.state("S-c", 9) is GroupState.HELD
    assert again.state("S-b", 99) is GroupState.UNKNOWN  # another incarnation of the name: new
    again.close()


def test_repeated_events_write_nothing_new(tmp_path: Path) -> None:
    ledger = reopen(tmp_path)
    ledger.held("S-a", 1)
    size = (tmp_path / LEDGER_FILE).stat().st_size
    ledger.held("S-a", 1)
    ledger.recovered("S-a", 1)  # not recovering: nothing to record
    ledger.forgot("S-x", 1)  # never held
    assert (tmp_path / LEDGER_FILE).stat().st_size == size
    ledger.close()


def test_a_torn_or_damaged_line_is_skipped(tmp_path: Path) -> None:
    ledger = reopen(tmp_path)
    ledger.held("S-a", 1)
    ledger.held("S-b", 2)
    ledger.close()
    path = tmp_path / LEDGER_FILE
    path.write_bytes(path.read_bytes().replace(b"held S-a 1", b"h\xffld S-a 1") + b"recovering S-b")
    again = reopen(tmp_path)
    assert again.state("S-a", 1) is GroupState.UNKNOWN  # damaged: as if never held (the old behaviour)
    assert again.state("S-b", 2) is GroupState.HELD  # the torn "recovering" never completed
    again.recovering("S-b", 2)  # written on a line of its own
    again.close()
    last = reopen(tmp_path)
    assert last.state("S-b", 2) is GroupState.RECOVERING
    last.close()


def test_the_store_is_named_once_and_the_stores_of_peers_are_remembered(tmp_path: Path) -> None:
    ledger = reopen(tmp_path)
    assert ledger.new and len(ledger.store_id) == 16
    assert ledger.saw_peer("n2", "aaaa") and not ledger.saw_peer("n2", "aaaa")
    for store in ("b", "c", "d", "e"):
        ledger.saw_peer("n2", store)
    assert not ledger.saw_peer("n3", "has space") and not ledger.saw_peer("", "x")
    ledger.close()
    again = reopen(tmp_path)
    assert not again.new and again.store_id == ledger.store_id
    assert again.peer_stores == {"n2": ["b", "c", "d", "e"]}  # the last four
    again.close()
