"""Go's text forms of durations and times, byte for byte as nats-server prints them.

Three forms appear in monitoring JSON:
- `go_duration(ns)`: Go `time.Duration.String()` ("717µs", "1.5s", "1h2m3.5s", "3m0s", "0s"), used for
  `rtt` and for durations inside JetStream structures.
- `uptime(ns)`: nats-server's `myUptime` (whole seconds, with days and years: "3m47s", "2d1h0m5s"),
  used for `uptime` and `idle`.
- `rfc3339_nano(ns)`: Go's `time.RFC3339Nano` in UTC ("2026-11-21T23:53:41.858006007Z", trailing
  zeros of the fraction dropped, no fraction at all when it is zero), used for every timestamp.

Inputs are integer nanoseconds so the output never depends on float rounding; `wall_ns` converts the
float seconds of `appliance.clock` (rounded to the microsecond: a float cannot carry more).
"""

from __future__ import annotations

import datetime

NS_PER_US = 1_000
NS_PER_MS = 1_000_000
NS_PER_S = 1_000_000_000

_EPOCH = datetime.datetime(1970, 1, 1)  # naive UTC: isoformat() then has no offset to strip


def wall_ns(seconds: float) -> int:
    """Float seconds since the epoch (or a float duration) to integer nanoseconds, microsecond precision."""
    return round(seconds * 1_000_000) * NS_PER_US


def _frac(value: int, precision: int) -> tuple[str, int]:
    """Go's fmtFrac: the fraction of value / 10**precision without trailing zeros, and the integer part."""
    digits = ""
    printed = False
    for _ in range(precision):
        digit = value % 10
        printed = printed or digit != 0
        if printed:
            digits = str(digit) + digits
        value //= 10
    return ("." + digits if printed else ""), value


def go_duration(ns: int) -> str:
    """Go `time.Duration(ns).String()`."""
    if ns == 0:
        return "0s"
    sign = "-" if ns < 0 else ""
    magnitude = abs(ns)
    if magnitude < NS_PER_S:
        if magnitude < NS_PER_US:
            return f"{sign}{magnitude}ns"
        unit, precision = ("µs", 3) if magnitude < NS_PER_MS else ("ms", 6)
        fraction, whole = _frac(magnitude, precision)
        return f"{sign}{whole}{fraction}{unit}"
    fraction, seconds = _frac(magnitude, 9)
    text = f"{seconds % 60}{fraction}s"
    minutes = seconds // 60
    if minutes > 0:
        text = f"{minutes % 60}m{text}"
        hours = minutes // 60
        if hours > 0:
            text = f"{hours}h{text}"
    return sign + text


def uptime(ns: int) -> str:
    """nats-server `myUptime`: whole seconds, then minutes, hours, days (d) and 365-day years (y)."""
    seconds = ns // NS_PER_S if ns >= 0 else -(-ns // NS_PER_S)  # Go truncates toward zero
    minutes, hours = seconds // 60, seconds // 3600
    days = hours // 24
    years = days // 365
    if years > 0:
        return f"{years}y{days % 365}d{hours % 24}h{minutes % 60}m{seconds % 60}s"
    if days > 0:
        return f"{days}d{hours % 24}h{minutes % 60}m{seconds % 60}s"
    if hours > 0:
        return f"{hours}h{minutes % 60}m{seconds % 60}s"
    if minutes > 0:
        return f"{minutes}m{seconds % 60}s"
    return f"{seconds}s"


def rfc3339_nano(ns: int) -> str:
    """Go `t.UTC().Format(time.RFC3339Nano)` for a time given as nanoseconds since the Unix epoch."""
    seconds, nanos = divmod(ns, NS_PER_S)
    text = (_EPOCH + datetime.timedelta(seconds=seconds)).isoformat()
    if nanos:
        text += "." + f"{nanos:09d}".rstrip("0")
    return text + "Z"


GO_ZERO_TIME = "0001-01-01T00:00:00Z"  # Go's zero time.Time, which omitempty never omits
