/*
 * common/ring.c — SPSC word ring between a thread's SIGPROF handler and the
 * writer thread (see ring.h for the contract and the record layout).
 */
#include "common/ring.h"

#include <stddef.h>
#include <sys/mman.h>

#define RING_PAGE 4096u
#define PAGE_WORDS (RING_PAGE / sizeof(uint64_t))
/* Consumed words given back at once, at most an eighth of the ring: one
 * madvise (and TLB shootdown) per 256 KiB rather than per drain, for an
 * eighth of the ring held back from the producer at most. */
#define RELEASE_BATCH_WORDS (64 * PAGE_WORDS)

_Static_assert(sizeof(struct flamme_ring) <= RING_PAGE, "ring header fits its page");

struct flamme_ring *flamme_ring_new(uint64_t words)
{
    uint64_t cap = 1024; /* a multiple of PAGE_WORDS */
    while (cap < words)
        cap <<= 1;
    size_t bytes = RING_PAGE + cap * sizeof(uint64_t);
    void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED)
        return NULL;
    struct flamme_ring *r = m;
    atomic_init(&r->head, 0);
    atomic_init(&r->tail, 0);
    r->mask = cap - 1;
    r->buf = (uint64_t *)((char *)m + RING_PAGE);
    r->reserved_pos = 0;
    r->read_pos = 0;
    r->keep_pages = 0;
    return r;
}

void flamme_ring_free(struct flamme_ring *r)
{
    if (r)
        munmap(r, RING_PAGE + (r->mask + 1) * sizeof(uint64_t));
}

void flamme_ring_reset(struct flamme_ring *r)
{
    atomic_store_explicit(&r->head, 0, memory_order_relaxed);
    atomic_store_explicit(&r->tail, 0, memory_order_relaxed);
    r->reserved_pos = 0;
    r->read_pos = 0;
    r->keep_pages = 0;
}

uint64_t *flamme_ring_reserve_sigsafe(struct flamme_ring *r, uint64_t n)
{
    uint64_t cap = r->mask + 1;
    if (n == 0 || n > cap / 2)
        return NULL;
    uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
    /* Pairs with the consumer's release store of tail in flamme_ring_drain:
     * words below tail are no longer read and may be overwritten. */
    uint64_t tail = atomic_load_explicit(&r->tail, memory_order_acquire);
    uint64_t free_words = cap - (head - tail);
    uint64_t idx = head & r->mask;
    uint64_t to_end = cap - idx;
    if (n > to_end) {
        /* Record would straddle the end: pad the rest and start at 0. */
        if (free_words < to_end + n)
            return NULL;
        r->buf[idx] = flamme_ring_header(to_end, FLAMME_RING_PAD, 0);
        head += to_end;
        /* Pairs with the consumer's acquire load of head: the pad header is
         * visible before the new head. */
        atomic_store_explicit(&r->head, head, memory_order_release);
        idx = 0;
    } else if (free_words < n) {
        return NULL;
    }
    r->reserved_pos = head;
    return &r->buf[idx];
}

void flamme_ring_commit_sigsafe(struct flamme_ring *r, uint64_t used)
{
    /* Pairs with the consumer's acquire load of head: the record's words are
     * visible before the head that covers them. */
    atomic_store_explicit(&r->head, r->reserved_pos + used, memory_order_release);
}

/* Gives the buffer pages of positions [from, to) back to the kernel (both
 * page-aligned positions). Called before `to` is published as the tail, so
 * the producer cannot be writing there: it may only reach from + capacity. */
static void release_pages(struct flamme_ring *r, uint64_t from, uint64_t to)
{
    uint64_t cap = r->mask + 1;
    while (from < to) {
        uint64_t idx = from & r->mask;
        uint64_t n = to - from < cap - idx ? to - from : cap - idx;
        madvise(&r->buf[idx], n * sizeof(uint64_t), MADV_DONTNEED);
        from += n;
    }
}

uint64_t flamme_ring_drain(struct flamme_ring *r,
                           void (*fn)(void *ctx, const uint64_t *rec, uint64_t nwords), void *ctx)
{
    /* Pairs with the producer's release stores of head. */
    uint64_t head = atomic_load_explicit(&r->head, memory_order_acquire);
    uint64_t pos = r->read_pos;
    uint64_t count = 0;
    while (pos < head) {
        const uint64_t *rec = &r->buf[pos & r->mask];
        uint64_t nwords = rec[0] & 0xffffffffu;
        uint32_t kind = (uint32_t)(rec[0] >> 32) & 0xff;
        if (nwords == 0 || nwords > head - pos)
            break; /* cannot happen with a well-behaved producer; stop rather than loop */
        if (kind != FLAMME_RING_PAD) {
            fn(ctx, rec, nwords);
            count++;
        }
        pos += nwords;
    }
    r->read_pos = pos;
    uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
    uint64_t release = pos & ~(uint64_t)(PAGE_WORDS - 1);
    uint64_t batch = (r->mask + 1) / 8;
    if (batch > RELEASE_BATCH_WORDS)
        batch = RELEASE_BATCH_WORDS;
    if (batch < PAGE_WORDS)
        batch = PAGE_WORDS;
    if (release > tail && (r->keep_pages || release - tail >= batch)) {
        if (!r->keep_pages)
            release_pages(r, tail, release);
        /* Pairs with the producer's acquire load of tail: everything below
         * it is read (and its pages are given back unless kept); it may be
         * overwritten. */
        atomic_store_explicit(&r->tail, release, memory_order_release);
    }
    return count;
}
