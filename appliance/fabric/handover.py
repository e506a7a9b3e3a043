"""The rejoin channel: how the supervisor hands a worker its end of a fresh socketpair.

Only the socketpair fallback needs it (rings survive a worker's death; see socketpair.py for why a
socket cannot). Each worker incarnation gets its own channel, an AF_UNIX SOCK_SEQPACKET
socketpair: the supervisor keeps one end, the worker inherits the other. One message is one
packet: the peer index (u32, little-endian) with exactly one fd attached (SCM_RIGHTS), the
worker's end of a new socketpair to that (restarted) peer. SEQPACKET keeps the packet and its fd
together; a channel whose worker died is simply dropped with it, so no handover is ever meant for
an earlier incarnation.
"""

from __future__ import annotations

import enum
import os
import socket
import struct

from appliance.errors import CorruptData

MESSAGE = struct.Struct("<I")  # the peer the attached socket leads to


class Delivery(enum.Enum):
    SENT = "sent"
    GONE = "gone"  # the worker at the other end has exited: its successor gets fresh links anyway
    REFUSED = "refused"  # the worker is alive but its channel is full: it has stopped reading


def channel_pair() -> tuple[socket.socket, socket.socket]:
    """(supervisor end, worker end); both close-on-exec: the worker end is passed explicitly."""
    supervisor_end, worker_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    supervisor_end.setblocking(False)
    return supervisor_end, worker_end


def send_handover(channel: socket.socket, peer: int, sock: socket.socket) -> Delivery:
    """Supervisor: give the worker behind `channel` its end `sock` of a fresh link to `peer`. Never
    blocks. The caller still owns (and closes) its copy of `sock`."""
    try:
        socket.send_fds(channel, [MESSAGE.pack(peer)], [sock.fileno()])
    except (BrokenPipeError, ConnectionResetError, ConnectionRefusedError):  # the worker has exited
        return Delivery.GONE
    except OSError:  # EAGAIN (full), ETOOMANYREFS (too many fds in flight): the worker is not reading
        return Delivery.REFUSED
    return Delivery.SENT


def receive_handovers(channel: socket.socket, messages_max: int) -> tuple[list[tuple[int, socket.socket]], bool]:
    """Worker: the handovers waiting on `channel` (at most `messages_max`) and whether the
    supervisor's end is closed. The sockets returned are the caller's to close."""
    received: list[tuple[int, socket.socket]] = []
    while len(received) < messages_max:
        try:
            data, fds, flags, _ = socket.recv_fds(channel, MESSAGE.size, 1)
        except (BlockingIOError, InterruptedError):
            return received, False
        if not data and not fds:
            return received, True
        if len(data) != MESSAGE.size or len(fds) != 1 or flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
            for fd in fds:
                os.close(fd)
            raise CorruptData("malformed handover on the rejoin channel", path=f"fd:{channel.fileno()}", offset=0)
        (peer,) = MESSAGE.unpack(data)
        received.append((peer, socket.socket(fileno=fds[0])))
    return received, False
