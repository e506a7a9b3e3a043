"""What the Spark connector's client proves and how it secures its connection: user/password,
token, an NKey seed (signs the server's nonce), a user JWT with its seed (a .creds file, as nsc
writes it), and TLS (a CA file, a client certificate and key, tls:// URLs, handshake first).

Spark options (case-insensitive, the same for read, streaming read and write):
    user, password | token | nkeySeed or nkeySeedFile | credsFile | jwt with nkeySeed
    tls=true (or a tls:// url), tlsCaFile, tlsCertFile, tlsKeyFile, tlsHandshakeFirst=true
Seed and creds files are read where the query is planned (the driver): the tasks get their text,
so executors need not have the file. TLS files are read by each task's connection, so their paths
must be readable where the tasks run (as for nats.go's RootCAs / ClientCert options).
"""

from __future__ import annotations

import base64
import os
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass

import nkeys



def _creds_part(what: str) -> re.Pattern[str]:
    return re.compile(rf"-{{3,}}BEGIN {what}-{{3,}}\s*(\S+?)\s*-{{3,}}END {what}-{{3,}}")


_JWT = _creds_part("NATS USER JWT")
_SEED = _creds_part("USER NKEY SEED")


@dataclass(frozen=True, slots=True)
class Auth:
    user: str = ""
    password: str = ""
    token: str = ""
    nkey_seed: str = ""  # a user NKey seed ("SU..."): signs the server's nonce
    jwt: str = ""  # a user JWT, presented with a signature by nkey_seed

    def __repr__(self) -> str:  # never print secrets into logs or plans
        given = [name for name in ("user", "password", "token", "nkey_seed", "jwt") if getattr(self, name)]
        return f"Auth({', '.join(given) or 'none'})"

    @property
    def anonymous(self) -> bool:
        return not (self.user or self.token or self.nkey_seed)

    def connect_fields(self, nonce: str) -> dict[str, str]:
        """The CONNECT fields proving this identity to a server that sent `nonce` in its INFO."""
        fields: dict[str, str] = {}
        if self.user:
            fields["user"], fields["pass"] = self.user, self.password
        if self.token:
            fields["auth_token"] = self.token
        if self.nkey_seed:
            pair = nkeys.from_seed(bytearray(self.nkey_seed.encode()))
            signature = bytes(pair.sign(nonce.encode()))
            fields["sig"] = base64.urlsafe_b64encode(signature).rstrip(b"=").decode()
            if self.jwt:
                fields["jwt"] = self.jwt
            else:
                fields["nkey"] = pair.public_key.decode()
        return fields


@dataclass(frozen=True, slots=True)
class TlsFiles:
    enabled: bool = False  # asked for by option or tls:// (a server that requires TLS gets it anyway)
    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""
    handshake_first: bool = False  # the server's `handshake_first`: TLS before the INFO

    def context(self) -> ssl.SSLContext:
        """Verifies the server against ca_file (the system's CAs without it); presents the client
        certificate when given."""
        context = ssl.create_default_context(cafile=self.ca_file or None)
        if self.cert_file:
            context.load_cert_chain(self.cert_file, self.key_file or None)
        return context


def read_creds(text: str) -> tuple[str, str]:
    """(user JWT, seed) of a .creds file's text; ValueError if either part is missing."""
    jwt, seed = _JWT.search(text), _SEED.search(text)
    if jwt is None or seed is None:
        raise ValueError("not a NATS credentials file (it needs a USER JWT and a USER NKEY SEED part)")
    return jwt.group(1), seed.group(1)


def _read_text(option: str, path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as exc:
        raise ValueError(f"jetstream: option {option}: cannot read {path!r}: {exc.strerror}") from None


def _check_seed(option: str, seed: str) -> str:
    seed = seed.strip()
    try:
        nkeys.from_seed(bytearray(seed.encode()))
    except Exception:  # noqa: BLE001 - nkeys raises its own error classes for every kind of bad seed
        raise ValueError(f"jetstream: option {option}: not an NKey seed") from None
    if not seed.startswith("SU"):
        raise ValueError(f"jetstream: option {option}: not a user NKey seed (it starts with {seed[:2]!r}, not 'SU')")
    return seed


def auth_from_options(options: Mapping[str, str]) -> Auth:
    """Auth from lower-cased Spark options; files are read here (the driver)."""
    seed = options.get("nkeyseed", "")
    seed_file = options.get("nkeyseedfile", "")
    creds_file = options.get("credsfile", "")
    jwt = options.get("jwt", "")
    if sum(bool(x) for x in (seed, seed_file, creds_file)) > 1:
        raise ValueError("jetstream: give one of the options nkeySeed, nkeySeedFile and credsFile")
    if seed_file:
        seed = _check_seed("nkeySeedFile", _read_text("nkeySeedFile", seed_file))
    elif seed:
        seed = _check_seed("nkeySeed", seed)
    if creds_file:
        if jwt:
            raise ValueError("jetstream: give either credsFile or jwt (with nkeySeed), not both")
        try:
            jwt, creds_seed = read_creds(_read_text("credsFile", creds_file))
        except ValueError as exc:
            raise ValueError(f"jetstream: option credsFile {creds_file!r}: {exc}") from None
        seed = _check_seed("credsFile", creds_seed)
    if jwt and not seed:
        raise ValueError("jetstream: option jwt needs nkeySeed (or nkeySeedFile) to sign the server's nonce")
    return Auth(options.get("user", ""), options.get("password", ""), options.get("token", ""), seed, jwt.strip())


def _flag(options: Mapping[str, str], name: str) -> bool:
    value = options.get(name, "false").strip().lower()
    if value not in ("true", "false"):
        raise ValueError(f"jetstream: option {name} is true or false, not {value!r}")
    return value == "true"


def tls_from_options(options: Mapping[str, str]) -> TlsFiles:
    """TlsFiles from lower-cased Spark options; the files are checked here (the driver) so a wrong
    path fails the query's planning, not its tasks."""
    files = {name: options.get(name, "") for name in ("tlscafile", "tlscertfile", "tlskeyfile")}
    for name, path in files.items():
        if path and not os.path.isfile(path):
            raise ValueError(f"jetstream: option {name}: no such file {path!r}")
    if bool(files["tlscertfile"]) != bool(files["tlskeyfile"]):
        raise ValueError("jetstream: options tlsCertFile and tlsKeyFile go together")
    handshake_first = _flag(options, "tlshandshakefirst")
    return TlsFiles(
        enabled=_flag(options, "tls") or handshake_first or any(files.values()),
        ca_file=files["tlscafile"], cert_file=files["tlscertfile"], key_file=files["tlskeyfile"],
        handshake_first=handshake_first,
    )
