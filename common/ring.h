/*
 * common/ring.h — a per-thread single-producer / single-consumer ring of
 * 64-bit words carrying variable-length sample records.
 *
 * Producer: the SIGPROF handler of the ring's own thread (never nested: the
 * handler runs with SIGPROF blocked), or that thread in normal context with
 * the handler held off (agent/alloc.c's ring_busy). Consumer: the writer thread.
 * Memory: one mmap per ring, its buffer page-aligned. Pages are touched only
 * as the ring fills, and the consumer gives consumed pages back to the kernel
 * (MADV_DONTNEED) a batch at a time, so a thread's ring stays resident only
 * as far as samples are in flight (plus one batch), however long the thread
 * lives; unless keep_pages says the ring is busy enough to keep them.
 * A ring outlives its thread: the thread's slot keeps it, emptied
 * (flamme_ring_reset), for its next thread, with what was resident then.
 *
 * Record layout (words): [0] header = nwords | (kind << 32) | (flags << 40)
 * where nwords counts the header; kind FLAMME_RING_PAD marks skipped space
 * at the end of the buffer. The records of each kind are laid out below,
 * once, with the functions that write them (agent/handler.c, agent/alloc.c)
 * and read them (writer/writer.c).
 *
 * In common/ rather than agent/ or writer/: the agent produces into the
 * ring and the writer consumes it, and each side needs the same layout.
 */
#ifndef FLAMME_COMMON_RING_H
#define FLAMME_COMMON_RING_H
#include <stdatomic.h>
#include <stdint.h>

#define FLAMME_RING_PAD 0u
#define FLAMME_RING_SAMPLE 1u
#define FLAMME_RING_ALLOC 2u       /* agent/alloc.h */
#define FLAMME_RING_ALLOC_EVENT 3u /* agent/alloc.h */

/* Ring words of each record before its frames. */
#define FLAMME_SAMPLE_HDR_WORDS 3
#define FLAMME_ALLOC_HDR_WORDS 6
#define FLAMME_ALLOC_EVENT_WORDS 3

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
    /* Consumer-private: consumed pages stay mapped. The writer sets it for
     * a ring that comes round within seconds: its pages, given back, would
     * be faulted in again by the handler at once, and each give-back is a
     * TLB shootdown (an IPI to the CPUs running the program). */
    int keep_pages;
};

/* Maps a ring able to hold `words` words (rounded up to a power of two).
 * Any thread, not a handler. Returns NULL on failure. */
struct flamme_ring *flamme_ring_new(uint64_t words);
void flamme_ring_free(struct flamme_ring *r);
/* Empties r for a next producer and consumer, once both are gone (its
 * thread ended and it was drained): its pages stay mapped, and those
 * still resident are written over by the next thread. Any thread, not a
 * handler. */
void flamme_ring_reset(struct flamme_ring *r);

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

static inline uint32_t flamme_ring_kind(uint64_t header)
{
    return (uint32_t)(header >> 32) & 0xff;
}

static inline uint32_t flamme_ring_flags(uint64_t header)
{
    return (uint32_t)(header >> 40);
}

/* SAMPLE (the handler): flags FLAMME_SAMPLE_* (common/profile.h);
 *   [1] time (CLOCK_MONOTONIC ns)  [2] weight | domain << 32
 *   [3..] frames: the interrupted pc, then return addresses (leaf first). */
struct flamme_ring_sample {
    uint64_t time;
    uint32_t flags, weight;
    int32_t domain;
    const uint64_t *frames;
    uint64_t n;
};

/* Fills the header words of a sample whose n frames are already at
 * rec + FLAMME_SAMPLE_HDR_WORDS. async-signal-safe: yes. */
static inline void flamme_ring_sample_put(uint64_t *rec, uint64_t n, uint32_t flags, uint64_t time,
                                          uint32_t weight, int32_t domain)
{
    rec[0] = flamme_ring_header(n + FLAMME_SAMPLE_HDR_WORDS, FLAMME_RING_SAMPLE, flags);
    rec[1] = time;
    rec[2] = (uint64_t)weight | ((uint64_t)(uint32_t)domain << 32);
}

/* Decodes a SAMPLE record of nwords words. Returns 0, or -1 if too short. */
static inline int flamme_ring_sample_get(const uint64_t *rec, uint64_t nwords,
                                         struct flamme_ring_sample *s)
{
    if (nwords < FLAMME_SAMPLE_HDR_WORDS)
        return -1;
    s->flags = flamme_ring_flags(rec[0]);
    s->time = rec[1];
    s->weight = (uint32_t)rec[2];
    s->domain = (int32_t)(uint32_t)(rec[2] >> 32);
    s->frames = rec + FLAMME_SAMPLE_HDR_WORDS;
    s->n = nwords - FLAMME_SAMPLE_HDR_WORDS;
    return 0;
}

/* ALLOC (agent/alloc.c, a Memprof callback): flags heap | source << 8 |
 * truncated << 16 (2 bits: 1 cut at the depth, 2 lost by the runtime);
 * [1] time  [2] n_samples | domain << 32  [3] size in
 * words  [4] id  [5] rate (the double's bits)  [6..] frames (leaf first).
 * ALLOC_EVENT: flags the event;  [1] time  [2] the block's id. */
/* truncated, here and in agent/alloc.h's flamme_alloc_in: the callstack
 * was cut at the depth asked; or the runtime had lost it (no frames;
 * ocaml_stubs/flamme_stubs.c says when). An agent older than LOST takes it
 * for CUT. */
#define FLAMME_ALLOC_CUT 1
#define FLAMME_ALLOC_LOST 2

struct flamme_ring_alloc {
    uint64_t time, size_words, id;
    uint32_t n_samples;
    int32_t domain;
    uint8_t heap, source;
    int truncated; /* 0, FLAMME_ALLOC_CUT or FLAMME_ALLOC_LOST */
    double rate;
    const uint64_t *frames;
    uint64_t n;
};

/* Writes the header words of an ALLOC whose n frames are already at
 * rec + FLAMME_ALLOC_HDR_WORDS (a->frames and a->n are not read). */
static inline void flamme_ring_alloc_put(uint64_t *rec, uint64_t n,
                                         const struct flamme_ring_alloc *a)
{
    uint32_t flags = a->heap | (uint32_t)a->source << 8 | ((uint32_t)a->truncated & 3u) << 16;
    rec[0] = flamme_ring_header(n + FLAMME_ALLOC_HDR_WORDS, FLAMME_RING_ALLOC, flags);
    rec[1] = a->time;
    rec[2] = (uint64_t)a->n_samples | (uint64_t)(uint32_t)a->domain << 32;
    rec[3] = a->size_words;
    rec[4] = a->id;
    __builtin_memcpy(&rec[5], &a->rate, sizeof a->rate);
}

/* Decodes an ALLOC record. Returns 0, or -1 if too short. */
static inline int flamme_ring_alloc_get(const uint64_t *rec, uint64_t nwords,
                                        struct flamme_ring_alloc *a)
{
    if (nwords < FLAMME_ALLOC_HDR_WORDS)
        return -1;
    uint32_t flags = flamme_ring_flags(rec[0]);
    a->heap = (uint8_t)flags;
    a->source = (uint8_t)(flags >> 8);
    a->truncated = (flags >> 16) & 3;
    a->time = rec[1];
    a->n_samples = (uint32_t)rec[2];
    a->domain = (int32_t)(uint32_t)(rec[2] >> 32);
    a->size_words = rec[3];
    a->id = rec[4];
    __builtin_memcpy(&a->rate, &rec[5], sizeof a->rate);
    a->frames = rec + FLAMME_ALLOC_HDR_WORDS;
    a->n = nwords - FLAMME_ALLOC_HDR_WORDS;
    return 0;
}

static inline void flamme_ring_alloc_event_put(uint64_t *rec, uint64_t time, uint64_t id,
                                               unsigned event)
{
    rec[0] = flamme_ring_header(FLAMME_ALLOC_EVENT_WORDS, FLAMME_RING_ALLOC_EVENT, event & 0xff);
    rec[1] = time;
    rec[2] = id;
}

/* Decodes an ALLOC_EVENT record. Returns 0, or -1 if too short. */
static inline int flamme_ring_alloc_event_get(const uint64_t *rec, uint64_t nwords, uint64_t *time,
                                              uint64_t *id, uint8_t *event)
{
    if (nwords < FLAMME_ALLOC_EVENT_WORDS)
        return -1;
    *time = rec[1];
    *id = rec[2];
    *event = (uint8_t)flamme_ring_flags(rec[0]);
    return 0;
}

/* Consumer side (writer thread). Calls fn for every committed record, oldest
 * first, with a pointer to its words (contiguous) and releases them.
 * Returns the number of records consumed. */
uint64_t flamme_ring_drain(struct flamme_ring *r,
                           void (*fn)(void *ctx, const uint64_t *rec, uint64_t nwords), void *ctx);

#endif
