"""Operator mode with the FULL resolver, in every worker: the accounts whose JWTs are in the
resolver's directory, kept current.

An account JWT arrives over `$SYS.REQ.CLAIMS.UPDATE` (server/claims_service.py, on one worker),
which writes it to the directory and applies it there at once; every worker also watches the
directory (a stat of its files every `WATCH_INTERVAL_S`) and applies what changed, as nats-server's
DirJWTStore change callback does: the account's claims are replaced (limits, revocations,
JetStream limits), its connected clients are checked again (a revoked user gets 'User
Authentication Revoked'), and a JWT of an account not seen before makes a new account (JetStream
enabled for it on the worker that runs JetStream, through `server.account_listeners`). An account
named before this worker saw its JWT (a client of it, or a sibling worker's interest) is read
from the directory on the spot (`AccountRegistry.fetch`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from appliance.config.jwt_store import JWTDirectory
from appliance.config.operator import account_option
from appliance.server.accounts import Account

if TYPE_CHECKING:
    from appliance.server.server import Server

logger = logging.getLogger(__name__)

WATCH_INTERVAL_S = 0.5


class JWTAccounts:
    def __init__(self, server: Server) -> None:
        self.server = server
        self.directory = JWTDirectory(server.options.trust.resolver_dir)
        self._stamps = self.directory.stamps() or {}
        # accounts this worker serves from a JWT: one whose file is gone was deleted
        self._known = {name for name, account in server.options.accounts.items() if account.jwt}
        self._task: asyncio.Task[None] | None = None
        server.accounts.fetch = self.fetch

    def start(self) -> None:
        self._task = self.server.loop.create_task(self._watch())

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        self.server.accounts.fetch = None

    def fetch(self, name: str) -> Account | None:
        token = self.directory.load(name)
        return self.apply(name, token) if token else None

    def apply(self, key: str, token: str) -> Account | None:
        """Take `token` as the JWT of account `key`; None when no trusted key signed it."""
        server = self.server
        option = account_option(key, token, server.options.trust.trusted_keys)
        if option is None:
            logger.error("DirResolver - Update for account %q resulted in error account validation failed", key)
            return None
        jwt = server.auth.jwt
        if jwt is not None:
            jwt.set_account(key, token)
        self._known.add(key)
        previous = server.options.accounts.get(key)
        server.options.accounts[key] = option  # JetStream reads an account's limits from these options
        account = server.accounts.known(key)
        if account is None:
            account = server.accounts.add(key, jetstream=option.jetstream.enabled)
            logger.debug("Account [%s] added from the resolver directory", key)
            for listener in server.account_listeners:
                listener([account], [])
            server.imports.configure_from_options(server.options)  # its exports and imports, and theirs to it
            return account
        if previous is not None and previous.jwt == token:
            return account
        if previous is None or (previous.exports, previous.imports) != (option.exports, option.imports):
            server.imports.configure_from_options(server.options)
        if option.jetstream.enabled and not account.jetstream:
            account.jetstream = True
            for listener in server.account_listeners:
                listener([account], [])
        for conn in [c for c in server.clients.values() if c.account is account]:
            conn.recheck_authorization()
        server.flush_dirty()
        return account

    def remove(self, key: str) -> None:
        """A deleted account JWT (nats-server's removeCb): the account's clients are expired."""
        self._known.discard(key)
        self._stamps.pop(key, None)
        jwt = self.server.auth.jwt
        if jwt is not None:
            jwt.accounts.pop(key, None)
        account = self.server.accounts.known(key)
        if account is None:
            return
        for conn in [c for c in self.server.clients.values() if c.account is account]:
            conn.account_expired()
        self.server.flush_dirty()

    def _changed(self) -> tuple[list[str], list[str]]:
        stamps = self.directory.stamps()
        if stamps is None:  # unreadable for now: no conclusion (a deleted account stays until it reads)
            logger.warning("account resolver directory %s cannot be read", self.directory.directory)
            return [], []
        changed = [key for key, stamp in stamps.items() if self._stamps.get(key) != stamp]
        removed = [key for key in self._known if key not in stamps]
        self._stamps = stamps
        return changed, removed

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(WATCH_INTERVAL_S)
            try:
                changed, removed = self._changed()
                for key in changed:
                    token = self.directory.load(key)
                    if token:
                        self.apply(key, token)
                for key in removed:
                    self.remove(key)
            except Exception:  # one bad file must not stop the watch
                logger.exception("account resolver directory watch failed")
