"""Every numeric bound in the appliance. Units come last in the name; relations are asserted.

Defaults that clients can observe are nats-server's (server/const.go, opts.go); each names its origin.
Append new limits under the heading of their layer; never change a wire-visible default silently.
"""

# --- client protocol (nats-server const.go) -----------------------------------------------------
CONTROL_LINE_BYTES_MAX = 4096  # MAX_CONTROL_LINE_SIZE; `max_control_line`
PAYLOAD_BYTES_MAX = 1024 * 1024  # MAX_PAYLOAD_SIZE; `max_payload`
PENDING_BYTES_MAX = 64 * 1024 * 1024  # MAX_PENDING_SIZE; per-connection outbound buffer, `max_pending`
CONNECTIONS_MAX = 64 * 1024  # DEFAULT_MAX_CONNECTIONS; `max_connections`
PING_INTERVAL_S = 120.0  # DEFAULT_PING_INTERVAL; `ping_interval`
FIRST_PING_INTERVAL_S = 2.0  # first server PING after connect (+0..20% jitter)
PINGS_OUTSTANDING_MAX = 2  # DEFAULT_PING_MAX_OUT; `ping_max`
WRITE_DEADLINE_S = 10.0  # DEFAULT_FLUSH_DEADLINE; `write_deadline`
AUTH_TIMEOUT_S = 2.0  # AUTH_TIMEOUT; `authorization.timeout`
LAME_DUCK_DURATION_S = 120.0  # DEFAULT_LAME_DUCK_DURATION
LAME_DUCK_DURATION_MIN_S = 30.0  # lame_duck_duration below this is a config error
LAME_DUCK_GRACE_PERIOD_S = 10.0  # DEFAULT_LAME_DUCK_GRACE_PERIOD

# --- our own pacing ------------------------------------------------------------------------------
READ_CHUNK_BYTES = 256 * 1024  # one socket read; the parser consumes it in one pass
EVENTS_PER_TURN_MAX = 4096  # events handled per connection per loop turn before yielding
SUBJECT_CACHE_ENTRIES_MAX = 4096  # per-account sublist match cache (nats-server slCacheMax)
SUBJECT_TOKENS_MAX = 256  # a subject deeper than this is rejected as invalid
HTTP_REQUEST_BYTES_MAX = 16 * 1024  # monitoring request line + headers
HTTP_BODY_BYTES_MAX = 64 * 1024  # a monitoring request body (read and ignored, as nats-server does)
HTTP_CONNECTIONS_MAX = 128  # open monitoring connections; more are answered 503 and closed
HTTP_IDLE_TIMEOUT_S = 30.0  # a monitoring connection silent this long (mid-request or kept alive) is closed

assert PAYLOAD_BYTES_MAX <= PENDING_BYTES_MAX, "max_payload must be <= max_pending (nats-server rule)"
assert CONTROL_LINE_BYTES_MAX < READ_CHUNK_BYTES
