"""Issue operator, account and user JWTs the way nats-io/jwt v2 encodes them (for tests).

`Key.new("O")` makes a fresh operator key pair (also "A" account, "U" user); `operator_jwt`,
`account_jwt` and `user_jwt` sign claims with an issuer's key: header `{"typ":"JWT",
"alg":"ed25519-nkey"}`, claims with `jti` = base32 of SHA-512/256 over the claims data without
`jti`, `iat` now, `nats.type` and `nats.version: 2`, signature over `header.claims`, every part
base64 URL-safe without padding. Defaults are those of jwt's New*Claims (limits -1, JetStream off).
`creds` writes what nsc writes into a .creds file.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
from dataclasses import dataclass
from typing import Any

import nkeys

_PREFIX = {"O": nkeys.PREFIX_BYTE_OPERATOR, "A": nkeys.PREFIX_BYTE_ACCOUNT, "U": nkeys.PREFIX_BYTE_USER}
HEADER = {"typ": "JWT", "alg": "ed25519-nkey"}


@dataclass(frozen=True)
class Key:
    seed: str
    public: str

    @classmethod
    def new(cls, kind: str) -> Key:
        seed = nkeys.encode_seed(os.urandom(32), _PREFIX[kind])
        return cls(seed.decode(), nkeys.from_seed(bytearray(seed)).public_key.decode())

    def sign(self, data: bytes) -> bytes:
        return bytes(nkeys.from_seed(bytearray(self.seed.encode())).sign(data))


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _json(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def encode(claims: dict[str, Any], issuer: Key, *, kind: str, now_s: float | None = None) -> str:
    """Sign `claims` (sub, optional exp/nbf/name, and `nats`) as `issuer`."""
    body = dict(claims)
    body["iss"] = issuer.public
    body["iat"] = int(time.time() if now_s is None else now_s)
    body.pop("jti", None)
    core = {k: body[k] for k in ("aud", "exp", "iat", "iss", "name", "nbf", "sub") if body.get(k)}
    body["jti"] = base64.b32encode(hashlib.new("sha512_256", _json(core)).digest()).rstrip(b"=").decode()
    nats = dict(body.get("nats") or {})
    nats["type"] = kind
    nats["version"] = 2
    body["nats"] = nats
    head = f"{_b64(_json(HEADER))}.{_b64(_json(body))}"
    return f"{head}.{_b64(issuer.sign(head.encode()))}"


def operator_jwt(operator: Key, *, signing_keys: list[str] | None = None, system_account: str = "",
                 signer: Key | None = None, **nats: Any) -> str:
    section: dict[str, Any] = dict(nats)
    if signing_keys:
        section["signing_keys"] = signing_keys
    if system_account:
        section["system_account"] = system_account
    return encode({"sub": operator.public, "name": "OP", "nats": section}, signer or operator, kind="operator")


def account_limits(**overrides: Any) -> dict[str, Any]:
    """jwt.NewAccountClaims' limits: unlimited nats limits, JetStream disabled (zeros omitted)."""
    limits: dict[str, Any] = {"subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1,
                              "wildcards": True, "conn": -1, "leaf": -1}
    limits.update(overrides)
    return limits


def account_jwt(account: Key, signer: Key, *, name: str = "A", limits: dict[str, Any] | None = None,
                signing_keys: list[Any] | None = None, revocations: dict[str, int] | None = None,
                default_permissions: dict[str, Any] | None = None, expires: int = 0,
                tags: list[str] | None = None, exports: list[dict[str, Any]] | None = None,
                imports: list[dict[str, Any]] | None = None) -> str:
    """`exports`/`imports`: jwt.Export / jwt.Import objects as JSON ({"subject", "type", ...})."""
    nats: dict[str, Any] = {"limits": limits if limits is not None else account_limits()}
    if exports:
        nats["exports"] = exports
    if imports:
        nats["imports"] = imports
    if signing_keys:
        nats["signing_keys"] = signing_keys
    if revocations:
        nats["revocations"] = revocations
    if default_permissions:
        nats["default_permissions"] = default_permissions
    if tags:
        nats["tags"] = tags
    claims: dict[str, Any] = {"sub": account.public, "name": name, "nats": nats}
    if expires:
        claims["exp"] = expires
    return encode(claims, signer, kind="account")


def activation_jwt(grantee: Key, exporter: Key, subject: str, *, kind: str = "stream", signer: Key | None = None,
                   expires: int = 0) -> str:
    """An activation token (jwt.ActivationClaims): `exporter` lets `grantee` import `subject`."""
    nats: dict[str, Any] = {"subject": subject, "kind": kind}
    if signer is not None:
        nats["issuer_account"] = exporter.public
    claims: dict[str, Any] = {"sub": grantee.public, "name": subject, "nats": nats}
    if expires:
        claims["exp"] = expires
    return encode(claims, signer or exporter, kind="activation")


def user_jwt(user: Key, signer: Key, *, issuer_account: str = "", name: str = "U", pub: dict[str, Any] | None = None,
             sub: dict[str, Any] | None = None, resp: dict[str, Any] | None = None, bearer: bool = False,
             limits: dict[str, Any] | None = None, expires: int = 0, now_s: float | None = None,
             scoped: bool = False, tags: list[str] | None = None) -> str:
    """A user JWT; `scoped`: no permissions and no limits at all (a scoped signing key's user)."""
    nats: dict[str, Any] = {} if scoped else {"pub": pub or {}, "sub": sub or {},
                                             **(limits if limits is not None else {"subs": -1, "data": -1, "payload": -1})}
    if resp is not None:
        nats["resp"] = resp
    if bearer:
        nats["bearer_token"] = True
    if issuer_account:
        nats["issuer_account"] = issuer_account
    if tags:
        nats["tags"] = tags
    claims: dict[str, Any] = {"sub": user.public, "name": name, "nats": nats}
    if expires:
        claims["exp"] = expires
    return encode(claims, signer, kind="user", now_s=now_s)


def creds(user_token: str, user: Key) -> str:
    """A .creds file's text, as nsc writes it."""
    return (f"-----BEGIN NATS USER JWT-----\n{user_token}\n------END NATS USER JWT------\n\n"
            "************************* IMPORTANT *************************\n"
            "NKEY Seed printed below can be used to sign and prove identity.\n"
            "NKEYs are sensitive and should be treated as secrets.\n\n"
            f"-----BEGIN USER NKEY SEED-----\n{user.seed}\n------END USER NKEY SEED------\n\n"
            "*************************************************************\n")
