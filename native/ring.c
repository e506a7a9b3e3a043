/* The SPSC ring of ring.h: plain C11, no allocation, no Python. */
#include "ring.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Noreturn void ring_assert_failed(const char *condition, const char *file, int line) {
    fprintf(stderr, "%s:%d: ring assertion failed: %s\n", file, line, condition);
    abort();
}

static inline ring_header *header_of(void *memory) { return (ring_header *)memory; }

static inline const ring_header *const_header_of(const void *memory) {
    return (const ring_header *)memory;
}

static inline uint8_t *data_of(void *memory) { return (uint8_t *)memory + RING_HEADER_BYTES; }

static inline const uint8_t *const_data_of(const void *memory) {
    return (const uint8_t *)memory + RING_HEADER_BYTES;
}

static inline uint64_t record_bytes(uint32_t length) {
    return RING_RECORD_HEADER_BYTES + (((uint64_t)length + 7u) & ~UINT64_C(7));
}

/* Bytes to skip before a record of `record` bytes can start at or after `head`. */
static inline uint64_t skip_bytes(uint64_t capacity, uint64_t head, uint64_t record) {
    const uint64_t offset = head & (capacity - 1u);
    return (capacity - offset < record) ? capacity - offset : 0u;
}

static inline void write_record_header(uint8_t *at, uint32_t length, uint32_t kind) {
    memcpy(at, &length, sizeof length);
    memcpy(at + sizeof length, &kind, sizeof kind);
}

static inline int is_power_of_two(uint64_t value) { return value != 0u && (value & (value - 1u)) == 0u; }

uint64_t ring_region_bytes(uint64_t capacity) { return RING_HEADER_BYTES + capacity; }

uint64_t ring_frame_bytes_max(uint64_t capacity) { return capacity / 4u; }

void ring_init(void *memory, uint64_t region_bytes, uint64_t capacity, uint64_t frame_bytes_max) {
    RING_ASSERT(memory != NULL);
    RING_ASSERT(is_power_of_two(capacity));
    RING_ASSERT(capacity >= RING_CAPACITY_MIN);
    RING_ASSERT(capacity <= RING_CAPACITY_MAX);
    RING_ASSERT(region_bytes >= ring_region_bytes(capacity));
    RING_ASSERT(frame_bytes_max >= 1u);
    RING_ASSERT(frame_bytes_max <= ring_frame_bytes_max(capacity));
    /* Only the header: the data region needs no initialisation (records carry their own length),
     * and leaving it untouched keeps the pages of a fresh shared-memory ring unallocated. */
    memset(memory, 0, RING_HEADER_BYTES);
    ring_header *h = header_of(memory);
    h->magic = RING_MAGIC;
    h->version = RING_VERSION;
    h->header_bytes = RING_HEADER_BYTES;
    h->capacity = capacity;
    h->frame_bytes_max = frame_bytes_max;
    h->producer_tail_cache = 0u;
    atomic_store_explicit(&h->head, 0u, memory_order_relaxed);
    atomic_store_explicit(&h->tail, 0u, memory_order_relaxed);
    atomic_store_explicit(&h->reader_sleeping, 0u, memory_order_relaxed);
    atomic_store_explicit(&h->writer_waiting, 0u, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
}

ring_status ring_check(const void *memory, uint64_t region_bytes) {
    RING_ASSERT(memory != NULL);
    if (region_bytes < RING_HEADER_BYTES) return RING_ERROR_SIZE;
    const ring_header *h = const_header_of(memory);
    if (h->magic != RING_MAGIC) return RING_ERROR_MAGIC;
    if (h->version != RING_VERSION || h->header_bytes != RING_HEADER_BYTES) return RING_ERROR_VERSION;
    if (!is_power_of_two(h->capacity) || h->capacity < RING_CAPACITY_MIN) return RING_ERROR_CAPACITY;
    if (h->capacity > RING_CAPACITY_MAX) return RING_ERROR_CAPACITY;
    if (h->frame_bytes_max == 0u || h->frame_bytes_max > ring_frame_bytes_max(h->capacity)) return RING_ERROR_CAPACITY;
    if (region_bytes < ring_region_bytes(h->capacity)) return RING_ERROR_SIZE;
    return RING_OK;
}

uint64_t ring_producer_head(const void *memory) {
    return atomic_load_explicit(&const_header_of(memory)->head, memory_order_relaxed);
}

int ring_append(void *memory, uint64_t *head, uint32_t kind, const uint8_t *payload, uint32_t length) {
    ring_header *h = header_of(memory);
    RING_ASSERT(head != NULL);
    RING_ASSERT(kind != RING_KIND_WRAP);
    RING_ASSERT(length <= h->frame_bytes_max);
    RING_ASSERT(payload != NULL || length == 0u);
    const uint64_t capacity = h->capacity;
    const uint64_t record = record_bytes(length);
    const uint64_t skip = skip_bytes(capacity, *head, record);
    const uint64_t need = skip + record;
    if (*head + need - h->producer_tail_cache > capacity) {
        h->producer_tail_cache = atomic_load_explicit(&h->tail, memory_order_acquire);
        if (*head + need - h->producer_tail_cache > capacity) return 0;
    }
    uint8_t *data = data_of(memory);
    uint64_t offset = *head & (capacity - 1u);
    if (skip != 0u) {
        write_record_header(data + offset, 0u, RING_KIND_WRAP);
        offset = 0u;
    }
    RING_ASSERT(offset + record <= capacity);
    write_record_header(data + offset, length, kind);
    if (length != 0u) memcpy(data + offset + RING_RECORD_HEADER_BYTES, payload, length);
    const uint64_t padding = record - RING_RECORD_HEADER_BYTES - length;
    memset(data + offset + RING_RECORD_HEADER_BYTES + length, 0, (size_t)padding);
    *head += need;
    return 1;
}

ring_push_result ring_publish(void *memory, uint64_t head) {
    ring_header *h = header_of(memory);
    RING_ASSERT(head - atomic_load_explicit(&h->head, memory_order_relaxed) <= h->capacity);
    atomic_store_explicit(&h->head, head, memory_order_release);
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&h->reader_sleeping, memory_order_relaxed) == 0u) return RING_PUSHED;
    if (atomic_exchange_explicit(&h->reader_sleeping, 0u, memory_order_acq_rel) == 0u) return RING_PUSHED;
    return RING_PUSHED_WAKE;
}

ring_push_result ring_try_push(void *memory, uint32_t kind, const uint8_t *payload, uint32_t length) {
    uint64_t head = ring_producer_head(memory);
    if (!ring_append(memory, &head, kind, payload, length)) return RING_FULL;
    return ring_publish(memory, head);
}

uint64_t ring_consumer_cursor(const void *memory) {
    return atomic_load_explicit(&const_header_of(memory)->tail, memory_order_relaxed);
}

int ring_peek(const void *memory, uint64_t *cursor, uint64_t *head_seen, uint32_t *kind,
              const uint8_t **payload, uint32_t *length) {
    RING_ASSERT(cursor != NULL && head_seen != NULL);
    RING_ASSERT(kind != NULL && payload != NULL && length != NULL);
    const ring_header *h = const_header_of(memory);
    const uint64_t capacity = h->capacity;
    const uint8_t *data = const_data_of(memory);
    for (int step = 0; step < 2; step++) { /* at most one wrap marker, then a record */
        if (*cursor == *head_seen) {
            *head_seen = atomic_load_explicit(&h->head, memory_order_acquire);
            if (*cursor == *head_seen) return 0;
        }
        if (*head_seen - *cursor > capacity) return -1;
        const uint64_t offset = *cursor & (capacity - 1u);
        uint32_t record_length;
        uint32_t record_kind;
        memcpy(&record_length, data + offset, sizeof record_length);
        memcpy(&record_kind, data + offset + sizeof record_length, sizeof record_kind);
        if (record_kind == RING_KIND_WRAP) {
            if (record_length != 0u || offset == 0u || step != 0) return -1;
            if (*head_seen - *cursor < capacity - offset) return -1;
            *cursor += capacity - offset;
            continue;
        }
        if (record_length > h->frame_bytes_max) return -1;
        const uint64_t record = record_bytes(record_length);
        if (offset + record > capacity || *head_seen - *cursor < record) return -1;
        *kind = record_kind;
        *payload = data + offset + RING_RECORD_HEADER_BYTES;
        *length = record_length;
        *cursor += record;
        return 1;
    }
    return -1;
}

int ring_commit(void *memory, uint64_t cursor, uint64_t head_seen) {
    ring_header *h = header_of(memory);
    const uint64_t capacity = h->capacity;
    RING_ASSERT(head_seen - cursor <= capacity);
    atomic_store_explicit(&h->tail, cursor, memory_order_release);
    atomic_thread_fence(memory_order_seq_cst);
    const uint32_t need = atomic_load_explicit(&h->writer_waiting, memory_order_relaxed);
    if (need == 0u) return 0;
    /* head_seen <= head, so this may overestimate the free space: the producer re-checks. */
    if (capacity - (head_seen - cursor) < need) return 0;
    return atomic_exchange_explicit(&h->writer_waiting, 0u, memory_order_acq_rel) != 0u;
}

int ring_reader_sleep(void *memory) {
    ring_header *h = header_of(memory);
    atomic_store_explicit(&h->reader_sleeping, 1u, memory_order_seq_cst);
    atomic_thread_fence(memory_order_seq_cst);
    const uint64_t head = atomic_load_explicit(&h->head, memory_order_acquire);
    const uint64_t tail = atomic_load_explicit(&h->tail, memory_order_relaxed);
    if (head == tail) return 1;
    atomic_store_explicit(&h->reader_sleeping, 0u, memory_order_relaxed);
    return 0;
}

int ring_writer_wait(void *memory, uint32_t payload_bytes) {
    ring_header *h = header_of(memory);
    const uint64_t capacity = h->capacity;
    RING_ASSERT(payload_bytes <= h->frame_bytes_max);
    const uint64_t head = atomic_load_explicit(&h->head, memory_order_relaxed);
    const uint64_t record = record_bytes(payload_bytes);
    const uint64_t need = skip_bytes(capacity, head, record) + record;
    RING_ASSERT(need <= capacity);
    atomic_store_explicit(&h->writer_waiting, (uint32_t)need, memory_order_seq_cst);
    atomic_thread_fence(memory_order_seq_cst);
    const uint64_t tail = atomic_load_explicit(&h->tail, memory_order_acquire);
    h->producer_tail_cache = tail;
    if (head + need - tail > capacity) return 1;
    atomic_store_explicit(&h->writer_waiting, 0u, memory_order_relaxed);
    return 0;
}

void ring_counters(const void *memory, uint64_t *head, uint64_t *tail) {
    RING_ASSERT(head != NULL && tail != NULL);
    const ring_header *h = const_header_of(memory);
    *tail = atomic_load_explicit(&h->tail, memory_order_acquire);
    *head = atomic_load_explicit(&h->head, memory_order_acquire);
}
