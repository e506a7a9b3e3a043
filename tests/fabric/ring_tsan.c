/*
 * Two threads over one ring under ThreadSanitizer (tests/fabric/test_ring_tsan.py builds and runs
 * it): a producer pushes COUNT frames of varied length through a 4 KiB ring, the consumer checks
 * every kind, length and byte. Prints "ok N" and exits 0, or names the first bad frame.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ring.h"
#define CAP 4096u
#ifndef COUNT
#define COUNT 5000u
#endif
static _Alignas(64) uint8_t region[RING_HEADER_BYTES + CAP];
static void *producer(void *arg) {
    (void)arg;
    uint8_t payload[1024];
    for (uint32_t i = 0; i < COUNT; i++) {
        uint32_t len = (i * 7u) % 1024u;
        memset(payload, (int)(i & 0xffu), len);
        while (ring_try_push(region, 1u + (i % 5u), payload, len) == RING_FULL) sched_yield();
    }
    return NULL;
}
int main(void) {
    ring_init(region, sizeof region, CAP, CAP / 4u);
    pthread_t thread;
    pthread_create(&thread, NULL, producer, NULL);
    uint32_t seen = 0;
    while (seen < COUNT) {
        uint64_t cursor = ring_consumer_cursor(region), head = cursor;
        uint32_t kind, length; const uint8_t *payload;
        int found = ring_peek(region, &cursor, &head, &kind, &payload, &length);
        if (found < 0) { printf("corrupt at %u\n", seen); return 1; }
        if (found == 0) { sched_yield(); continue; }
        if (kind != 1u + (seen % 5u) || length != (seen * 7u) % 1024u) { printf("bad frame %u\n", seen); return 1; }
        for (uint32_t j = 0; j < length; j++) if (payload[j] != (uint8_t)(seen & 0xffu)) { printf("bad byte %u\n", seen); return 1; }
        ring_commit(region, cursor, head);
        seen++;
    }
    pthread_join(thread, NULL);
    printf("ok %u\n", seen);
    return 0;
}
