"""Types of the C extension built from native/bench/loadgen.c (twin: appliance/bench/_scan_py.py)."""

from typing import Any

def scan(
    buf: bytes | bytearray, start: int, end: int, flags: int, out: bytearray | None, /
) -> tuple[int, int, int, int, int, int]: ...
def sync_requests(
    fd: int,
    frame: bytes,
    count: int,
    rx: bytearray,
    start: int,
    end: int,
    latencies: Any,
    awaiting: int,
    sent_ns: int,
    timeout_ms: int,
    /,
) -> tuple[int, int, int, int, int, int]: ...
def serve_replies(
    fd: int, rx: bytearray, start: int, end: int, out: bytearray, flags: int, max_msgs: int, timeout_ms: int, /
) -> tuple[int, int, int, int]: ...
def receive_msgs(
    fd: int, rx: bytearray, start: int, end: int, max_msgs: int, timeout_ms: int, budget_ms: int, /
) -> tuple[int, int, int, int, int, int, int]: ...
def publish(
    fd: int, batch: bytes, frame_bytes: int, count: int, timeout_ms: int, budget_ms: int, /
) -> tuple[int, int]: ...
