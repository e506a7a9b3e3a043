"""Pure-Python twin of native/bench/loadgen.c `scan`: same arguments, same result tuple.

scan(buf, start, end, flags, out) walks whole MSG/HMSG frames in buf[start:end], counting them and
their bytes (headers + payload), and appends a reply per message with a reply subject to `out`
when FLAG_OUT_ACK (empty PUB) or FLAG_OUT_ECHO (PUB echoing the payload) is set. It stops without
consuming at the first frame it does not handle: any other operation or malformed line
(STOP_OTHER), a status message when FLAG_STOP_STATUS (STOP_STATUS), a payload containing
`"error"` when FLAG_STOP_ERROR (STOP_ERROR), or an incomplete frame (STOP_NEED_MORE).
"""

from __future__ import annotations

STOP_NEED_MORE = 0
STOP_OTHER = 1
STOP_STATUS = 2
STOP_ERROR = 3
STOP_TIMEOUT = 4  # the C loops only: nothing arrived in time
STOP_CLOSED = 5  # the C loops only: the server closed the connection

FLAG_STOP_STATUS = 1
FLAG_STOP_ERROR = 2
FLAG_OUT_ACK = 4
FLAG_OUT_ECHO = 8

CONTROL_LINE_SCAN_BYTES_MAX = 4096  # the C twin's CONTROL_LINE_BYTES_MAX
SIZE_DIGITS_MAX = 10
ARGS_MAX = 6

ScanResult = tuple[int, int, int, int, int, int]


def split_args(line: bytes) -> list[bytes]:
    """Split a control line on runs of spaces and tabs (nothing else is a separator)."""
    return [token for token in line.replace(b"\t", b" ").split(b" ") if token]


def parse_size(token: bytes) -> int:
    """An unsigned decimal of at most SIZE_DIGITS_MAX ASCII digits, else -1."""
    if not token or len(token) > SIZE_DIGITS_MAX or not token.isdigit():
        return -1
    return int(token)


def is_status(body: bytes | bytearray | memoryview, header_bytes: int) -> bool:
    return header_bytes >= 10 and bytes(body[:9]) == b"NATS/1.0 " and 0x30 <= body[9] <= 0x39


def _control_line(buf: bytes | bytearray, pos: int, end: int) -> tuple[int, list[bytes], int]:
    """(-1, args, body_start) for a complete line, else (stop, [], 0)."""
    window_end = min(end, pos + CONTROL_LINE_SCAN_BYTES_MAX + 2)
    newline = buf.find(b"\n", pos, window_end)
    if newline < 0:
        too_long = end - pos > CONTROL_LINE_SCAN_BYTES_MAX + 1
        return (STOP_OTHER if too_long else STOP_NEED_MORE), [], 0
    line = bytes(buf[pos:newline])
    if line.endswith(b"\r"):
        line = line[:-1]
    return -1, split_args(line), newline + 1


def scan(buf: bytes | bytearray, start: int, end: int, flags: int, out: bytearray | None) -> ScanResult:
    if not 0 <= start <= end <= len(buf):
        raise ValueError("scan: need 0 <= start <= end <= len(buf)")
    if flags & (FLAG_OUT_ACK | FLAG_OUT_ECHO) and not isinstance(out, bytearray):
        raise TypeError("scan: out must be a bytearray when replies are requested")
    pos, msgs, payload_bytes, stop = start, 0, 0, STOP_NEED_MORE
    last_reply_start = last_reply_end = -1
    while True:
        if pos >= end:
            stop = STOP_NEED_MORE
            break
        line_stop, args, body_start = _control_line(buf, pos, end)
        if line_stop >= 0:
            stop = line_stop
            break
        if len(args) > ARGS_MAX or not args or args[0] not in (b"MSG", b"HMSG"):
            stop = STOP_OTHER
            break
        is_hmsg = args[0] == b"HMSG"
        with_reply = len(args) - 3 - (2 if is_hmsg else 1)
        if with_reply not in (0, 1):
            stop = STOP_OTHER
            break
        total = parse_size(args[-1])
        header_bytes = parse_size(args[-2]) if is_hmsg else 0
        if total < 0 or header_bytes < 0 or header_bytes > total:
            stop = STOP_OTHER
            break
        frame_end = body_start + total + 2
        if frame_end > end:
            stop = STOP_NEED_MORE
            break
        if buf[frame_end - 2 : frame_end] != b"\r\n":
            stop = STOP_OTHER
            break
        if flags & FLAG_STOP_STATUS and is_hmsg and is_status(buf[body_start : body_start + 10], header_bytes):
            stop = STOP_STATUS
            break
        payload = bytes(buf[body_start + header_bytes : body_start + total])
        if flags & FLAG_STOP_ERROR and b'"error"' in payload:
            stop = STOP_ERROR
            break
        if with_reply:
            reply = args[3]
            # the reply token's offset in buf: the line is ASCII-split, so find it after the sid
            last_reply_start = _token_offset(buf, pos, body_start, 3)
            last_reply_end = last_reply_start + len(reply)
            if flags & FLAG_OUT_ACK:
                assert out is not None
                out += b"PUB %s 0\r\n\r\n" % reply
            elif flags & FLAG_OUT_ECHO:
                assert out is not None
                out += b"PUB %s %d\r\n%s\r\n" % (reply, len(payload), payload)
        msgs += 1
        payload_bytes += total
        pos = frame_end
    return pos, msgs, payload_bytes, stop, last_reply_start, last_reply_end


def _token_offset(buf: bytes | bytearray, line_start: int, line_end: int, index: int) -> int:
    """Absolute offset of the index-th space/tab separated token of the line at line_start."""
    i, count = line_start, -1
    while i < line_end:
        while i < line_end and buf[i] in (0x20, 0x09):
            i += 1
        if i >= line_end:
            break
        count += 1
        if count == index:
            return i
        while i < line_end and buf[i] not in (0x20, 0x09):
            i += 1
    raise AssertionError("token index past the end of the line")
