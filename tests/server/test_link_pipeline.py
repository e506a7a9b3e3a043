"""Messages delivered one by one to a sibling leave in pieces, not all at the end of the loop turn.

A JetStream pull batch relayed to a client on another worker is hundreds of single deliveries in
one call; the sibling should start on the first of them while this worker produces the rest.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

from appliance import limits
from appliance.fabric.frames import Frame, FrameKind
from appliance.server.links import LinkPeer, LocalFabric, decode_records
from appliance.server.sublist import Subscription


class RecordingLink:
    """A link that takes every frame and counts the flushes asked of it."""

    def __init__(self, frame_bytes_max: int = 1 << 20) -> None:
        self.peer = 1
        self.frame_bytes_max = frame_bytes_max
        self.sent: list[Frame] = []
        self.flushes = 0

    def try_send(self, kind: int, payload: bytes | bytearray) -> bool:
        self.sent.append((kind, bytes(payload)))
        return True

    def flush(self) -> bool:
        self.flushes += 1
        return True


def a_peer(link: RecordingLink) -> tuple[LinkPeer, SimpleNamespace]:
    server = SimpleNamespace(dirty=[], producer=None)
    fabric = cast(LocalFabric, SimpleNamespace(server=server))
    return LinkPeer(fabric, cast(Any, link)), server


def test_single_deliveries_leave_in_pipeline_sized_frames_before_the_turn_ends() -> None:
    link = RecordingLink()
    peer, server = a_peer(link)
    sub = Subscription(peer, b"$JSD.inbox", None, b"L1", "$G")
    payload = b"x" * 200
    count = 3 * limits.LINK_RECORDS_PIPELINE_BYTES // len(payload)
    for n in range(count):
        peer.deliver(sub, b"$JSD.inbox", b"$JS.ACK.s.c.1.%d@orders" % n, None, payload)
    assert len(link.sent) >= 2, "frames left while the deliveries were still being made"
    assert all(len(frame) <= limits.LINK_RECORDS_PIPELINE_BYTES + 300 for _, frame in link.sent)
    assert link.flushes == len(link.sent), "each frame is pushed toward the sibling at once"
    assert peer in server.dirty, "the server flushes it at the end of the turn"
    peer.flush()  # the end of the turn: the rest leaves
    records = [record for kind, frame in link.sent if kind == FrameKind.MESSAGE for record in decode_records(frame)]
    assert [record[2] for record in records] == [b"$JS.ACK.s.c.1.%d@orders" % n for n in range(count)]
    assert peer.msgs_out == count


def test_a_burst_below_the_pipeline_size_leaves_as_one_frame_at_the_flush() -> None:
    link = RecordingLink()
    peer, _ = a_peer(link)
    sub = Subscription(peer, b"reply.inbox", None, b"L1", "$G")
    peer.deliver(sub, b"reply.inbox", None, None, b"ok")
    peer.deliver(sub, b"reply.inbox", None, None, b"ok again")
    assert link.sent == []
    peer.flush()
    assert [kind for kind, _ in link.sent] == [FrameKind.MESSAGE]
    assert [record[5] for record in decode_records(link.sent[0][1])] == [b"ok", b"ok again"]
    assert link.flushes == 1


def test_a_message_plain_and_queue_records_never_split_across_frames() -> None:
    """The route holder merges a message's plain and queue records into one RMSG (server/routes.py); a
    frame boundary between them made two RMSGs, which a peer delivers to its plain subscribers twice
    (seen as a rare duplicate in the mixed-cluster tests)."""
    for size in range(100, 400, 7):  # record sizes that put a frame boundary after either record
        link = RecordingLink()
        peer, _ = a_peer(link)
        plain = Subscription(peer, b"jobs.*", None, b"L1", "$G")
        queue = Subscription(peer, b"jobs.>", b"q", b"L2", "$G")
        payload = b"x" * size
        for n in range(3 * limits.LINK_RECORDS_PIPELINE_BYTES // len(payload)):
            peer.deliver(plain, b"jobs.run", None, None, payload + b"%d" % n)
            peer.deliver(queue, b"jobs.run", None, None, payload + b"%d" % n)
        peer.flush()
        assert len(link.sent) >= 3
        for _, frame in link.sent:
            records = decode_records(frame)
            assert records[0][3] is None and records[-1][3] == b"q", size  # each frame holds whole messages
