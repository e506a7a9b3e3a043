"""Accounts: each one a separate subject space (its own sublist)."""

from __future__ import annotations

from appliance.config.options import ServerOptions
from appliance.server.sublist import Sublist

GLOBAL_ACCOUNT = "$G"


class Account:
    __slots__ = ("name", "sublist", "is_system", "jetstream", "clients")

    def __init__(self, name: str, *, is_system: bool = False, jetstream: bool = False) -> None:
        self.name = name
        self.sublist = Sublist()
        self.is_system = is_system
        self.jetstream = jetstream
        self.clients = 0


class AccountRegistry:
    def __init__(self, options: ServerOptions) -> None:
        self.system_name = "" if options.no_system_account else options.system_account or "$SYS"
        self._accounts: dict[str, Account] = {GLOBAL_ACCOUNT: Account(GLOBAL_ACCOUNT, jetstream=options.jetstream.enabled)}
        for name, account in options.accounts.items():
            self._accounts[name] = Account(name, jetstream=account.jetstream.enabled)
        if self.system_name and self.system_name not in self._accounts:
            self._accounts[self.system_name] = Account(self.system_name)
        if self.system_name:
            self._accounts[self.system_name].is_system = True

    def get(self, name: str) -> Account | None:
        return self._accounts.get(name)

    def __getitem__(self, name: str) -> Account:
        return self._accounts[name]

    def names(self) -> list[str]:
        return sorted(self._accounts)

    def all(self) -> list[Account]:
        return list(self._accounts.values())
