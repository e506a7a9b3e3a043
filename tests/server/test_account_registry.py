"""AccountRegistry.update: the accounts of a reload (pure: no sockets, no loop)."""

from __future__ import annotations

from appliance.config import options_from_text
from appliance.config.options import ServerOptions
from appliance.server.accounts import AccountRegistry


def opts(text: str) -> ServerOptions:
    return options_from_text(text, filename="server.conf")


def test_update_adds_removes_and_sets_jetstream_keeping_global_and_system_accounts() -> None:
    registry = AccountRegistry(opts("jetstream: enabled\naccounts { A: { jetstream: enabled }, B: {} }\n"))
    global_before, a_before, b_before = registry["$G"], registry["A"], registry["B"]
    added, removed = registry.update(opts("jetstream: enabled\naccounts { B: { jetstream: enabled }, C: {} }\n"))
    assert [account.name for account in added] == ["C"] and removed == [a_before]
    assert registry.names() == ["$G", "$SYS", "B", "C"]
    assert registry["B"] is b_before and registry["B"].jetstream  # the same object, JetStream now on
    assert registry["$G"] is global_before and registry["$G"].jetstream == global_before.jetstream
    assert registry["$SYS"].is_system and not registry["C"].jetstream
    again, _ = registry.update(opts("accounts { A: {} }\n"))
    assert registry["A"] is not a_before and again == [registry["A"]]  # a new account, never the old object


def test_an_update_without_changes_adds_and_removes_nothing() -> None:
    text = "accounts { A: { users: [ {user: a, password: pa} ] } }\n"
    registry = AccountRegistry(opts(text))
    assert registry.update(opts(text)) == ([], [])
