"""When to restart a dead worker: exponential backoff per worker and a restart budget per host.

Pure: callers pass the monotonic time. A worker that dies again soon after a restart waits twice
as long as the last time (up to the ceiling); one that stayed up `stable_after_s` starts over from
the initial delay. The budget counts restarts of all workers in a sliding window; a restart that
would exceed it is refused, and the supervisor then stops and exits non-zero so that systemd
(Restart=on-failure) restarts the whole service from a clean slate.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from appliance import limits


@dataclass(frozen=True, slots=True)
class RestartPolicy:
    backoff_initial_s: float = limits.RESTART_BACKOFF_INITIAL_S
    backoff_max_s: float = limits.RESTART_BACKOFF_MAX_S
    budget_count: int = limits.RESTART_BUDGET_COUNT
    budget_window_s: float = limits.RESTART_BUDGET_WINDOW_S
    stable_after_s: float = limits.WORKER_STABLE_AFTER_S
    heartbeat_late_s: float = limits.WORKER_HEARTBEAT_LATE_S
    heartbeat_dead_s: float = limits.WORKER_HEARTBEAT_DEAD_S
    stop_grace_s: float = limits.STOP_GRACE_S

    def __post_init__(self) -> None:
        assert 0 < self.backoff_initial_s <= self.backoff_max_s
        assert self.budget_count >= 0
        assert self.budget_window_s > 0
        assert 0 < self.heartbeat_late_s < self.heartbeat_dead_s
        assert self.stop_grace_s >= 0


class RestartTracker:
    """The budget shared by all workers; one instance per supervisor."""

    def __init__(self, policy: RestartPolicy) -> None:
        self.policy = policy
        # bounded: entries older than the window are dropped before each append
        self._recent_mono_s: deque[float] = deque(maxlen=policy.budget_count + 1)

    def restarts_in_window(self, now_mono_s: float) -> int:
        self._forget_before(now_mono_s - self.policy.budget_window_s)
        return len(self._recent_mono_s)

    def maybe_spend(self, now_mono_s: float) -> bool:
        """Record one restart if the budget allows it; False means over budget."""
        if self.restarts_in_window(now_mono_s) >= self.policy.budget_count:
            return False
        self._recent_mono_s.append(now_mono_s)
        return True

    def _forget_before(self, horizon_mono_s: float) -> None:
        while self._recent_mono_s and self._recent_mono_s[0] <= horizon_mono_s:
            self._recent_mono_s.popleft()


def restart_delay_s(policy: RestartPolicy, consecutive_failures: int) -> float:
    """Delay before restart number `consecutive_failures` (1 = first failure) of one worker."""
    assert consecutive_failures >= 1
    exponent = min(consecutive_failures - 1, 62)
    return float(min(policy.backoff_max_s, policy.backoff_initial_s * (2**exponent)))


def failures_after_exit(policy: RestartPolicy, *, previous_failures: int, uptime_s: float) -> int:
    """Consecutive failures counting this exit: a worker that stayed up long enough starts over."""
    if uptime_s >= policy.stable_after_s:
        return 1
    return previous_failures + 1
