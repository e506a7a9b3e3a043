"""sd_notify by hand: READY=1, WATCHDOG=1, STOPPING=1, STATUS=... to $NOTIFY_SOCKET.

Without NOTIFY_SOCKET (not started by systemd with Type=notify) every call does nothing. An
address starting with "@" is in the abstract namespace. Sending never blocks and never raises:
systemd being gone must not take the server down.

The watchdog is fed only while every worker heartbeats (the supervisor decides); when it starves,
systemd (WatchdogSec=) restarts the service, which is what a wedged host needs.
"""

from __future__ import annotations

import logging
import os
import socket

logger = logging.getLogger(__name__)


class Notifier:
    def __init__(self, environ: dict[str, str] | None = None) -> None:
        env = dict(os.environ) if environ is None else environ
        self.address = env.get("NOTIFY_SOCKET", "")
        self.watchdog_interval_s = _watchdog_interval_s(env)
        self._socket: socket.socket | None = None
        if self.address:
            self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            self._socket.setblocking(False)

    @property
    def enabled(self) -> bool:
        return self._socket is not None

    def ready(self, status: str) -> None:
        self.send(f"READY=1\nSTATUS={status}")

    def watchdog(self) -> None:
        self.send("WATCHDOG=1")

    def stopping(self, status: str) -> None:
        self.send(f"STOPPING=1\nSTATUS={status}")

    def status(self, status: str) -> None:
        self.send(f"STATUS={status}")

    def extend_timeout(self, seconds: float, status: str) -> None:
        """Ask for `seconds` more before the start (or stop) times out; say why."""
        self.send(f"EXTEND_TIMEOUT_USEC={int(seconds * 1_000_000)}\nSTATUS={status}")

    def reloading(self, monotonic_usec: int) -> None:
        """The reload starts (systemd 253+ needs MONOTONIC_USEC=); READY=1 ends it."""
        self.send(f"RELOADING=1\nMONOTONIC_USEC={monotonic_usec}\nSTATUS=reloading configuration")

    def send(self, message: str) -> bool:
        if self._socket is None:
            return False
        address = "\0" + self.address[1:] if self.address.startswith("@") else self.address
        try:
            self._socket.sendto(message.encode(), address)
        except OSError as exc:
            logger.debug("sd_notify to %s failed: %s", self.address, exc)
            return False
        return True

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None


def _watchdog_interval_s(env: dict[str, str]) -> float | None:
    """Half of WATCHDOG_USEC (as sd_watchdog_enabled advises), if the watchdog is for our pid."""
    usec = env.get("WATCHDOG_USEC", "")
    pid = env.get("WATCHDOG_PID", "")
    if not usec.isdigit() or int(usec) == 0:
        return None
    if pid and pid.isdigit() and int(pid) != os.getpid():
        return None
    return int(usec) / 2_000_000
