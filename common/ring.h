/*
 * writer/ring.h — a per-thread single-producer / single-consumer ring of
 * 64-bit words carrying variable-length sample records.
 *
 * Producer: the SIGPROF handler of the ring's own thread (never nested: the
 * handler runs with SIGPROF blocked), or that thread in normal context with
 * the handler held off (agent/alloc.c's ring_busy). Consumer: the writer thread.
 * Memory: one mmap per ring, its buffer page-aligned. Pages are touched only
 * as the ring fills, and the consumer gives consumed pages back to the kernel
 * (MADV_DONTNEED), so a thread's ring stays resident only as far as samples
 * are in flight, however long the thread lives.
 *
 * Record layout (words): [0] header = nwords | (kind << 32) | (flags << 40)
 * where nwords counts the header; kind FLAMME_RING_PAD marks skipped space
 * at the end of the buffer.
 */
#ifndef FLAMME_WRITER_RING_H
#define FLAMME_WRITER_RING_H
#include <stdatomic.h>
#include <stdint.h>

#define FLAMME_RING_PAD 0u
#define FLAMME_RING_SAMPLE 1u
#define FLAMME_RING_ALLOC 2u       /* agent/alloc.h */
#define FLAMME_RING_ALLOC_EVENT 3u /* agent/alloc.h */

struct flamme_ring {
    /* Written by the producer only; read by the consumer (acquire). */
    _Atomic uint64_t head;
    char pad1[56];
    /* Written by the consumer only; read by the producer (acquire): words
     * below it may be overwritten. Kept on a page boundary, at or behind the
     * consumer's read position, so that the pages between two releases can
     * be given back before the producer may reuse them. */
    _Atomic uint64_t tail;
    char pad2[56];
    uint64_t mask;   /* capacity in words - 1 (capacity is a power of 2) */
    uint64_t *buf;   /* page-aligned */
    uint64_t reserved_pos; /* producer-private: position of the open reservation */
    uint64_t read_pos;     /* consumer-private: next record to read */
};

/* Maps a ring able to hold `words` words (rounded up to a power of two).
 * Any thread, not a handler. Returns NULL on failure. */
struct flamme_ring *flamme_ring_new(uint64_t words);
void flamme_ring_free(struct flamme_ring *r);

/* Reserves n contiguous words (n <= capacity/2). Returns a pointer to them, or
 * NULL when the ring lacks room (the caller counts a lost sample).
 * async-signal-safe: yes. */
uint64_t *flamme_ring_reserve_sigsafe(struct flamme_ring *r, uint64_t n);

/* Publishes the first `used` words of the last reservation (used >= 1 and
 * no more than reserved; word 0 must hold the record header).
 * async-signal-safe: yes. */
void flamme_ring_commit_sigsafe(struct flamme_ring *r, uint64_t used);

static inline uint64_t flamme_ring_header(uint64_t nwords, uint32_t kind, uint32_t flags)
{
    return nwords | ((uint64_t)(kind & 0xff) << 32) | ((uint64_t)(flags & 0xffffff) << 40);
}

/* Consumer side (writer thread). Calls fn for every committed record, oldest
 * first, with a pointer to its words (contiguous) and releases them.
 * Returns the number of records consumed. */
uint64_t flamme_ring_drain(struct flamme_ring *r,
                           void (*fn)(void *ctx, const uint64_t *rec, uint64_t nwords), void *ctx);

#endif
