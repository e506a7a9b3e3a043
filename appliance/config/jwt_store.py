"""The FULL account resolver's directory: one `<account public key>.jwt` file per account, as
nats-server's DirJWTStore (not sharded) keeps them, so either server can use the other's directory.

Writes are durable: a new JWT goes to a temporary file that is fsynced and renamed over the old
one, then the directory is fsynced. A deleted JWT is renamed `<key>.jwt.deleted` unless deletes
are hard (nats-server's RenameDeleted / HardDelete).
"""

from __future__ import annotations

import json
import base64
import os

import nkeys

from appliance.config.nkey import decode_public_key

EXTENSION = ".jwt"
DELETED = ".deleted"
JWT_BYTES_MAX = 1024 * 1024


def _issued_at(token: str) -> tuple[int, str]:
    """(iat, jti) of a token without verifying it (jwt.DecodeGeneric's view for ordering)."""
    try:
        part = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))
        return int(claims.get("iat", 0)), str(claims.get("jti", ""))
    except (IndexError, ValueError, TypeError, AttributeError):
        return -1, ""


def newer(existing: str | None, candidate: str) -> str:
    """saveIfNewer's rule: the candidate unless the existing one was issued later."""
    if existing is None:
        return candidate
    return existing if _issued_at(existing)[0] > _issued_at(candidate)[0] else candidate


class JWTDirectory:
    def __init__(self, directory: str) -> None:
        self.directory = directory

    def path(self, key: str) -> str | None:
        if decode_public_key(key, nkeys.PREFIX_BYTE_ACCOUNT) is None:
            return None
        return os.path.join(self.directory, key + EXTENSION)

    def load(self, key: str) -> str | None:
        path = self.path(key)
        if path is None:
            return None
        try:
            with open(path, encoding="ascii", errors="replace") as handle:
                return handle.read(JWT_BYTES_MAX).strip()
        except OSError:
            return None

    def all(self) -> dict[str, str]:
        found: dict[str, str] = {}
        for key in self.keys():
            token = self.load(key)
            if token:
                found[key] = token
        return found

    def keys(self) -> list[str]:
        try:
            names = os.listdir(self.directory)
        except OSError:
            return []
        return sorted(name[:-len(EXTENSION)] for name in names
                      if name.endswith(EXTENSION) and self.path(name[:-len(EXTENSION)]) is not None)

    def stamps(self) -> dict[str, tuple[int, int]] | None:
        """key -> (mtime ns, size) of every JWT file: what a watcher compares to see changes; None
        when the directory cannot be read now (nothing is concluded from that)."""
        stamps: dict[str, tuple[int, int]] = {}
        try:
            entries = list(os.scandir(self.directory))
        except OSError:
            return None
        for entry in entries:
            if entry.name.endswith(EXTENSION):
                try:
                    info = entry.stat()
                except OSError:
                    continue
                stamps[entry.name[:-len(EXTENSION)]] = (info.st_mtime_ns, info.st_size)
        return stamps

    def save(self, key: str, token: str) -> bool:
        """Write the JWT of `key` durably; False when it is the same as the stored one."""
        path = self.path(key)
        if path is None:
            raise ValueError("invalid public key")
        if self.load(key) == token:
            return False
        temporary = f"{path}.{os.getpid()}.tmp"
        with open(temporary, "w", encoding="ascii") as handle:
            handle.write(token)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
        self._sync_directory()
        return True

    def save_if_newer(self, key: str, token: str) -> bool:
        existing = self.load(key)
        if existing is not None and (_issued_at(existing)[1] == _issued_at(token)[1]
                                     or newer(existing, token) is existing):
            return False
        return self.save(key, token)

    def delete(self, key: str, *, hard: bool) -> None:
        path = self.path(key)
        if path is None or not os.path.exists(path):
            raise FileNotFoundError(f"open {path or key}: no such file or directory")
        if hard:
            os.remove(path)
        else:
            os.replace(path, path + DELETED)
        self._sync_directory()

    def _sync_directory(self) -> None:
        fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
