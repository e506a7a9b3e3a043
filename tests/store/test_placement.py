"""A stream's directory follows its owning worker's NUMA node when the node has a configured store dir."""

from __future__ import annotations

import pytest

from appliance.store.placement import store_root, stream_dir


def test_a_worker_on_a_configured_node_uses_that_nodes_directory() -> None:
    dirs = {0: "/nvme0/js", 1: "/nvme1/js"}
    assert store_root(default_dir="/var/lib/appliance/jetstream", numa_store_dirs=dirs, node=1) == "/nvme1/js"
    assert store_root(default_dir="/var/lib/appliance/jetstream", numa_store_dirs=dirs, node=0) == "/nvme0/js"


def test_without_numa_configuration_or_node_the_store_dir_is_used() -> None:
    assert store_root(default_dir="/d", numa_store_dirs={}, node=0) == "/d"
    assert store_root(default_dir="/d", numa_store_dirs={0: "/n0"}, node=None) == "/d"
    assert store_root(default_dir="/d", numa_store_dirs={0: "/n0"}, node=3) == "/d"


def test_stream_directories_mirror_nats_server_and_cannot_escape_the_root() -> None:
    assert stream_dir("/r", account="$G", stream="ORDERS") == "/r/$G/streams/ORDERS"
    for bad in ("", "..", "a/b", "a.b", "x y", "a*", "a>"):
        with pytest.raises(ValueError):
            stream_dir("/r", account="$G", stream=bad)
    with pytest.raises(ValueError):
        stream_dir("/r", account="../etc", stream="S")
