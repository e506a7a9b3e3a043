"""Logging in nats-server's style: `[pid] 2026/11/22 01:30:00.123456 [INF] Server is ready`.

Scripts that start nats-server grep its stderr for lines such as
`Listening for client connections on HOST:PORT` and `Server is ready`; we print the same.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable

TRACE = 5  # below DEBUG: protocol traces (-V)
logging.addLevelName(TRACE, "TRACE")

_LEVEL_TAGS = {TRACE: "TRC", logging.DEBUG: "DBG", logging.INFO: "INF", logging.WARNING: "WRN",
               logging.ERROR: "ERR", logging.CRITICAL: "FTL"}


class NatsFormatter(logging.Formatter):
    def __init__(self, *, logtime: bool) -> None:
        super().__init__()
        self.logtime = logtime

    def format(self, record: logging.LogRecord) -> str:
        tag = _LEVEL_TAGS.get(record.levelno, "INF")
        message = record.getMessage()
        if record.exc_info:
            message = f"{message}\n{self.formatException(record.exc_info)}"
        if not self.logtime:
            return f"[{os.getpid()}] [{tag}] {message}"
        seconds = int(record.created)
        stamp = time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(seconds))
        micros = int((record.created - seconds) * 1_000_000)
        return f"[{os.getpid()}] {stamp}.{micros:06d} [{tag}] {message}"


def setup_logging(*, debug: bool = False, trace: bool = False, logtime: bool = True, log_file: str = "") -> None:
    """Configure the root logger once per process (supervisor and each worker)."""
    handler: logging.Handler
    if log_file:
        handler = logging.FileHandler(log_file)
    else:
        handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(NatsFormatter(logtime=logtime))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(TRACE if trace else logging.DEBUG if debug else logging.INFO)


class ContainedErrors:
    """Exceptions that a caller contained so that shared machinery goes on (a link keeps draining, a
    loop keeps serving): one failing request or frame is dropped, not the worker. The first exception
    of each (place, type) is logged with its traceback; later ones of the same kind are counted and
    logged as one line at most every `quiet_s`, so a flood of hostile requests cannot flood the log.
    Kinds are bounded (`kinds_max`); beyond them, failures are counted under one shared kind."""

    def __init__(self, logger: logging.Logger, *, quiet_s: float = 60.0, kinds_max: int = 256,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._logger = logger
        self._quiet_s = quiet_s
        self._kinds_max = kinds_max
        self._monotonic = monotonic
        self._kinds: dict[tuple[str, str], list[float]] = {}  # kind -> [unlogged count, last log time]
        self.total = 0

    def contain(self, where: str, error: BaseException) -> None:
        self.total += 1
        kind = (where, type(error).__name__)
        if kind not in self._kinds and len(self._kinds) >= self._kinds_max:
            kind = ("(other places)", "Exception")
        now = self._monotonic()
        seen = self._kinds.get(kind)
        if seen is None:
            self._kinds[kind] = [0, now]
            self._logger.error("%s failed (contained; later failures of this kind are counted): %s: %s",
                               kind[0], type(error).__name__, error, exc_info=error)
            return
        seen[0] += 1
        if now - seen[1] >= self._quiet_s:
            self._logger.error("%s failed %d more time(s) (%s) since the last report; last: %s",
                               kind[0], int(seen[0]), kind[1], error)
            seen[0] = 0
            seen[1] = now
