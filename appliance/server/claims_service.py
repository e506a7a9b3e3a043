"""The FULL account resolver's requests in the system account, answered as nats-server's
DirAccResolver answers them (accounts.go): `$SYS.REQ.CLAIMS.UPDATE` and
`$SYS.REQ.ACCOUNT.<key>.CLAIMS.UPDATE` (also the old `$SYS.ACCOUNT.<key>.CLAIMS.UPDATE`) store an
account JWT, `$SYS.REQ.ACCOUNT.<key>.CLAIMS.LOOKUP` answers with the stored JWT (an empty message
when there is none), `$SYS.REQ.CLAIMS.LIST` with the stored account keys, and
`$SYS.REQ.CLAIMS.DELETE` (with `allow_delete`) deletes the accounts an operator-signed request names.

One worker answers (the one with the system responder); it writes the directory and applies the
JWT at once; the other workers see the file change (server/jwt_accounts.py). Over routes an update
reaches every server of the cluster, each storing it. Not built: a server that was down catching up
(`$SYS.REQ.CLAIMS.PACK`) and servers asking each other for an account they lack.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

from appliance.config.jwt import JWTError, account_claims, decode, operator_claims
from appliance.config.nkey import decode_public_key
from appliance.server.internal import InternalClient
from appliance.server.jwt_accounts import JWTAccounts

import nkeys

logger = logging.getLogger(__name__)

UPDATE = b"$SYS.REQ.CLAIMS.UPDATE"
UPDATE_ACCOUNT = b"$SYS.REQ.ACCOUNT.*.CLAIMS.UPDATE"
UPDATE_ACCOUNT_OLD = b"$SYS.ACCOUNT.*.CLAIMS.UPDATE"
LOOKUP = b"$SYS.REQ.ACCOUNT.*.CLAIMS.LOOKUP"
LIST = b"$SYS.REQ.CLAIMS.LIST"
DELETE = b"$SYS.REQ.CLAIMS.DELETE"


class ClaimsService:
    def __init__(self, accounts: JWTAccounts, server_block: Callable[[], dict[str, object]]) -> None:
        self.accounts = accounts
        self.server = accounts.server
        self.server_block = server_block
        self.client: InternalClient | None = None

    def start(self) -> bool:
        system = self.server.accounts.get(self.server.accounts.system_name)
        if system is None:
            return False
        self.client = client = InternalClient(self.server, system, "account resolver")
        client.subscribe(UPDATE, self._on_update)
        client.subscribe(UPDATE_ACCOUNT, self._on_update)
        client.subscribe(UPDATE_ACCOUNT_OLD, self._on_update)
        client.subscribe(LOOKUP, self._on_lookup)
        client.subscribe(LIST, self._on_list)
        client.subscribe(DELETE, self._on_delete)
        for key, token in self.server.options.trust.preload.items():  # nats-server stores its preloads
            try:
                self.accounts.directory.save_if_newer(key, token)
            except (OSError, ValueError) as error:
                logger.error("DirResolver - could not store the preloaded account %s: %s", key, error)
        return True

    def close(self) -> None:
        if self.client is not None:
            self.client.close()

    def _strict_operators(self) -> set[str]:
        """Operators with strict_signing_key_usage: account JWTs must come from their signing keys."""
        strict = set()
        for token in self.server.options.trust.operator_jwts:
            claims = operator_claims(token)
            if claims.strict_signing_key_usage:
                strict.add(claims.subject)
        return strict

    def _respond(self, reply: bytes | None, account: str, message: str, error: str = "") -> None:
        if error:
            logger.error("%s - %s", f"{message} - {account}" if account else message, error)
        else:
            logger.debug("%s", f"{message} - {account}" if account else message)
        if not reply or self.client is None:
            return
        body: dict[str, object] = {"server": self.server_block()}
        named = {"account": account} if account else {}  # omitempty, as nats-server's structs
        if error:
            body["error"] = {**named, "code": 500, "description": f"{message} - {error}"}
        else:
            body["data"] = {**named, "code": 200, "message": message}
        self.client.publish(reply, json.dumps(body, separators=(",", ":")).encode())

    def _on_update(self, subject: bytes, reply: bytes | None, header: bytes | None, data: bytes) -> None:
        token = (data[len(header):] if header is not None else data).decode(errors="replace").strip()
        parts = subject.decode(errors="replace").split(".")
        named = parts[3] if subject.startswith(b"$SYS.REQ.ACCOUNT.") else parts[2] if subject != UPDATE else ""
        try:
            claims = account_claims(token)
        except JWTError as error:
            self._respond(reply, "n/a", "jwt update resulted in error", str(error))
            return
        key = named or claims.subject
        if named and claims.subject != named:
            self._respond(reply, named, "jwt update resulted in error", "subject does not match jwt content")
            return
        if claims.issuer in self._strict_operators():
            self._respond(reply, key, "jwt update resulted in error", "operator requires issuer to be a signing key")
            return
        try:
            self.accounts.directory.save(key, token)
        except (OSError, ValueError) as error:
            self._respond(reply, key, "jwt update resulted in error", str(error))
            return
        self.accounts.apply(key, token)
        self._respond(reply, key, "jwt updated")

    def _on_lookup(self, subject: bytes, reply: bytes | None, header: bytes | None, data: bytes) -> None:
        if not reply or self.client is None:
            return
        key = subject.split(b".")[3].decode()
        token = self.accounts.directory.load(key)
        if token is None:
            logger.debug('DirResolver - Could not find account "%s"', key)
        self.client.publish(reply, (token or "").encode())

    def _on_list(self, subject: bytes, reply: bytes | None, header: bytes | None, data: bytes) -> None:
        if not reply or self.client is None:
            return
        body = {"server": self.server_block(), "data": self.accounts.directory.keys()}
        self.client.publish(reply, json.dumps(body, separators=(",", ":")).encode())

    def _on_delete(self, subject: bytes, reply: bytes | None, header: bytes | None, data: bytes) -> None:
        """handleDeleteRequest: a generic JWT the operator signed itself, `nats.accounts` to delete."""
        text = (data[len(header):] if header is not None else data).decode(errors="replace").strip()
        trust = self.server.options.trust
        try:
            _, claims = decode(text)
        except JWTError as error:
            self._respond(reply, "", "delete accounts request by  failed", str(error))
            return
        issuer, by = str(claims.get("iss", "")), str(claims.get("sub", ""))
        nats = claims.get("nats")  # a generic claim's data (jwt.GenericClaims.Data)
        listed = nats.get("accounts") if isinstance(nats, dict) else None
        problem = ""
        if not trust.allow_delete:
            problem = "delete must be enabled in server config"
        elif by != issuer:
            problem = "not self signed"
        elif issuer not in trust.trusted_keys:
            problem = "not trusted"
        elif not isinstance(listed, list) or not all(
                isinstance(k, str) and decode_public_key(k, nkeys.PREFIX_BYTE_ACCOUNT) for k in listed):
            problem = "malformed request"
        elif self.server.accounts.system_name in listed:
            problem = "not allowed to delete system account"
        if problem:
            self._respond(reply, "", f"delete accounts request by {by} failed", problem)
            return
        assert isinstance(listed, list)
        failed = []
        for key in listed:
            try:
                self.accounts.directory.delete(key, hard=trust.hard_delete)
            except OSError as error:
                failed.append(str(error))
                continue
            self.accounts.remove(key)
        if failed:
            self._respond(reply, "", f"deleted {len(listed) - len(failed)} accounts, failed for {len(failed)}",
                          "\n".join(failed))
        else:
            self._respond(reply, "", f"deleted {len(listed)} accounts")
