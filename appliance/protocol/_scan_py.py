"""Pure-Python twin of the native PUB scanner (`appliance._native.scan_pubs`).

Contract (shared with native/scan.c): starting at `pos`, consume consecutive *complete,
well-formed* `PUB`/`HPUB` operations written in upper case with single spaces (what every client
library sends), appending their event tuples to `out`; stop at the first byte that starts anything
else — another op, a partial op, a malformed or oversized one — and return its offset. The
general parser then handles that one op, including every error case, so the scanner never decides
about errors and both twins are simple.
"""

from __future__ import annotations


def scan_pubs(buf: bytes, pos: int, max_line: int, max_payload: int, out: list) -> int:  # type: ignore[type-arg]
    n = len(buf)
    find = buf.find
    startswith = buf.startswith
    append = out.append
    while True:
        if startswith(b"PUB ", pos):
            hpub = False
            arg_start = pos + 4
        elif startswith(b"HPUB ", pos):
            hpub = True
            arg_start = pos + 5
        else:
            return pos
        eol = find(b"\n", pos, pos + max_line + 1)
        if eol < 0 or buf[eol - 1] != 13:
            return pos
        args = buf[arg_start : eol - 1].split(b" ")
        if hpub:
            if len(args) == 3:
                subject, reply, header_token, size_token = args[0], None, args[1], args[2]
            elif len(args) == 4:
                subject, reply, header_token, size_token = args
            else:
                return pos
            if not header_token.isdigit() or len(header_token) > 18:
                return pos
            header_size = int(header_token)
        else:
            if len(args) == 2:
                subject, reply, size_token = args[0], None, args[1]
            elif len(args) == 3:
                subject, reply, size_token = args
            else:
                return pos
            header_size = 0
        if not size_token.isdigit() or len(size_token) > 18 or not subject:
            return pos
        size = int(size_token)
        if size > max_payload or header_size > size or reply == b"":
            return pos
        start = eol + 1
        stop = start + size
        if stop + 2 > n or buf[stop] != 13 or buf[stop + 1] != 10:
            return pos
        if hpub:
            append((2, subject, reply, buf[start : start + header_size], buf[start:stop]))
        else:
            append((1, subject, reply, buf[start:stop]))
        pos = stop + 2
        if pos >= n:
            return pos


ROUTE_RUN = 10  # route_parser.R_RUN


def scan_rmsgs(buf: bytes, pos: int, max_line: int, max_payload: int, out: list) -> int:  # type: ignore[type-arg]
    """Twin of the native RMSG scanner (native/scan.c): consume consecutive complete plain
    `RMSG <account> <subject> [<reply>] <size>` operations (upper case, single spaces, no tab, a reply
    without '@' that is not `+`/`|`), each appended as (1, subject, reply | None, payload) to the run
    (ROUTE_RUN, account, [events]) at the end of `out` (a new run when the account changes); return
    the offset of the first byte that starts anything else."""
    n = len(buf)
    find = buf.find
    startswith = buf.startswith
    while pos < n and startswith(b"RMSG ", pos):
        eol = find(b"\n", pos, pos + max_line + 1)
        if eol < 0 or buf[eol - 1] != 13 or eol - 1 < pos + 5:
            return pos
        line = buf[pos + 5 : eol - 1]
        if b"\t" in line:
            return pos
        args = line.split(b" ")
        if not 3 <= len(args) <= 4 or not all(args):
            return pos
        size_token = args[-1]
        if not size_token.isdigit() or len(size_token) > 18:
            return pos
        size = int(size_token)
        reply = args[2] if len(args) == 4 else None
        if size > max_payload or (reply is not None and (reply in (b"+", b"|") or b"@" in reply)):
            return pos
        start = eol + 1
        stop = start + size
        if stop + 2 > n or buf[stop] != 13 or buf[stop + 1] != 10:
            return pos
        event = (1, args[1], reply, buf[start:stop])
        last = out[-1] if out else None
        if last is not None and last[0] == ROUTE_RUN and last[1] == args[0]:
            last[2].append(event)
        else:
            out.append((ROUTE_RUN, args[0], [event]))
        pos = stop + 2
    return pos
