"""Wire and disk enums are append-only: this golden table may only grow."""

from appliance.raft.types import BUG_NAMES, Bugs, ConfState, EntryType, MessageType, RaftConfig


def test_message_type_values_never_change() -> None:
    assert {t.name: t.value for t in MessageType} == {
        "VOTE": 1, "VOTE_RESP": 2, "PRE_VOTE": 3, "PRE_VOTE_RESP": 4, "APPEND": 5, "APPEND_RESP": 6,
        "HEARTBEAT": 7, "HEARTBEAT_RESP": 8, "SNAPSHOT": 9, "TIMEOUT_NOW": 10,
    }


def test_entry_type_values_never_change() -> None:
    assert {t.name: t.value for t in EntryType} == {"NORMAL": 1, "CONF_CHANGE": 2}


def test_planted_bugs_are_all_off_by_default() -> None:
    assert Bugs().names_on() == []
    assert RaftConfig(id="a").bugs == Bugs()
    assert set(BUG_NAMES) == set(Bugs.__dataclass_fields__)


def test_conf_state_is_sorted_and_unique() -> None:
    assert ConfState(("a", "b")).voters == ("a", "b")
    try:
        ConfState(("b", "a"))
    except AssertionError:
        return
    raise AssertionError("unsorted voters must be refused")
