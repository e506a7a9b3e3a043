"""Interest probe for runs whose senders and receivers are on different nodes of a cluster.

A subscription made on node 2 reaches node 1 over the route some time after the subscriber's own
PONG; a publisher that starts before that publishes to nobody. So, in their set-up: a receiver
subscribes its subject, then the probe subject, and answers the first probe it gets; a sender
requests on the probe subject from its own connection (so through its own node and, on
appliance, its own worker) until every receiver has answered. Interest travels in order along
one path, so the probe's arrival proves the subject's. The sender then says `done` on the probe
subject; a receiver answers every probe (an answer may be lost while the sender's own inbox
interest is still on its way) until each sender said done. Both sides then unsubscribe and
drop any probe traffic still on the way before they say ready.
"""

from __future__ import annotations

import time

from appliance.bench import wire
from appliance.bench.conn import Connection
from appliance.bench.spec import ClientSpec

RETRY_S = 0.02  # between two probes that found no responder yet


DONE = b"done"


def answer_probe(conn: Connection, spec: ClientSpec) -> None:
    """A receiver, after subscribing its subject: answer probes until spec.probe_answers senders
    said done (TimeoutError after spec.timeout_s)."""
    probe = spec.probe.encode()
    sid = conn.subscribe(probe)
    conn.flush()
    done: set[bytes] = set()
    deadline = time.monotonic() + spec.timeout_s
    while len(done) < spec.probe_answers:
        msg = conn.next_msg(max(0.001, deadline - time.monotonic()))
        if msg.subject != probe:
            continue
        if msg.reply:
            conn.send(wire.pub(msg.reply, b"%d" % spec.index))
        elif msg.payload.startswith(DONE):
            done.add(msg.payload)
    _unsubscribe(conn, sid, probe)


def await_probe_answers(conn: Connection, spec: ClientSpec) -> None:
    """A sender: probe until each of spec.probe_answers receivers answered (TimeoutError if not)."""
    inbox = conn.inbox_prefix + b"probe"  # not under `<inbox_prefix>.*`, the request loops' inbox
    sid = conn.subscribe(inbox)
    answered: set[bytes] = set()
    deadline = time.monotonic() + spec.timeout_s
    while len(answered) < spec.probe_answers:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(answered)} of {spec.probe_answers} receivers answered the interest probe")
        conn.send(wire.pub(spec.probe.encode(), b"", inbox))
        conn.flush()
        wait_until = min(deadline, time.monotonic() + RETRY_S)
        while True:
            try:
                msg = conn.next_msg(max(0.001, wait_until - time.monotonic()))
            except TimeoutError:
                break
            if msg.subject != inbox:
                continue
            if msg.status is None:
                answered.add(msg.payload)
            elif msg.status == 503:  # no responders: the interest has not arrived yet
                time.sleep(RETRY_S)
                break
    conn.send(wire.pub(spec.probe.encode(), b"%s %d" % (DONE, spec.index)))
    _unsubscribe(conn, sid, inbox)


def _unsubscribe(conn: Connection, sid: int, subject: bytes) -> None:
    """UNSUB, then wait for the PONG: whatever was delivered on it before arrives before the PONG."""
    conn.send(wire.unsub(sid))
    conn.flush()
    conn.specials[:] = [m for m in conn.specials if m.subject != subject]
