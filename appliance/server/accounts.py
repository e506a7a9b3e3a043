"""Accounts: each one a separate subject space (its own sublist).

A config reload (server/reload.py) adds and removes accounts as nats-server's reloadAuthorization:
`AccountRegistry.update` drops the accounts no longer configured (the global and system accounts
always stay), makes the new ones and sets each configured account's JetStream flag. A removed
account's object is never reused: whoever kept it (a closing client, an internal client) sees that
`registry.get(name) is not account` and lets it go; an account added again later is a new one."""

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
        self._from_jwts: set[str] = set()  # accounts made by account JWTs: a config reload keeps them

    def update(self, options: ServerOptions) -> tuple[list[Account], list[Account]]:
        """The configured accounts of a reload: returns (added, removed). The global account keeps its
        JetStream as it is (nats-server keeps $G's on a reload that adds the first accounts)."""
        kept = {GLOBAL_ACCOUNT, self.system_name, *self._from_jwts}
        removed = [account for name, account in self._accounts.items()
                   if name not in kept and name not in options.accounts]
        for account in removed:
            del self._accounts[account.name]
        added = []
        for name, configured in options.accounts.items():
            account = self._accounts.get(name)
            if account is None:
                account = self._accounts[name] = Account(name, jetstream=configured.jetstream.enabled)
                added.append(account)
            elif name != GLOBAL_ACCOUNT and not account.is_system:
                account.jetstream = configured.jetstream.enabled
        return added, removed

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
            self._from_jwts.add(name)
        return account

    def __getitem__(self, name: str) -> Account:
        return self._accounts[name]

    def names(self) -> list[str]:
        return sorted(self._accounts)

    def all(self) -> list[Account]:
        return list(self._accounts.values())
