"""Is a JetStream store directory usable? The supervisor asks before any worker starts, so an
unusable directory is one clear error and a non-zero exit, as with nats-server (which fails with
"Can't start JetStream: <why>"), not a worker that crash-loops while clients wait for "ready".

The rule is nats-server's (server/jetstream.go, enableJetStream): a missing directory is created
(mode 0750); an existing path must be a directory in which a file can be created. We also write
and fsync one page into that file, so a full disk is found at start, not at the first publish.
The reasons keep nats-server's words.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from collections.abc import Callable

DIR_MODE = 0o750  # nats-server's defaultDirPerms
PROBE_BYTES = 4096
PROBE_PREFIX = "_test_"

Write = Callable[[int, bytes], int]


def store_root_of(store_dir: str) -> str:
    """Where JetStream keeps its data for a configured store dir ("": a temp dir), as nats-server."""
    base = store_dir or os.path.join(tempfile.gettempdir(), "appliance")
    return os.path.join(base, "jetstream")


def store_dir_problem(path: str, *, write: Write = os.write) -> str | None:
    """None when `path` is a usable store directory (created if missing), else why not."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        try:
            os.makedirs(path, DIR_MODE, exist_ok=True)
        except OSError as exc:
            return f"could not create storage directory - {_reason(exc)}"
    except NotADirectoryError:
        return "storage directory is not a directory"  # a parent is a file
    except OSError as exc:
        return f"could not access storage directory - {_reason(exc)}"
    else:
        if not stat.S_ISDIR(info.st_mode):
            return "storage directory is not a directory"
    return _probe(path, write)


def _probe(path: str, write: Write) -> str | None:
    try:
        fd, name = tempfile.mkstemp(prefix=PROBE_PREFIX, dir=path)
    except OSError as exc:
        return f"storage directory is not writable - {_reason(exc)}"
    try:
        page = b"\0" * PROBE_BYTES
        written = 0
        while written < len(page):
            written += write(fd, page[written:])
        os.fsync(fd)
    except OSError as exc:
        return f"storage directory is not writable - {_reason(exc)}"
    finally:
        os.close(fd)
        os.unlink(name)
    return None


def _reason(exc: OSError) -> str:
    if exc.errno is None:
        return str(exc)
    return f"{os.strerror(exc.errno)} ({errno.errorcode.get(exc.errno, exc.errno)})"
