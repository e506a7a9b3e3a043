"""Push delivery of a consumer (ADR-9, ADR-15): interest, idle heartbeats, flow control, and the
inactive_threshold that removes an ephemeral consumer nobody listens to."""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from appliance import limits
from appliance.jetstream.config import ConsumerConfig
from appliance.jetstream.consumer_state import ConsumerState
from appliance.jetstream.host import Host, Timer
from appliance.jetstream.pull import PullRequest
from appliance.jetstream.wire import status_headers

if TYPE_CHECKING:
    from collections.abc import Callable

    from appliance.jetstream.consumer import Consumer
    from appliance.jetstream.stream import Stream

NS = 1_000_000_000


class PushDelivery:
    """Mixin of Consumer: everything about push delivery."""

    if TYPE_CHECKING:
        config: ConsumerConfig
        host: Host
        state: ConsumerState
        stream: Stream
        name: str
        deleted: bool
        waiting: deque[PullRequest]
        _last_activity_ns: int
        _fc_reply: str

        def _kick(self) -> None: ...

        def num_pending(self) -> int: ...

        on_inactive: Callable[[Consumer], None]
        _interest_timer: Timer | None
        _interest_poll_s: float
        _fc_count: int
        _heartbeat_timer: Timer | None
        _inactive_timer: Timer | None
        _rate_timer: Timer | None
        _rate_tokens: float
        _rate_burst: int
        _rate_at_ns: int
        _delivered_since_heartbeat: bool

        def _heartbeat_headers(self) -> bytes: ...

    # --- rate_limit_bps: a token bucket in bytes (nats-server's rate.Limiter) -----------------------

    def _rate_reset(self) -> None:
        """A new (or changed) rate limit starts with a full bucket: the stream's max_msg_size, or
        the server's max payload, as nats-server sizes its burst."""
        burst = self.stream.config.max_msg_size
        self._rate_burst = burst if burst > 0 else limits.PAYLOAD_BYTES_MAX
        self._rate_tokens = float(self._rate_burst)
        self._rate_at_ns = self.host.now_ns()

    def _rate_take(self, size: int, now: int) -> bool:
        """Take `size` bytes from the bucket for the next delivery, or (not enough yet) look
        again when there will be: a delivery waits for its own bytes, as a rate.Limiter
        reservation does. A message larger than the bucket waits for a full one."""
        rate = self.config.rate_limit_bps / 8  # bytes per second
        elapsed = max(now - self._rate_at_ns, 0)
        self._rate_at_ns = now
        self._rate_tokens = min(self._rate_tokens + elapsed * rate / NS, float(self._rate_burst))
        needed = min(size, self._rate_burst)
        if self._rate_tokens >= needed:
            self._rate_tokens -= size
            return True
        if self._rate_timer is None:
            def again() -> None:
                self._rate_timer = None
                self._kick()

            self._rate_timer = self.host.call_later((needed - self._rate_tokens) / rate, again)
        return False

    def _push_ready(self) -> bool:
        config = self.config
        if self._fc_reply:
            return False
        if self.host.has_interest(config.deliver_subject, config.deliver_group):
            self._interest_poll_s = limits.JS_PUSH_INTEREST_POLL_MIN_S
            return True
        self._poll_interest()
        return False

    def _poll_interest(self) -> None:
        """Interest can arrive from a sibling worker without a local event: look again later."""
        if self._interest_timer is not None or self.deleted:
            return
        delay = self._interest_poll_s
        self._interest_poll_s = min(delay * 2, limits.JS_PUSH_INTEREST_POLL_MAX_S)

        def again() -> None:
            self._interest_timer = None
            self._kick()

        self._interest_timer = self.host.call_later(delay, again)

    def _send_flow_control(self) -> None:
        token = "".join(
            self.host.rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
            for _ in range(8)
        )
        self._fc_reply = f"$JS.FC.{self.stream.config.name}.{self.name}.{token}"
        self._fc_count = 0
        self.host.send(
            self.config.deliver_subject,
            b"",
            reply=self._fc_reply,
            header=status_headers(100, "FlowControl Request"),
        )

    def on_flow_control_reply(self, subject: str) -> None:
        if subject == self._fc_reply:
            self._fc_reply = ""
            self._kick()

    def _arm_timers(self) -> None:
        config = self.config
        if config.is_push and config.idle_heartbeat:
            self._heartbeat_timer = self.host.call_later(config.idle_heartbeat / NS, self._push_heartbeat)
        if config.inactive_threshold:
            self._inactive_timer = self.host.call_later(config.inactive_threshold / NS, self._check_inactive)

    def _rearm_inactive(self) -> None:
        """inactive_threshold changed: its timer starts again with the new value (or stops)."""
        if self._inactive_timer is not None:
            self._inactive_timer.cancel()
            self._inactive_timer = None
        if self.config.inactive_threshold and not self.deleted:
            self._inactive_timer = self.host.call_later(
                self.config.inactive_threshold / NS, self._check_inactive
            )

    def _push_heartbeat(self) -> None:
        self._heartbeat_timer = None
        if self.deleted:
            return
        if not self._delivered_since_heartbeat and self.host.has_interest(self.config.deliver_subject):
            self.host.send(self.config.deliver_subject, b"", header=self._heartbeat_headers())
        self._delivered_since_heartbeat = False
        self._heartbeat_timer = self.host.call_later(self.config.idle_heartbeat / NS, self._push_heartbeat)

    def _check_inactive(self) -> None:
        self._inactive_timer = None
        if self.deleted:
            return
        config = self.config
        now = self.host.now_ns()
        if config.is_push:
            active = self.host.has_interest(config.deliver_subject, config.deliver_group)
        else:
            active = bool(self.waiting)
        if active:
            self._last_activity_ns = now
        elif now - self._last_activity_ns >= config.inactive_threshold:
            self.on_inactive(self)
            return
        delay = max(
            config.inactive_threshold - (now - self._last_activity_ns), config.inactive_threshold // 4
        )
        self._inactive_timer = self.host.call_later(delay / NS, self._check_inactive)

    def on_interest(self) -> None:
        if self.config.is_push:
            self._last_activity_ns = self.host.now_ns()
            self._kick()
