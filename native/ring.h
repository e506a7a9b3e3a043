/*
 * A single-producer single-consumer ring over a caller-provided memory region (shared memory).
 *
 * Theory of operation
 * -------------------
 * The region starts with a 256-byte header (four cache lines) followed by `capacity` data bytes,
 * capacity a power of two. `head` (written by the producer only) and `tail` (written by the
 * consumer only) are monotonic u64 byte counters on cache lines of their own; `head - tail` is the
 * fill. A record is `[len u32][kind u32][payload padded to 8]`, so every record starts 8-aligned.
 * A record that does not fit before the end of the data region is preceded by a wrap marker
 * (kind RING_KIND_WRAP) and written at offset 0; the skipped bytes count as used until the
 * consumer passes them.
 *
 * The producer writes the record, then publishes it with a release store of `head`; the consumer
 * reads `head` with an acquire load, copies records out, then frees them with a release store of
 * `tail`. That is the whole memory-ordering contract between two processes.
 *
 * Sleeping and waiting use a Dekker handshake (seq_cst fences on both sides):
 * - the consumer stores `reader_sleeping = 1`, fences, and re-checks `head` before it sleeps;
 *   the producer publishes, fences, and exchanges `reader_sleeping` to 0: if it was 1, the caller
 *   rings the consumer's doorbell. So the doorbell is rung at most once per sleep.
 * - the producer that found the ring full stores `writer_waiting = bytes needed`, fences and
 *   re-checks `tail`; the consumer frees, fences, and when the free space covers the need it
 *   exchanges `writer_waiting` to 0: if it was non-zero, the caller rings the producer's doorbell.
 *
 * No function allocates, blocks or knows about Python.
 */
#ifndef APPLIANCE_RING_H
#define APPLIANCE_RING_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* Assertions stay on in release builds (Python builds define NDEBUG): a broken ring invariant
 * must crash the worker, and the supervisor restarts it. */
#define RING_ASSERT(condition) \
    do { \
        if (!(condition)) ring_assert_failed(#condition, __FILE__, __LINE__); \
    } while (0)

_Noreturn void ring_assert_failed(const char *condition, const char *file, int line);

#define RING_MAGIC UINT64_C(0x474E49524C505041) /* "APPLRING", little-endian */
#define RING_VERSION UINT32_C(1)
#define RING_CACHE_LINE_BYTES 64
#define RING_HEADER_BYTES 256
#define RING_RECORD_HEADER_BYTES 8
#define RING_CAPACITY_MIN UINT64_C(64)
#define RING_CAPACITY_MAX (UINT64_C(1) << 31)
#define RING_KIND_WRAP UINT32_C(0)

typedef struct {
    /* cache line 0: layout, written once by ring_init */
    uint64_t magic;
    uint32_t version;
    uint32_t header_bytes;
    uint64_t capacity;
    uint64_t frame_bytes_max;
    uint8_t reserved0[RING_CACHE_LINE_BYTES - 32];
    /* cache line 1: the producer's */
    _Atomic uint64_t head;
    uint64_t producer_tail_cache; /* producer-private: last tail it saw */
    uint8_t reserved1[RING_CACHE_LINE_BYTES - 16];
    /* cache line 2: the consumer's */
    _Atomic uint64_t tail;
    uint8_t reserved2[RING_CACHE_LINE_BYTES - 8];
    /* cache line 3: sleep/wait handshake, rarely written */
    _Atomic uint32_t reader_sleeping;
    _Atomic uint32_t writer_waiting; /* bytes the blocked producer needs; 0 = not waiting */
    uint8_t reserved3[RING_CACHE_LINE_BYTES - 8];
} ring_header;

_Static_assert(sizeof(ring_header) == RING_HEADER_BYTES, "ring header is four cache lines");
_Static_assert(offsetof(ring_header, head) == 1 * RING_CACHE_LINE_BYTES, "head on its own line");
_Static_assert(offsetof(ring_header, tail) == 2 * RING_CACHE_LINE_BYTES, "tail on its own line");
_Static_assert(offsetof(ring_header, reader_sleeping) == 3 * RING_CACHE_LINE_BYTES, "flags line");
_Static_assert(sizeof(_Atomic uint64_t) == 8, "lock-free 64-bit counters");
_Static_assert(sizeof(_Atomic uint32_t) == 4, "lock-free 32-bit flags");

typedef enum {
    RING_FULL = 0,        /* nothing written: backpressure */
    RING_PUSHED = 1,      /* published; the consumer is awake */
    RING_PUSHED_WAKE = 2, /* published; the consumer was sleeping: ring its doorbell */
} ring_push_result;

typedef enum {
    RING_OK = 0,
    RING_ERROR_MAGIC = 1,
    RING_ERROR_VERSION = 2,
    RING_ERROR_CAPACITY = 3,
    RING_ERROR_SIZE = 4,
    RING_ERROR_CORRUPT = 5,
} ring_status;

/* Bytes a region needs for a ring of `capacity` data bytes. */
uint64_t ring_region_bytes(uint64_t capacity);

/* Largest payload a ring of `capacity` may allow: capacity / 4, so that any record fits an
 * empty ring even after a wrap. */
uint64_t ring_frame_bytes_max(uint64_t capacity);

/* Writes a fresh header (empty ring) into `memory`; capacity a power of two, records of at most
 * `frame_bytes_max` payload bytes (1 .. ring_frame_bytes_max(capacity)). */
void ring_init(void *memory, uint64_t region_bytes, uint64_t capacity, uint64_t frame_bytes_max);

/* Validates the header of an existing ring in a region of `region_bytes`. */
ring_status ring_check(const void *memory, uint64_t region_bytes);

/* Producer: appends one record and publishes it, or returns RING_FULL; never blocks, never
 * partially writes. Equivalent to ring_append at ring_producer_head, then ring_publish. */
ring_push_result ring_try_push(void *memory, uint32_t kind, const uint8_t *payload, uint32_t length);

/* Producer: the head where the next record goes (its own counter; no ordering needed). */
uint64_t ring_producer_head(const void *memory);

/* Producer: writes one record at `*head` and advances it, without publishing: returns 1, or 0
 * when it does not fit. A batch is written with several appends, then one ring_publish. */
int ring_append(void *memory, uint64_t *head, uint32_t kind, const uint8_t *payload, uint32_t length);

/* Producer: makes every record before `head` visible to the consumer (release), then reports
 * whether the consumer was sleeping (RING_PUSHED_WAKE: ring its doorbell). */
ring_push_result ring_publish(void *memory, uint64_t head);

/* Consumer: the next record at `*cursor` (advanced past it), or 0 when the ring is empty up to
 * the `head` loaded at `*head_seen` (refreshed with an acquire load once consumed). Returns 1 with
 * kind/payload/length set, 0 when empty, -1 when the ring is corrupt. Does not free anything. */
int ring_peek(const void *memory, uint64_t *cursor, uint64_t *head_seen, uint32_t *kind,
              const uint8_t **payload, uint32_t *length);

/* Consumer: the tail where unread records start (for ring_peek's cursor). */
uint64_t ring_consumer_cursor(const void *memory);

/* Consumer: frees every record before `cursor`; returns 1 when the producer waits for the space
 * just freed (ring its doorbell), else 0. */
int ring_commit(void *memory, uint64_t cursor, uint64_t head_seen);

/* Consumer: announces it will sleep. Returns 1 when the ring is still empty (sleep; the producer
 * will ring), 0 when a record arrived meanwhile (the flag is cleared again; keep reading). */
int ring_reader_sleep(void *memory);

/* Producer: announces it waits for `record_payload_bytes` of space. Returns 1 when the ring is
 * still too full (wait for the doorbell), 0 when the space is there already (flag cleared). */
int ring_writer_wait(void *memory, uint32_t payload_bytes);

/* Snapshot of both counters (acquire loads), for fill levels and tests. */
void ring_counters(const void *memory, uint64_t *head, uint64_t *tail);

#endif
