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
RTT_MEASUREMENT_INTERVAL_S = 3600.0  # an active client is PINGed for a fresh RTT this often
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
SERVICE_RESPONSES_MAX = 100_000  # pending service-import response mappings per worker (oldest dropped first)
SERVICE_RESPONSES_SWEEP_S = 1.0  # how often expired response mappings (export response threshold) are dropped
SERVICE_IMPORT_CHAIN_MAX = 8  # service imports chained inside one delivery (cycles are refused at load)
SUBJECT_TOKENS_MAX = 256  # a subject deeper than this is rejected as invalid
HTTP_REQUEST_BYTES_MAX = 16 * 1024  # monitoring request line + headers
WRITE_BUFFER_HIGH_BYTES = 256 * 1024  # transport buffer above which a write deadline starts running
STALLED_PRODUCERS_MAX = 1024  # producers one slow subscriber may hold paused at once
PRODUCER_STALL_MAX_S = 0.01  # for at most this long each time (nats-server's stallTotalAllowed, 10 ms)
ACCEPT_BACKLOG = 1024  # listen() backlog of the client port
WS_HANDSHAKE_TIMEOUT_S = 2.0  # a WebSocket upgrade without TLS and without `handshake_timeout` must finish in this
LINK_BACKLOG_BYTES_MAX = 64 * 1024 * 1024  # frames waiting for room on one link to a sibling worker
MONITOR_GATHER_TIMEOUT_S = 2.0  # how long /connz and /varz wait for sibling workers' snapshots
# a PONG waits at most this long for sibling workers to apply interest (1 s can pass on a loaded 2-core box)
INTEREST_SYNC_TIMEOUT_S = 5.0
INTEREST_SYNC_WAITERS_MAX = 65_536  # PONGs waiting for an interest sync at once
LINK_RECORDS_FLUSH_BYTES = 256 * 1024  # messages gathered for a sibling worker before a frame leaves
LINK_RECORDS_PIPELINE_BYTES = 16 * 1024  # ... one by one (deliver: relays, internal publishers): the sibling starts early
ALLOCATOR_MMAP_THRESHOLD_BYTES = 8 * 1024 * 1024  # glibc mallopt: smaller blocks (reads, frames, outputs) from the heap
ALLOCATOR_TRIM_THRESHOLD_BYTES = 32 * 1024 * 1024  # glibc mallopt: free heap kept before returning it to the OS
CLOSED_CONNECTIONS_MAX = 10_000  # kept for /connz?state=closed (nats-server max_closed_clients)
HTTP_BODY_BYTES_MAX = 64 * 1024  # a monitoring request body (read and ignored, as nats-server does)
HTTP_CONNECTIONS_MAX = 1024  # open monitoring connections (nats-server serves 500 at once); more get 503 and close
HTTP_IDLE_TIMEOUT_S = 30.0  # a monitoring connection silent this long (mid-request or kept alive) is closed

# --- bench load generator (appliance/bench) -------------------------------------------------------
BENCH_READ_BUFFER_BYTES = 4 * 1024 * 1024  # one client's receive buffer; holds any whole frame
BENCH_WRITE_BATCH_BYTES = 64 * 1024  # publishes are written in batches of about this size
BENCH_LATENCY_SAMPLES_MAX = 1_000_000  # per client; beyond it every k-th sample is kept
BENCH_CLIENTS_MAX = 64  # processes one `appliance bench` run may start
BENCH_ASYNC_WINDOW_MAX = 65_536  # outstanding JetStream publish acks per client
BENCH_FETCH_BATCH_MAX = 10_000  # messages asked for in one pull request
BENCH_IDLE_TIMEOUT_S = 10.0  # a client that sees no progress for this long gives up

# --- config files (appliance/config) ---------------------------------------------------------------
CONFIG_FILE_BYTES_MAX = 4 * 1024 * 1024  # one config file (or include); nats configs are a few KiB
CONFIG_INCLUDE_DEPTH_MAX = 16  # nested `include` chain length
CONFIG_NESTING_DEPTH_MAX = 128  # nested maps/arrays in one file
CONFIG_ENV_EXPANSIONS_MAX = 64  # nested $ENV re-parses (cycles are reported before this is hit)
CONFIG_PROBLEMS_MAX = 200  # problems collected for one file before giving up
CONFIG_RING_BYTES_MIN = 64 * 1024  # `appliance { ring_bytes }` lower bound (power of two)
CONFIG_RING_BYTES_MAX = 1024 * 1024 * 1024  # `appliance { ring_bytes }` upper bound
CONFIG_WORKERS_MAX = 1024  # `appliance { workers }` upper bound

assert PAYLOAD_BYTES_MAX <= PENDING_BYTES_MAX, "max_payload must be <= max_pending (nats-server rule)"
assert CONTROL_LINE_BYTES_MAX < READ_CHUNK_BYTES
assert BENCH_READ_BUFFER_BYTES >= 2 * (PAYLOAD_BYTES_MAX + CONTROL_LINE_BYTES_MAX), "a bench read holds a whole frame"

# --- RAFT (appliance/raft, appliance/cluster/group.py) ---------------------------------------------
RAFT_ELECTION_TICKS = 10  # base election timeout; each replica draws from [base, 2*base)
RAFT_HEARTBEAT_TICKS = 2  # leader heartbeat interval
RAFT_TICK_S = 0.1  # one tick of the worker clock; election timeout 1..2 s, heartbeat 0.2 s
# the route to a leader's host closed: its followers campaign 1, 1+slot, 1+2*slot ... ticks later
# (each its own slot, so they do not split the vote), not after a whole election timeout
RAFT_LEADER_GONE_SLOT_TICKS = 2
RAFT_INFLIGHT_MSGS_MAX = 64  # appends in flight per follower (etcd MaxInflightMsgs)
RAFT_APPEND_BYTES_MAX = 1024 * 1024  # payload bytes of one APPEND message
RAFT_UNCOMMITTED_ENTRIES_MAX = 8192  # leader refuses proposals beyond this many uncommitted
RAFT_APPLY_BYTES_MAX = 4 * 1024 * 1024  # committed payload handed to apply in one Ready
RAFT_PROPOSALS_PENDING_MAX = 4096  # driver: proposals batched while a Ready is in flight
RAFT_COMMIT_NOTICE_S = 0.01  # driver: a leader holds an append that only carries its commit index this long, for the next append to carry it instead
RAFT_LAZY_SYNC_S = 1.0  # driver: a single voter's durable=False entries reach disk within this
RAFT_GROUPS_PER_WORKER_MAX = 100_000  # registry: RAFT groups one worker owns
RAFT_SUBJECTS_CACHED_MAX = 4096  # route transport: (peer, group) subjects kept built (beyond: the cache starts over)
RAFT_LEARNER_LAG_MAX = 16  # driver: a learner this close to the commit index (and past its snapshot) is promoted to voter
RAFT_SNAPSHOT_ENTRIES = 8192  # driver: snapshot + compact once this many entries were applied since
RAFT_LOG_RECORD_BYTES_MAX = 64 * 1024 * 1024  # one record of the durable raft log file
RAFT_FORWARD_TIMEOUT_S = 5.0  # a proposal forwarded to a leader on another host fails without an answer
RAFT_FORWARD_IN_FLIGHT_MAX = 4096  # forwarded proposals waiting for their leader's answer, per worker
META_FORM_WAIT_S = 10.0  # a new cluster forms its meta group with a quorum after this, if not all routes are up
META_CHECK_S = 0.25  # how often the meta driver looks at the servers the routes know
STEPDOWN_PEER_SEEN_S = 1.0  # leader step-down: a successor must have answered the leader this recently
STEPDOWN_FOLLOW_S = 3.0  # an old leader looks this long for its transfer to finish, to drop its interest
STEPDOWN_SETTLE_S = 0.25  # a step-down's transfer starts this long after the request (stepdown.py)
JS_LEAVE_GRACE_S = 3.0  # a replica moved off a server is deleted once no leader contacted it for this long
JS_REPLACE_CHECK_S = 1.0  # how often the meta leader tries to re-place under-replicated streams
# a server evicted by SERVER.REMOVE that is connected this long after its removal is added back
# (nats-server's peerRemoveTimeout); `appliance { peer_remove_timeout }` changes it
JS_PEER_REMOVE_TIMEOUT_S = 300.0

assert RAFT_HEARTBEAT_TICKS < RAFT_ELECTION_TICKS
assert PAYLOAD_BYTES_MAX <= RAFT_APPEND_BYTES_MAX, "one max-size message fits one APPEND"
assert RAFT_APPEND_BYTES_MAX * 2 <= RAFT_LOG_RECORD_BYTES_MAX

# --- fabric (shared-memory rings, socketpair fallback, simulated links) ---------------------------
RING_BYTES = 8 * 1024 * 1024  # data bytes of one SPSC ring (one per ordered worker pair); `appliance { ring_bytes }`
RING_BYTES_MIN = 4096  # smallest ring accepted (tests use small rings to exercise wrap-around)
FRAME_BYTES_MAX = RING_BYTES // 4  # largest frame payload; a link's own maximum is min(this, capacity // 4)
LINK_BATCH_FRAMES_MAX = 256  # frames handed to a link's consumer in one batch
LINK_STUCK_S = 10.0  # frames from a sibling untaken this long: the worker stops heartbeating (drain_watch.py)
LINK_BATCH_BYTES_MAX = 1024 * 1024  # payload bytes in one batch (a single larger frame still goes alone)
LINK_READ_CHUNK_BYTES = 256 * 1024  # one socket read of the socketpair fallback
ADMISSION_LOCK_TRIES = 1000  # tries (yielding the CPU between) for the server-wide max_connections lock
ADMISSION_LOCK_WAIT_S = 0.2  # then tries with sleeps this long at most (a preempted holder) before refusing
ADMISSION_LOCK_SLEEP_S = 0.001
REJOIN_HANDOVERS_PER_TURN = 64  # fresh sockets to restarted siblings taken from the rejoin channel per loop turn

assert RING_BYTES & (RING_BYTES - 1) == 0, "ring capacity must be a power of two"
assert RING_BYTES_MIN & (RING_BYTES_MIN - 1) == 0, "ring capacity must be a power of two"
assert RING_BYTES_MIN <= RING_BYTES
assert FRAME_BYTES_MAX <= RING_BYTES // 4, "any frame fits an empty ring, even after a wrap"
assert FRAME_BYTES_MAX >= PAYLOAD_BYTES_MAX + CONTROL_LINE_BYTES_MAX, "a max message fits a frame"
assert FRAME_BYTES_MAX < 2**32, "frame length is a u32 on the wire"

# --- store (appliance/store/) ---------------------------------------------------------------------
STORE_SEGMENT_BYTES = 8 * 1024 * 1024  # an active segment is sealed (compressed) past this size
STORE_BLOCK_RAW_BYTES = 1024 * 1024  # raw records per zstd block of a sealed segment
STORE_APPLIED_JOURNAL_RECORDS_MAX = 4096  # a replicated stream's applied-index journal is rewritten past this
STORE_RECORD_BYTES_MAX = 64 * 1024 * 1024  # one record (subject + headers + payload + framing)
STORE_READ_HANDLES_MAX = 64  # open read fds per FileOps (LRU)
STORE_BATCH_MSGS_MAX = 65536  # messages per store_batch call
STORE_INDEX_RUN_MSGS = 65536  # sequences per run of the in-memory stream index
STORE_ZSTD_LEVEL = 3  # zstd level of snapshots (streamed while they are taken)
STORE_DICT_BYTES = 16 * 1024  # trained per-stream zstd dictionary
STORE_DICT_SAMPLES_MIN = 64  # records needed before a dictionary is trained
STORE_DICT_SAMPLES_MAX = 4096  # records sampled to train one
STORE_SUBJECT_BYTES_MAX = 65535  # subject length is a u16 in a record
STORE_COMMIT_WAITERS_MAX = 65536  # writes waiting on one group-commit fsync
STORE_UNSEALED_SEGMENTS_MAX = 4  # closed segments awaiting background sealing before it goes inline
STORE_BLOCK_CACHE_BYTES = 32 * 1024 * 1024  # decoded sealed blocks kept per stream (LRU, raw bytes)
STORE_SEAL_THREADS = 1  # background sealer threads per process (zstd releases the GIL)
STORE_SEAL_WAITING_MAX = 65536  # stores waiting for the background sealer (one entry per store)
STORE_SEAL_ZSTD_LEVEL = 6  # zstd level of sealed blocks (sealing runs off the append path)
STORE_SEAL_FAST_ZSTD_LEVEL = 3  # zstd level while more than one closed segment waits (catching up)
STORE_ACTIVE_READAHEAD_BYTES = 64 * 1024  # one read of an unsealed segment serves the loads that follow
STORE_DAMAGED_SKIPS_MAX = 1024  # records found damaged (and quarantined) by one load_next/load_last
STORE_LOST_LISTED_MAX = 10_000  # lost sequences listed in stream info `state.lost.msgs` (all are counted)
STORE_PREALLOCATE_BYTES = 1024 * 1024  # active segments are fallocated this far ahead of writes
STORE_PREALLOCATE_MIN_BYTES = 64 * 1024  # ... growing from this with the file (small streams stay small)

assert STORE_BLOCK_RAW_BYTES <= STORE_SEGMENT_BYTES
assert PAYLOAD_BYTES_MAX < STORE_RECORD_BYTES_MAX < 2**32, "record length is a u32 on disk"
assert STORE_DICT_SAMPLES_MIN <= STORE_DICT_SAMPLES_MAX

# --- supervisor, worker processes, `appliance status` (appliance/supervisor, appliance/worker) --------
STATUS_ROWS_MAX = 1024  # worker rows in the shared status table (one per worker)
WORKER_HEARTBEAT_LATE_S = 2.0  # a worker silent this long is "late": status says degraded
WORKER_HEARTBEAT_DEAD_S = 60.0  # a worker silent this long is wedged: SIGKILL, then restart
WORKER_STABLE_AFTER_S = 30.0  # a worker up this long resets its restart backoff
RESTART_BACKOFF_INITIAL_S = 0.1  # first restart delay of a dead worker; doubles per failure
RESTART_BACKOFF_MAX_S = 10.0  # restart delay ceiling
RESTART_BUDGET_COUNT = 10  # restarts allowed within the window; one more: the supervisor exits 1
RESTART_BUDGET_WINDOW_S = 60.0  # sliding window of the restart budget
STOP_GRACE_S = 10.0  # SIGTERM to SIGKILL for all workers together (below systemd TimeoutStopSec)
SUPERVISOR_TICK_S = 0.5  # longest wait of the supervisor loop between looks at its workers
WORKER_SAMPLE_INTERVAL_S = 1.0  # cpu %/rss sampling of workers (psutil)
WORKER_BOOTSTRAP_BYTES_MAX = 16 * 1024 * 1024  # pickled options + context sent to a new worker
CONTROL_REQUEST_BYTES_MAX = 4096  # one request line on the control socket
CONTROL_CONNECTIONS_MAX = 16  # open control-socket connections; more are closed at once
CONTROL_CLIENT_TIMEOUT_S = 2.0  # a control connection that has not finished in this long is closed
STARTUP_EXTEND_S = 20.0  # each EXTEND_TIMEOUT_USEC= while starting asks systemd for this much more
STARTUP_EXTEND_EVERY_S = 5.0  # how often the start is extended (well inside STARTUP_EXTEND_S)
LAME_DUCK_STOP_MARGIN_S = 10.0  # what the stop timeout asked at lame duck adds to its duration and graces
STARTUP_EXTEND_MAX_S = 3600.0  # no extension after this long: systemd's TimeoutStartSec= then ends a stuck start
STATUS_CLIENT_TIMEOUT_S = 2.0  # `appliance status` gives up (exit 2) after this long

assert RESTART_BACKOFF_INITIAL_S <= RESTART_BACKOFF_MAX_S
assert STARTUP_EXTEND_EVERY_S * 2 <= STARTUP_EXTEND_S
assert WORKER_HEARTBEAT_LATE_S < WORKER_HEARTBEAT_DEAD_S
assert SUPERVISOR_TICK_S <= WORKER_HEARTBEAT_LATE_S / 2, "the supervisor notices a late worker in time"

# --- JetStream (appliance/jetstream) -----------------------------------------------------------------
JS_DECIDE_RETRY_S = 0.01  # a new stream leader waits for its predecessor's entries before deciding publishes
JS_PUBLISH_BATCH_MAX = 1024  # publishes proposed as one stream RAFT entry (one loop turn's worth)
JS_DEDUPE_IDS_MAX = 1_000_000  # Nats-Msg-Id entries remembered per stream within duplicate_window
JS_EXPIRY_GRANULARITY_S = 0.01  # shortest max_age expiry timer
JS_DELIVER_BATCH_MAX = 256  # messages a consumer delivers per loop turn before yielding
JS_ACK_TARGETS_MAX = 65536  # (stream, consumer) ack-subject tokens remembered per account
JS_GC_THRESHOLDS = (50_000, 20, 100)  # gc.set_threshold in a worker running JetStream (see service.py)
JS_RELAY_CARRIERS_MAX = 4096  # link subscriptions whose relay carrier is kept (relay.py); then cleared
JS_RELAY_PIPELINE_BYTES = 64 * 1024  # a pull batch relayed to a sibling leaves in frames this big (relay.py)
JS_REDELIVER_UNAPPLIED_RETRY_S = 0.05  # an ack_wait that ran out before its delivery was applied: looked at again
JS_CATCHUP_BATCH_MSGS = 256  # stored messages a lagging replica fetches per round trip (one in flight)
JS_CATCHUP_RETRY_S = 0.5  # a catch-up fetch the leader did not answer is asked again after this
JS_CATCHUP_BATCH_BYTES = 1024 * 1024  # one catch-up reply, encoded (also never above the route's max_payload)
JS_REPAIR_BYTES_MAX = 64 * 1024 * 1024  # a replica's lost range fetched from a peer is held whole, up to this
JS_REPAIR_RETRY_MAX_S = 30.0  # a lost range no peer could give is asked for again at most this far apart
JS_REPAIR_HOLD_S = 10.0  # consumers of a damaged replica wait this long at a lost message for its repair
# Memory of a catch-up does not grow with the stream: per group one request is in flight (the
# joiner holds one reply of <= JS_CATCHUP_BATCH_BYTES and its decoded batch of <= JS_CATCHUP_BATCH_MSGS
# messages, the serving replica builds one such reply per request), and the joiner's store writes
# through its active segment (STORE_SEGMENT_BYTES) and block cache (STORE_BLOCK_CACHE_BYTES), while
# glibc keeps up to ALLOCATOR_TRIM_THRESHOLD_BYTES of freed heap. So a worker's RSS rises by about
# JS_CATCHUP_RSS_RISE_BYTES over what it held before, whatever the stream's size; the stated bound
# for any server process (supervisor or worker) during the catch-up of a stream of any size is
# JS_CATCHUP_RSS_BYTES_BOUND: measured, not enforced, by `python -m appliance.bench.catchup --gb 1`.
JS_CATCHUP_RSS_RISE_BYTES = (4 * JS_CATCHUP_BATCH_BYTES + STORE_SEGMENT_BYTES + STORE_BLOCK_CACHE_BYTES
                             + ALLOCATOR_TRIM_THRESHOLD_BYTES)
JS_CATCHUP_RSS_BYTES_BOUND = 256 * 1024 * 1024
JS_CATCHUP_TIMEOUT_S = 2.0  # a catch-up request with no reply by then has failed (the replica asks again)
JS_STREAM_LOG_ENTRIES = 32  # applied publish batches a stream's in-memory RAFT log keeps before compacting
JS_ACK_HOLD_S = 2.0  # a consumer replica not leading keeps each AckSync it hears this long (consumer_acks.py)
JS_ACK_HELD_MAX = 4096  # ... at most this many per consumer
JS_AFTER_ACKS_WAITERS_MAX = 1024  # CONSUMER.INFO answers waiting for a consumer's acks to apply
JS_REDELIVER_QUEUE_MAX = 65536  # stream sequences waiting for redelivery per consumer
JS_FLOW_CONTROL_MSGS = 1024  # a push consumer with flow_control asks for a response this often
JS_CONSUMER_SYNC_INTERVAL_S = 1.0  # delivered state (not acks) reaches disk at least this often
JS_API_PAGE_STREAMS_NAMES = 1024  # nats-server JSApiNamesLimit
JS_API_PAGE_STREAMS_LIST = 256  # nats-server JSApiListLimit
JS_STREAM_INFO_SUBJECTS_MAX = 100_000  # subjects_filter page of STREAM.INFO
JS_REPLICA_CURRENT_S = 10.0  # cluster info: a caught-up follower heard from within this is current (lostQuorumInterval)
JS_LEADER_CURRENT_S = 2.0  # cluster info on a follower: the leader heard from within this is current
JS_DIRECT_BATCH_MAX = 1024  # messages one DIRECT.GET batch may return
JS_DIRECT_MULTI_MAX = 1024  # subjects one DIRECT.GET multi_last may resolve (nats-server: 413 beyond)
JS_DIRECT_TIME_TEXTS_MAX = 4096  # seconds whose RFC 3339 text a worker's direct gets keep (LRU)

assert JS_DELIVER_BATCH_MAX <= JS_REDELIVER_QUEUE_MAX
JS_FSYNC_THREADS = 4  # executor threads running group-commit fsyncs for all streams of a worker

# --- admin CLI verbs (appliance/cli: stream, consumer, pub/sub/req, server) ---------------------
CLI_REQUEST_TIMEOUT_S = 5.0  # natscli's default --timeout for one API request
CLI_LIST_PAGES_MAX = 1024  # pages one `ls` follows (offset paging) before it stops and says so
CLI_SUB_PENDING_MSGS_MAX = 65_536  # messages `sub`/`consumer next` hold before nats-py reports slow consumer
CLI_PUB_COUNT_MAX = 10_000_000  # `pub --count` upper bound
CLI_STEPDOWN_POLLS_MAX = 10  # `cluster step-down`: info polls (every CLI_STEPDOWN_POLL_S) awaiting a new leader
CLI_STEPDOWN_POLL_S = 0.5
CLI_GATHER_QUIET_S = 0.5  # `server ls`: stop gathering answers after this long without a new one
JS_PULL_INTEREST_GRACE_NS = 250_000_000  # a pull request's reply without interest is dropped once
# the request is this old (nats-server drops at once on one server; sibling workers learn of an
# inbox's subscription a moment after the client made it, as nats-server's gateways do, 2 s there)
JS_PUSH_INTEREST_POLL_MIN_S = 0.02  # a push consumer without interest looks again after this ...
JS_PUSH_INTEREST_POLL_MAX_S = 1.0  # ... doubling up to this (interest from sibling workers)
JS_INLINE_FSYNC_ACKS_MAX = 2  # at most this many PubAcks waiting: fsync on the loop, not a thread
JS_TTL_MSGS_MAX = 1_000_000  # messages with a per-message TTL (Nats-TTL) tracked per stream
JS_SOURCE_BATCH_MAX = 256  # messages a stream copies from one of its sources per loop turn
JS_SOURCE_POLL_MIN_S = 0.005  # a source with nothing new looks again after this ...
JS_SOURCE_POLL_MAX_S = 0.25  # ... doubling up to this
JS_SOURCE_RECOVERY_SCAN_MAX = 100_000  # messages read back on start to find each source's position
JS_SOURCE_WATCHED_MAX = 64  # origin streams whose publishes wake one stream's source tailers
# a source or mirror whose origin is not open on this server reads it through a push consumer there
JS_SOURCE_HEARTBEAT_S = 1.0  # the consumer's idle_heartbeat
JS_SOURCE_STALL_S = 5.0  # nothing heard for this long (no message, heartbeat, create answer): made again
JS_SOURCE_INACTIVE_S = 10.0  # the consumer's inactive_threshold (nats-server's sourceHealthCheckInterval)
JS_SOURCE_PROPOSAL_TIMEOUT_S = 10.0  # a copy proposal not applied by then (a dropped one): read again
JS_SOURCE_PENDING_MAX = 2 * JS_FLOW_CONTROL_MSGS  # deliveries held while a copy is in flight
JS_REPUBLISH_TARGETS_CACHED = 4096  # subject -> republish subject, per stream with republish (cleared when full)
