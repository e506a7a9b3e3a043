"""Where a stream's directory lives: per NUMA node when configured, else under store_dir.

The supervisor knows each worker's NUMA node (appliance { numa_store_dirs { 0: /nvme0, ... } }).
A stream is stored under the root of the node of the worker that owns its RAFT group, so its
file I/O and page cache stay on that node's memory and disks. Layout under a root mirrors
nats-server's: `<root>/<account>/streams/<stream>`.
"""

from __future__ import annotations

import os

_FORBIDDEN = frozenset(" \t\r\n./\\*>\x00")


def store_root(*, default_dir: str, numa_store_dirs: dict[int, str], node: int | None) -> str:
    """The store root for a worker on `node` (None: unknown or no NUMA)."""
    if node is not None and node in numa_store_dirs:
        return numa_store_dirs[node]
    return default_dir


def stream_dir(root: str, *, account: str, stream: str) -> str:
    """The directory of one stream; names that could escape the root are refused."""
    for label, name in (("account", account), ("stream", stream)):
        if not name or any(c in _FORBIDDEN for c in name.replace("$", "")):
            raise ValueError(f"invalid {label} name for a store directory: {name!r}")
    return os.path.join(root, account, "streams", stream)
