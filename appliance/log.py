"""Logging in nats-server's style: `[pid] 2026/11/22 01:30:00.123456 [INF] Server is ready`.

Scripts that start nats-server grep its stderr for lines such as
`Listening for client connections on HOST:PORT` and `Server is ready`; we print the same.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Mapping

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


LOG_FILE_MODE = 0o640
# nats-server's backup name: <file>.YYYY.MM.DD.hh.mm.ss.nnnnnnnnn
BACKUP_SUFFIX = re.compile(r"\.\d{4}\.\d{2}\.\d{2}\.\d{2}\.\d{2}\.\d{2}\.\d{9}$")


def stderr_is_journal(environ: Mapping[str, str] | None = None, *, fd: int = 2) -> bool:
    """Whether stderr is connected to journald (systemd sets JOURNAL_STREAM=<dev>:<inode> of it), which
    stamps every line itself: then nats-server's own timestamps are noise (logtime defaults to false)."""
    env = os.environ if environ is None else environ
    device, _, inode = env.get("JOURNAL_STREAM", "").partition(":")
    if not device.isdigit() or not inode.isdigit():
        return False
    try:
        info = os.fstat(fd)
    except OSError:
        return False
    return (info.st_dev, info.st_ino) == (int(device), int(inode))


class RotatingLogFile(logging.Handler):
    """log_file with nats-server's logfile_size_limit rotation, shared by the supervisor and its workers.

    Every process appends (O_APPEND: lines never interleave mid-line) to the same path. The write that
    takes the file past `size_limit` rotates it, as nats-server does: renamed to
    `<file>.YYYY.MM.DD.hh.mm.ss.nnnnnnnnn`, a fresh file started with `Rotated log, backup saved as
    "<backup>"`, and beyond `max_num` files (the live one counted) the oldest backups removed. An
    exclusive flock on the file makes one process rotate; the others notice the rename (the path no
    longer names their inode) and reopen before their next line.
    """

    def __init__(self, path: str, *, size_limit: int = 0, max_num: int = 0) -> None:
        super().__init__()
        self.path = path
        self.size_limit = size_limit
        self.max_num = max_num
        self._lock = threading.Lock()
        self._fd = self._open()

    def _open(self) -> int:
        return os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, LOG_FILE_MODE)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = (self.format(record) + "\n").encode(errors="replace")
            with self._lock:
                self._follow_rename()
                os.write(self._fd, line)
                if self.size_limit > 0 and os.fstat(self._fd).st_size > self.size_limit:
                    self._rotate()
        except Exception:  # logging must never take the server down
            self.handleError(record)

    def _follow_rename(self) -> None:
        try:
            current = os.stat(self.path)
        except FileNotFoundError:
            current = None
        mine = os.fstat(self._fd)
        if current is None or (current.st_dev, current.st_ino) != (mine.st_dev, mine.st_ino):
            os.close(self._fd)
            self._fd = self._open()

    def _rotate(self) -> None:
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            current = os.stat(self.path)
            mine = os.fstat(self._fd)
            if (current.st_dev, current.st_ino) != (mine.st_dev, mine.st_ino) or current.st_size <= self.size_limit:
                return  # another process rotated it meanwhile
            now = time.time_ns()
            stamp = time.strftime("%Y.%m.%d.%H.%M.%S", time.localtime(now // 1_000_000_000))
            backup = f"{self.path}.{stamp}.{now % 1_000_000_000:09d}"
            os.rename(self.path, backup)
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = self._open()
        os.write(self._fd, self._direct(f'Rotated log, backup saved as "{backup}"'))
        if self.max_num > 0:
            self._purge()

    def _direct(self, message: str) -> bytes:
        record = logging.LogRecord("appliance.log", logging.INFO, __file__, 0, message, None, None)
        return (self.format(record) + "\n").encode()

    def _purge(self) -> None:
        directory, base = os.path.split(os.path.abspath(self.path))
        backups = sorted(name for name in os.listdir(directory)
                         if name.startswith(base + ".") and BACKUP_SUFFIX.fullmatch(name[len(base):]))
        for name in backups[:max(0, len(backups) - (self.max_num - 1))]:
            try:
                os.remove(os.path.join(directory, name))
            except FileNotFoundError:
                continue  # another process purged it
            os.write(self._fd, self._direct(f'Purged log file "{os.path.join(directory, name)}"'))

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
        super().close()


def setup_logging(*, debug: bool = False, trace: bool = False, logtime: bool = True, log_file: str = "",
                  log_size_limit: int = 0, log_max_num: int = 0) -> None:
    """Configure the root logger once per process (supervisor and each worker)."""
    handler: logging.Handler
    if log_file:
        handler = RotatingLogFile(log_file, size_limit=log_size_limit, max_num=log_max_num)
    else:
        handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(NatsFormatter(logtime=logtime))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
        old.close()
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
