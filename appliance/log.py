"""Logging in nats-server's style: `[pid] 2026/11/22 01:30:00.123456 [INF] Server is ready`.

Scripts that start nats-server grep its stderr for lines such as
`Listening for client connections on HOST:PORT` and `Server is ready`; we print the same.
"""

from __future__ import annotations

import logging
import os
import sys
import time

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
