/*
 * tests/unit/test_ring.c — the per-thread sample ring: record framing,
 * wrap-around padding, full-ring refusal, and a concurrent stress where a
 * producer thread (standing in for the signal handler) pushes variable-length
 * records while the consumer drains, checking every word arrives once, in
 * order, intact; and a ring reset for its slot's next thread.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "check.h"
#include "common/ring.h"

struct seen {
    uint64_t next_seq; /* sequence number expected next */
    uint64_t records, bad;
};

/* Record = header, seq, then (n-2) words each equal to seq ^ index. */
static void on_rec(void *ctx, const uint64_t *rec, uint64_t nwords)
{
    struct seen *s = ctx;
    s->records++;
    if (nwords < 2 || rec[1] != s->next_seq) {
        s->bad++;
        s->next_seq = nwords >= 2 ? rec[1] + 1 : s->next_seq + 1;
        return;
    }
    for (uint64_t i = 2; i < nwords; i++)
        if (rec[i] != (rec[1] ^ i))
            s->bad++;
    s->next_seq++;
}

static int push(struct flamme_ring *r, uint64_t seq, uint64_t n)
{
    uint64_t *w = flamme_ring_reserve_sigsafe(r, n + 16);
    if (!w)
        return 0;
    w[0] = flamme_ring_header(n, FLAMME_RING_SAMPLE, 0);
    w[1] = seq;
    for (uint64_t i = 2; i < n; i++)
        w[i] = seq ^ i;
    flamme_ring_commit_sigsafe(r, n);
    return 1;
}

/* Pushes 600 records of 2-151 words into r (sizes chosen, by a and b, so
 * that records straddle the end of a 1024-word ring many times), draining
 * into s after each three; returns how many went in. */
static uint64_t push_wrapping(struct flamme_ring *r, struct seen *s, int a, int b)
{
    uint64_t seq = 0;
    for (int round = 0; round < 200; round++) {
        for (int k = 0; k < 3; k++)
            if (push(r, seq, 2 + (uint64_t)((round * a + k * b) % 150)))
                seq++;
        flamme_ring_drain(r, on_rec, s);
    }
    return seq;
}

TEST(single_thread_order_and_wrap)
{
    struct flamme_ring *r = flamme_ring_new(1024);
    CHECK(r != NULL);
    struct seen s = {0, 0, 0};
    uint64_t seq = push_wrapping(r, &s, 7, 13);
    CHECK(s.records == seq);
    CHECK(s.bad == 0);
    flamme_ring_free(r);
}

TEST(full_ring_refuses_then_recovers)
{
    struct flamme_ring *r = flamme_ring_new(1024);
    uint64_t seq = 0;
    while (push(r, seq, 100))
        seq++;
    CHECK(seq >= 5 && seq <= 10); /* 1024 words hold at most 10 records of 100 */
    struct seen s = {0, 0, 0};
    flamme_ring_drain(r, on_rec, &s);
    CHECK(s.records == seq);
    CHECK(push(r, seq, 100) == 1);
    /* Oversized reservations are refused, never overflow the buffer. */
    CHECK(flamme_ring_reserve_sigsafe(r, 4096) == NULL);
    flamme_ring_free(r);
}

struct stress {
    struct flamme_ring *r;
    uint64_t total;
    _Atomic uint64_t pushed, refused;
    _Atomic int done;
};

static void *producer(void *p)
{
    struct stress *st = p;
    uint64_t x = 88172645463325252ull;
    uint64_t seq = 0;
    for (uint64_t i = 0; i < st->total; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        /* Like the handler, a full ring refuses; unlike it, retry so that
         * every record must cross (and the full path is exercised). */
        while (!push(st->r, seq, 2 + x % 300)) {
            atomic_fetch_add(&st->refused, 1);
            sched_yield();
        }
        seq++;
    }
    atomic_store(&st->pushed, seq);
    atomic_store(&st->done, 1);
    return NULL;
}

TEST(concurrent_stress)
{
    struct stress st = {.r = flamme_ring_new(8192), .total = 300000};
    struct seen s = {0, 0, 0};
    pthread_t t;
    pthread_create(&t, NULL, producer, &st);
    while (!atomic_load(&st.done))
        flamme_ring_drain(st.r, on_rec, &s);
    pthread_join(t, NULL);
    flamme_ring_drain(st.r, on_rec, &s);
    printf("  stress: %llu records through, %llu refused while full\n",
           (unsigned long long)s.records, (unsigned long long)atomic_load(&st.refused));
    CHECK(atomic_load(&st.pushed) == st.total);
    CHECK(s.records == st.total);
    CHECK(s.bad == 0);
    flamme_ring_free(st.r);
}

/* Consumed pages go back to the kernel, 64 at a time: after many records
 * through a 4 MiB ring, only the pages still in flight and those of a batch
 * not yet given back are resident (mincore); with keep_pages, every page
 * the ring went through. */
TEST(consumed_pages_released)
{
    struct flamme_ring *r = flamme_ring_new(512 * 1024); /* 4 MiB of words */
    CHECK(r != NULL);
    if (!r)
        return;
    struct seen s = {0, 0, 0};
    uint64_t seq = 0;
    for (int i = 0; i < 4000; i++) { /* ~3 times around the ring */
        CHECK(push(r, seq++, 300));
        if (i % 10 == 9)
            flamme_ring_drain(r, on_rec, &s);
    }
    flamme_ring_drain(r, on_rec, &s);
    CHECK(s.records == seq && s.bad == 0);
    size_t pages = (r->mask + 1) * 8 / 4096, resident = 0;
    unsigned char *vec = malloc(pages);
    CHECK(vec && mincore(r->buf, pages * 4096, vec) == 0);
    for (size_t i = 0; vec && i < pages; i++)
        resident += vec[i] & 1;
    printf("  resident after draining: %zu of %zu pages\n", resident, pages);
    CHECK(resident <= 65); /* a batch, and the page holding the read position */
    /* Kept: three more times around, and nothing is given back. */
    r->keep_pages = 1;
    for (int i = 0; i < 12000; i++) {
        CHECK(push(r, seq++, 300));
        if (i % 10 == 9)
            flamme_ring_drain(r, on_rec, &s);
    }
    flamme_ring_drain(r, on_rec, &s);
    CHECK(s.records == seq && s.bad == 0);
    resident = 0;
    CHECK(vec && mincore(r->buf, pages * 4096, vec) == 0);
    for (size_t i = 0; vec && i < pages; i++)
        resident += vec[i] & 1;
    printf("  kept: %zu of %zu pages resident\n", resident, pages);
    CHECK(resident == pages);
    free(vec);
    flamme_ring_free(r);
}

/* A slot's ring serves its next thread (flamme_slot_release): once
 * drained and reset it reads as empty (nothing of the last thread's comes
 * out again), no longer keeps its pages, and carries a new sequence in
 * order through many wraps. */
TEST(reset_ring_serves_a_next_thread)
{
    struct flamme_ring *r = flamme_ring_new(1024);
    CHECK(r != NULL);
    if (!r)
        return;
    struct seen s = {0, 0, 0};
    uint64_t seq = 0;
    for (int i = 0; i < 25; i++) { /* round the ring 2.4 times, ending mid-way */
        CHECK(push(r, seq++, 100));
        flamme_ring_drain(r, on_rec, &s);
    }
    CHECK(s.records == seq && s.bad == 0);
    CHECK(r->read_pos != 0);
    r->keep_pages = 1;
    flamme_ring_reset(r);
    CHECK(r->keep_pages == 0);
    struct seen s2 = {0, 0, 0};
    flamme_ring_drain(r, on_rec, &s2);
    CHECK(s2.records == 0);
    /* The next thread: its own sequence from 0, wrapping as before. */
    uint64_t seq2 = push_wrapping(r, &s2, 11, 5);
    CHECK(seq2 > 300 && s2.records == seq2);
    CHECK(s2.bad == 0);
    flamme_ring_free(r);
}

int main(void)
{
    RUN(single_thread_order_and_wrap);
    RUN(full_ring_refuses_then_recovers);
    RUN(concurrent_stress);
    RUN(consumed_pages_released);
    RUN(reset_ring_serves_a_next_thread);
    return CHECK_DONE();
}
