"""ProposalForwarder: a follower's proposal, committed by its group's leader on another host.

Only a leader may propose. A request handled by a follower (a stream leader that is not the meta
leader, creating a consumer) hands its proposal to the leader over the routes, as nats-server's
followers do on `$NRG.P.<group>`:

    follower: forward(group, data, on_done)
        -> $APROP.<leader>.<group>.<follower>   (reply $APROP.<follower>._R_.<rid>)
    leader:   group.propose(data) ... applied -> reply {"ok":true,"index":N} | {"ok":false,"err":...}
    follower: on_done(True, N) once it has applied N itself (the change is visible here too)

A leader that cannot take the proposal (it lost leadership, its queue is full) answers ok false
with the reason; a reply that never comes (the leader died, the route is down) fails the proposal
after `timeout_s`. Either way on_done(False, 0) runs exactly once, so no request hangs. The
proposal may still have been committed (nats-server has the same window: a timed-out create can
show up afterwards). Messages travel as ordinary system-account messages (like route_transport.py);
everything is bounded: proposals in flight per forwarder, and the size of one proposal.
"""

from __future__ import annotations

import itertools
import json
import logging
from appliance import limits
from appliance.cluster.group import OnDone, RaftGroup, Scheduler, Timer
from appliance.cluster.registry import GroupRegistry
from appliance.cluster.route_transport import is_subject_token, system_account
from appliance.errors import LimitExceeded, NotLeader, ProposalDropped
from appliance.server.internal import InternalClient
from appliance.server.server import Server

logger = logging.getLogger(__name__)

PREFIX = b"$APROP."
REPLY_TOKEN = b"_R_"


class ProposalForwarder:
    def __init__(self, server: Server, own_peer: str, registry: GroupRegistry, scheduler: Scheduler, *,
                 timeout_s: float = limits.RAFT_FORWARD_TIMEOUT_S,
                 in_flight_max: int = limits.RAFT_FORWARD_IN_FLIGHT_MAX) -> None:
        self.own_peer = own_peer
        self.registry = registry
        self.scheduler = scheduler
        self.timeout_s = timeout_s
        self.in_flight_max = in_flight_max
        self.client = InternalClient(server, system_account(server), "RAFT proposal forwarding")
        self._rids = itertools.count(1)
        self._waiting: dict[int, tuple[RaftGroup, OnDone, Timer]] = {}
        self.forwarded = 0
        self.served = 0
        self.dropped_malformed = 0
        own = own_peer.encode()
        self.client.subscribe(PREFIX + own + b".*.*", self._on_proposal)
        self.client.subscribe(PREFIX + own + b"." + REPLY_TOKEN + b".*", self._on_reply)

    def close(self) -> None:
        waiting, self._waiting = self._waiting, {}
        for _, on_done, timer in waiting.values():
            timer.cancel()
            on_done(False, 0)
        self.client.close()

    # --- the follower's side -------------------------------------------------------------------------
    def propose(self, group: RaftGroup, data: bytes, on_done: OnDone) -> None:
        """Propose `data` to `group`: here if this replica leads, else through its leader.

        Raises NotLeader when no leader is known, LimitExceeded when too many are in flight."""
        if group.is_leader():
            group.propose(data, on_done)
            return
        leader = group.leader()
        if not leader or not is_subject_token(leader):
            raise NotLeader(f"{group.group_id} has no leader", leader_hint=None)
        if len(self._waiting) >= self.in_flight_max:
            raise LimitExceeded(f"{len(self._waiting)} forwarded proposals in flight")
        if len(data) > limits.PAYLOAD_BYTES_MAX:
            raise LimitExceeded(f"a proposal of {len(data)} bytes is too large to forward")
        rid = next(self._rids)
        timer = self.scheduler.call_later(self.timeout_s, lambda: self._fail(rid, "no answer from the leader"))
        self._waiting[rid] = (group, on_done, timer)
        subject = b"%s%s.%s.%s" % (PREFIX, leader.encode(), group.group_id.encode(), self.own_peer.encode())
        reply = b"%s%s.%s.%d" % (PREFIX, self.own_peer.encode(), REPLY_TOKEN, rid)
        self.client.publish(subject, data, reply=reply)
        self.forwarded += 1

    def _fail(self, rid: int, why: str) -> None:
        entry = self._waiting.pop(rid, None)
        if entry is None:
            return
        group, on_done, timer = entry
        timer.cancel()
        logger.debug("forwarded proposal to %s failed: %s", group.group_id, why)
        on_done(False, 0)

    def _on_reply(self, subject: bytes, reply: bytes | None, header: bytes | None, data: bytes) -> None:
        payload = data[len(header):] if header is not None else data
        try:
            rid = int(subject.rsplit(b".", 1)[1])
            answer = json.loads(payload)
            ok, index = bool(answer["ok"]), int(answer.get("index", 0))
        except (ValueError, KeyError, TypeError, IndexError):
            self.dropped_malformed += 1
            return
        entry = self._waiting.get(rid)
        if entry is None:
            return
        if not ok or index <= 0:
            self._fail(rid, str(answer.get("err", "refused")))
            return
        group, on_done, timer = entry

        def visible() -> None:
            if self._waiting.pop(rid, None) is not None:
                timer.cancel()
                on_done(True, index)

        try:
            group.when_applied(index, visible)
        except LimitExceeded as exc:
            self._fail(rid, str(exc))

    # --- the leader's side ---------------------------------------------------------------------------
    def _on_proposal(self, subject: bytes, reply: bytes | None, header: bytes | None, data: bytes) -> None:
        tokens = subject.split(b".")
        if len(tokens) != 4 or not reply:
            self.dropped_malformed += 1
            return
        payload = data[len(header):] if header is not None else data
        group = self.registry.get(tokens[2].decode(errors="replace"))

        def answer(ok: bool, index: int, err: str = "") -> None:
            body: dict[str, object] = {"ok": ok, "index": index}
            if err:
                body["err"] = err
            self.client.publish(reply, json.dumps(body, separators=(",", ":")).encode())

        if group is None:
            answer(False, 0, "group not held here")
            return
        try:
            group.propose(payload, lambda ok, index: answer(ok, index, "" if ok else "not committed"))
        except (NotLeader, LimitExceeded, ProposalDropped) as exc:
            answer(False, 0, str(exc))
            return
        self.served += 1

