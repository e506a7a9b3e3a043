"""Accounts: each one a separate subject space (its own sublist)."""

from __future__ import annotations

from collections.abc import Callable

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

        # operator mode with the FULL resolver: an account a sibling worker or a client names
        # before this worker saw its JWT is looked up there (server/jwt_accounts.py)
        self.fetch: Callable[[str], Account | None] | None = None

    def get(self, name: str) -> Account | None:
        account = self._accounts.get(name)
        if account is None and self.fetch is not None:
            account = self.fetch(name)
        return account

    def known(self, name: str) -> Account | None:
        """The account if this worker has it already (no fetch)."""
        return self._accounts.get(name)

    def add(self, name: str, *, jetstream: bool) -> Account:
        """A new account (an account JWT that arrived while running)."""
        account = self._accounts.get(name)
        if account is None:
            account = self._accounts[name] = Account(name, jetstream=jetstream)
        return account

    def __getitem__(self, name: str) -> Account:
        return self._accounts[name]

    def names(self) -> list[str]:
        return sorted(self._accounts)

    def all(self) -> list[Account]:
        return list(self._accounts.values())
