"""`ports_file_dir` as nats-server: `<dir>/<executable>_<pid>.ports` holding where the server listens,

    {"nats":["nats://10.0.0.5:4222"],"monitoring":["http://10.0.0.5:8222"]}

written once the listeners are bound (so `-p -1` tells its real port), removed at shutdown, moved by
a reload that changes the directory. A listener on the any-address lists every non-loopback address
of the host (nats-server's getNonLocalIPsIfHostIsIPAny), IPv6 in brackets.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import socket
import sys
from pathlib import Path

import psutil  # type: ignore[import-untyped]

logger = logging.getLogger(__name__)

ANY_HOSTS = ("", "0.0.0.0", "::", "[::]")


def executable_name(argv0: str | None = None) -> str:
    """nats-server's filepath.Base(os.Args[0]); `python -m appliance` counts as `appliance`."""
    name = Path(argv0 if argv0 is not None else sys.argv[0]).name
    return "appliance" if not name or name.endswith(".py") else name


def ports_file_path(directory: str, pid: int | None = None, argv0: str | None = None) -> Path:
    return Path(directory) / f"{executable_name(argv0)}_{os.getpid() if pid is None else pid}.ports"


def host_addresses() -> list[str]:
    """Non-loopback addresses of the host; none when they cannot be listed (getifaddrs needs AF_NETLINK,
    which the unit's RestrictAddressFamilies= does not allow: the any-address is then written as is)."""
    found: list[str] = []
    try:
        interfaces = psutil.net_if_addrs()
    except OSError as exc:
        logger.debug("cannot list the host's addresses: %s", exc)
        return found
    for addresses in interfaces.values():
        for address in addresses:
            if address.family not in (socket.AF_INET, socket.AF_INET6):
                continue
            text = address.address.split("%")[0]
            try:
                ip = ipaddress.ip_address(text)
            except ValueError:
                continue
            if not ip.is_loopback and not ip.is_link_local:
                found.append(text)
    return found


def _urls(scheme: str, host: str, port: int, addresses: list[str]) -> list[str]:
    hosts = addresses if host in ANY_HOSTS and addresses else [host or "0.0.0.0"]
    return [f"{scheme}://{f'[{h}]' if ':' in h else h}:{port}" for h in hosts]


def ports_json(*, client_host: str, client_port: int, http_host: str, http_port: int | None,
               addresses: list[str]) -> bytes:
    info: dict[str, list[str]] = {"nats": _urls("nats", client_host, client_port, addresses)}
    if http_port:
        info["monitoring"] = _urls("http", http_host, http_port, addresses)
    return json.dumps(info, separators=(",", ":")).encode()


def write_ports_file(directory: str, data: bytes) -> Path | None:
    path = ports_file_path(directory)
    try:
        path.write_bytes(data)
    except OSError as exc:
        logger.error("Error writing ports file (%s): %s", path, exc)
        return None
    return path


def remove_ports_file(path: Path) -> None:
    try:
        path.unlink()
    except OSError as exc:
        logger.error("Error cleaning up ports file %s: %s", path, exc)
