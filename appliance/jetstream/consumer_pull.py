"""Pull requests of a consumer (ADR-13): the waiting queue, expiry, heartbeats, max_bytes, and the
4xx status messages nats-server sends to a request's reply subject."""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from appliance import limits
from appliance.jetstream.config import ConsumerConfig
from appliance.jetstream.consumer_state import ConsumerState
from appliance.jetstream.host import Host
from appliance.jetstream.pull import BadPull, PullRequest, parse_pull
from appliance.jetstream.request import needs_newer_api
from appliance.jetstream.wire import status_headers
from appliance.store.api import StoredMsg

if TYPE_CHECKING:
    from appliance.jetstream.stream import Stream

NS = 1_000_000_000


class PullRequests:
    """Mixin of Consumer: everything about waiting pull requests."""

    if TYPE_CHECKING:
        config: ConsumerConfig
        host: Host
        state: ConsumerState
        stream: Stream
        name: str
        deleted: bool
        waiting: deque[PullRequest]
        _interest_seen: PullRequest | None
        _last_activity_ns: int
        _fc_reply: str
        next_sseq: int
        next_cseq: int

        def _kick(self) -> None: ...

        def num_pending(self) -> int: ...

    def on_pull(self, reply: str, body: bytes, header: bytes = b"") -> None:
        if not reply:
            return
        if self.config.is_push:
            self._status(reply, 409, "Consumer is push based")
            return
        if header and needs_newer_api(header):
            self._status(reply, 412, "Required Api Level")
            return
        now = self.host.now_ns()
        try:
            request = parse_pull(body, reply, self.config, now)
        except BadPull as exc:
            self._status(reply, exc.code, exc.description)
            return
        self._last_activity_ns = now
        if len(self.waiting) >= self.config.max_waiting:
            self.prune_waiting(now)
        if len(self.waiting) >= self.config.max_waiting:
            self._status(reply, 409, "Exceeded MaxWaiting")
            return
        self.waiting.append(request)
        if request.expires_at_ns:
            request.timer = self.host.call_later(
                (request.expires_at_ns - now) / NS, lambda: self._expire_request(request)
            )
        if request.heartbeat_ns:
            self._arm_pull_heartbeat(request)
        self._kick()

    def _first_live_request(self, now: int) -> PullRequest | None:
        """The request the next message goes to: the oldest live one, except that with the
        overflow policy a request with min_pending / min_ack_pending waits until the consumer's
        num_pending or num_ack_pending reaches either, and with the prioritized policy the
        lowest priority number goes first (oldest first within one). Expired requests end (408)."""
        policy = self.config.priority_policy
        if not policy:  # the hot path: the head of the queue, once the expired ahead of it end
            while self.waiting:
                request = self.waiting[0]
                if request.expires_at_ns and request.expires_at_ns <= now:
                    self._end_request(request, 408, "Request Timeout")
                    continue
                if request is not self._interest_seen and not self._has_reply_interest(request, now):
                    self._drop_request(request)
                    continue
                return request
            return None
        self.prune_waiting(now)
        if not self.waiting:
            return None
        if policy == "prioritized":
            return min(self.waiting, key=lambda r: r.priority)  # min() keeps the first of equals
        pending: int | None = None
        for request in self.waiting:
            if not (request.min_pending or request.min_ack_pending):
                return request
            if request.min_ack_pending and request.min_ack_pending <= len(self.state.pending):
                return request
            if request.min_pending:
                pending = self.num_pending() if pending is None else pending
                if request.min_pending <= pending:
                    return request
        return None

    def _has_reply_interest(self, request: PullRequest, now: int) -> bool:
        """Does anyone still listen on the request's reply? A client that gave up on a fetch
        (timed out, unsubscribed its inbox) must not have later messages sent into the void:
        nats-server drops such a request silently. A young request is kept (module limits:
        interest from a sibling worker arrives a moment late). Checked once per request per turn."""
        young = now - request.received_ns < limits.JS_PULL_INTEREST_GRACE_NS
        if young or self.host.has_interest(request.reply):
            self._interest_seen = request
            return True
        return False

    def _drop_request(self, request: PullRequest) -> None:
        request.cancel_timers()
        if request in self.waiting:
            self.waiting.remove(request)

    def prune_waiting(self, now: int) -> None:
        """End the expired requests (408) and drop those nobody listens to any more (nats-server
        processWaiting: before num_waiting is reported and when the queue is full)."""
        for request in list(self.waiting):
            if request.expires_at_ns and request.expires_at_ns <= now:
                self._end_request(request, 408, "Request Timeout")
            elif not self._has_reply_interest(request, now):
                self._drop_request(request)

    def leadership_lost(self) -> None:
        """Another server leads the consumer now: the pull requests waiting here end with `409
        Leadership Change` (the status line alone, as nats-server's new leader tells the requests
        its followers recorded), so their clients ask the new leader at once instead of waiting
        out their expiry for an answer that would never come."""
        for request in list(self.waiting):
            self._end_request(request, 409, "Leadership Change", pending_headers=False)

    def _finish_no_wait(self) -> None:
        """A no_wait request that could not be filled ends with 404 (even after some messages)."""
        for request in [r for r in self.waiting if r.no_wait]:
            self._end_request(request, 404, "No Messages", pending_headers=False)

    def _expire_request(self, request: PullRequest) -> None:
        request.timer = None
        if request in self.waiting:
            self._end_request(request, 408, "Request Timeout")

    def _end_request(
        self, request: PullRequest, code: int, text: str, *, pending_headers: bool = True
    ) -> None:
        request.cancel_timers()
        if request in self.waiting:
            self.waiting.remove(request)
        pairs = (
            [
                ("Nats-Pending-Messages", str(request.remaining)),
                ("Nats-Pending-Bytes", str(request.bytes_left)),
            ]
            if pending_headers
            else []
        )
        self.host.send(request.reply, b"", header=status_headers(code, text, pairs))

    def _arm_pull_heartbeat(self, request: PullRequest) -> None:
        def beat() -> None:
            request.heartbeat_timer = None
            if request in self.waiting and not self.deleted:
                self.host.send(request.reply, b"", header=self._heartbeat_headers())
                self._arm_pull_heartbeat(request)

        request.heartbeat_timer = self.host.call_later(request.heartbeat_ns / NS, beat)

    def _heartbeat_headers(self) -> bytes:
        pairs = [
            # the leader's positions, as nats-server's o.dseq-1 / o.sseq-1 (past skipped messages)
            ("Nats-Last-Consumer", str(self.next_cseq - 1)),
            ("Nats-Last-Stream", str(self.next_sseq - 1)),
        ]
        if self._fc_reply:
            pairs.append(("Nats-Consumer-Stalled", self._fc_reply))
        return status_headers(100, "Idle Heartbeat", pairs)

    def _status(self, reply: str, code: int, text: str) -> None:
        self.host.send(reply, b"", header=status_headers(code, text))

    def _fits(self, request: PullRequest, msg: StoredMsg, ack: bytes) -> bool:
        if not request.max_bytes or wire_size(msg, ack) <= request.bytes_left:
            return True
        self._end_request(request, 409, "Message Size Exceeds MaxBytes")
        return False


def wire_size(msg: StoredMsg, ack: bytes) -> int:
    """What a delivery counts against a pull request's max_bytes (nats-server: subject + reply +
    headers + payload)."""
    return len(msg.subject) + len(ack) + len(msg.headers) + len(msg.payload)
