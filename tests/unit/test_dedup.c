/*
 * tests/unit/test_dedup.c — the writer's interning tables (writer/dedup.c):
 * ids are dense from 0 in order of first sight, equal inputs get equal ids,
 * different inputs different ids, at the scale of a long profile.
 */
#include <stdint.h>
#include <stdlib.h>

#include "tests/unit/check.h"
#include "writer/dedup.h"

static uint64_t rng_state = 0x1234567887654321ull;

static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

TEST(same_sequence_same_id)
{
    flamme_dedup *d = flamme_dedup_new();
    CHECK(d != NULL);
    uint32_t a[] = { 3, 1, 4, 1, 5 }, b[] = { 3, 1, 4, 1, 5 };
    int nw;
    uint32_t x = flamme_dedup_stack(d, a, 5, &nw);
    CHECK(x == 0 && nw == 1);
    uint32_t y = flamme_dedup_stack(d, b, 5, &nw);
    CHECK(y == x && nw == 0);
    flamme_dedup_free(d);
}

TEST(different_and_prefix_sequences_distinct)
{
    flamme_dedup *d = flamme_dedup_new();
    uint32_t s[] = { 7, 8, 9, 0, 0 };
    uint32_t swapped[] = { 8, 7, 9 };
    int nw;
    uint32_t ids[6];
    for (uint32_t n = 0; n <= 5; n++) { /* every prefix, including the empty stack */
        ids[n] = flamme_dedup_stack(d, s, n, &nw);
        CHECK(nw == 1);
        CHECK(ids[n] == n); /* dense, in order of first sight */
    }
    uint32_t z = flamme_dedup_stack(d, swapped, 3, &nw);
    CHECK(nw == 1 && z == 6);
    for (uint32_t n = 0; n <= 5; n++) {
        CHECK(flamme_dedup_stack(d, s, n, &nw) == ids[n]);
        CHECK(nw == 0);
    }
    flamme_dedup_free(d);
}

TEST(empty_stack)
{
    flamme_dedup *d = flamme_dedup_new();
    int nw;
    CHECK(flamme_dedup_stack(d, NULL, 0, &nw) == 0 && nw == 1);
    uint32_t one = 0;
    CHECK(flamme_dedup_stack(d, &one, 1, &nw) == 1 && nw == 1);
    CHECK(flamme_dedup_stack(d, &one, 0, &nw) == 0 && nw == 0);
    flamme_dedup_free(d);
}

TEST(frames_dense_and_stable)
{
    enum { N = 1000000 };
    flamme_dedup *d = flamme_dedup_new();
    uint64_t *addr_of = malloc(N * sizeof *addr_of); /* id -> address */
    uint64_t *in = malloc(N * sizeof *in);
    uint32_t *got = malloc(N * sizeof *got);
    uint32_t next = 0;
    int bad = 0;
    for (uint32_t i = 0; i < N; i++) {
        /* Mix of repeats (small range) and fresh, adjacent and zero addresses. */
        uint64_t r = rnd();
        in[i] = (r & 1) ? 0x400000 + (r >> 1) % 50000 : r >> 8;
        if (i % 1000 == 0)
            in[i] = 0;
        int nw;
        uint32_t id = flamme_dedup_frame(d, in[i], &nw);
        got[i] = id;
        if (nw) {
            if (id != next)
                bad++;
            else
                addr_of[next++] = in[i];
        } else if (id >= next || addr_of[id] != in[i]) {
            bad++;
        }
    }
    CHECK(bad == 0);
    CHECK(next > 500000 && next < N); /* both repeats and fresh ones happened */
    bad = 0;
    for (uint32_t i = 0; i < N; i++) {
        int nw;
        if (flamme_dedup_frame(d, in[i], &nw) != got[i] || nw)
            bad++;
    }
    CHECK(bad == 0);
    free(addr_of);
    free(in);
    free(got);
    flamme_dedup_free(d);
}

/* A stack as the test keeps it: where its ids are in a pool. */
struct seq {
    uint32_t off, n;
};

static const uint32_t *pool;

static int cmp_seq(const void *a, const void *b)
{
    const struct seq *x = a, *y = b;
    uint32_t m = x->n < y->n ? x->n : y->n;
    int c = memcmp(pool + x->off, pool + y->off, (size_t)m * 4);
    if (c)
        return c;
    return x->n < y->n ? -1 : x->n > y->n;
}

TEST(million_random_stacks)
{
    enum { N = 1000000, MAXD = 16 };
    uint32_t *p = malloc((size_t)N * MAXD * sizeof *p);
    struct seq *seqs = malloc(N * sizeof *seqs);
    struct seq *first = malloc(N * sizeof *first); /* id -> first sequence seen */
    uint32_t *got = malloc(N * sizeof *got);
    uint32_t off = 0;
    for (uint32_t i = 0; i < N; i++) {
        /* Short stacks over few frames repeat often; long ones rarely. */
        uint32_t n = (uint32_t)(rnd() % (MAXD + 1));
        uint32_t range = n < 4 ? 8 : 4000;
        seqs[i] = (struct seq){ off, n };
        for (uint32_t k = 0; k < n; k++)
            p[off++] = (uint32_t)(rnd() % range);
    }
    pool = p;

    flamme_dedup *d = flamme_dedup_new();
    uint32_t next = 0;
    int bad = 0;
    for (uint32_t i = 0; i < N; i++) {
        int nw;
        uint32_t id = flamme_dedup_stack(d, p + seqs[i].off, seqs[i].n, &nw);
        got[i] = id;
        if (nw) {
            if (id != next)
                bad++;
            else
                first[next++] = seqs[i];
        } else if (id >= next || cmp_seq(&first[id], &seqs[i]) != 0) {
            bad++; /* one id must always mean one sequence */
        }
    }
    CHECK(bad == 0);
    /* As many ids as distinct sequences: equal sequences never got two ids. */
    qsort(seqs, N, sizeof *seqs, cmp_seq);
    uint32_t distinct = N ? 1 : 0;
    for (uint32_t i = 1; i < N; i++)
        distinct += cmp_seq(&seqs[i - 1], &seqs[i]) != 0;
    CHECK(next == distinct);
    CHECK(distinct < N);
    /* Stable: asking again (in sorted order now) gives the ids of before. */
    bad = 0;
    for (uint32_t i = 0; i < N; i++) {
        int nw;
        uint32_t id = flamme_dedup_stack(d, p + seqs[i].off, seqs[i].n, &nw);
        if (nw || id >= next || cmp_seq(&first[id], &seqs[i]) != 0)
            bad++;
    }
    CHECK(bad == 0);
    flamme_dedup_free(d);
    free(p);
    free(seqs);
    free(first);
    free(got);
}

int main(void)
{
    RUN(same_sequence_same_id);
    RUN(different_and_prefix_sequences_distinct);
    RUN(empty_stack);
    RUN(frames_dense_and_stable);
    RUN(million_random_stacks);
    return CHECK_DONE();
}
