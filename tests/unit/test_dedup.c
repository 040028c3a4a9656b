/*
 * tests/unit/test_dedup.c — the writer's interning: frame ids
 * (writer/dedup.c) are dense from 0 in order of first sight, equal
 * addresses get equal ids, different ones different ids; stacks, which are
 * the profile's prefix-tree nodes (common/profile.c, flamme_pw_nodes), get
 * one node per distinct sequence. At the scale of a long profile.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>

#include "tests/unit/check.h"
#include "common/profile.h"
#include "writer/dedup.h"

static uint64_t rng_state = 0x1234567887654321ull;

static uint64_t rnd(void)
{
    return check_xorshift(&rng_state);
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

static const struct seq *sort_seqs;

static int cmp_idx(const void *a, const void *b)
{
    return cmp_seq(&sort_seqs[*(const uint32_t *)a], &sort_seqs[*(const uint32_t *)b]);
}

/* Stacks are the profile's prefix-tree nodes now (common/profile.c,
 * flamme_pw_nodes, which the writer interns through): one node per
 * distinct sequence, whatever the order they come in. */
TEST(million_random_stacks)
{
    enum { N = 1000000, MAXD = 16 };
    uint32_t *p = malloc((size_t)N * MAXD * sizeof *p);
    struct seq *seqs = malloc(N * sizeof *seqs);
    uint32_t *got = malloc(N * sizeof *got);
    uint32_t nodes[MAXD];
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
    int fd = open("/dev/null", O_WRONLY);
    struct flamme_header h = { .pid = 1, .hz = 999 };
    flamme_pw *w = flamme_pw_open(fd, &h);
    CHECK(w != NULL);
    flamme_pw_stacks_are_nodes(w);
    for (uint32_t i = 0; i < N; i++) {
        CHECK(flamme_pw_nodes(w, 0, seqs[i].n, p + seqs[i].off, nodes) == 0);
        got[i] = seqs[i].n ? nodes[seqs[i].n - 1] : 0;
    }
    /* Sorted by sequence, equal sequences are neighbours: they must share
     * their node, and neighbours that differ must not (nor any two
     * distinct sequences: each node has one path from the root). */
    uint32_t *idx = malloc(N * sizeof *idx);
    for (uint32_t i = 0; i < N; i++)
        idx[i] = i;
    sort_seqs = seqs;
    qsort(idx, N, sizeof *idx, cmp_idx);
    uint32_t bad = 0, distinct = 1;
    for (uint32_t i = 1; i < N; i++) {
        int same = cmp_seq(&seqs[idx[i - 1]], &seqs[idx[i]]) == 0;
        distinct += !same;
        if (same != (got[idx[i - 1]] == got[idx[i]]))
            bad++;
    }
    CHECK(bad == 0);
    CHECK(distinct < N);
    /* Again, in sorted order: the nodes of before. */
    bad = 0;
    for (uint32_t i = 0; i < N; i++) {
        uint32_t j = idx[i];
        CHECK(flamme_pw_nodes(w, 0, seqs[j].n, p + seqs[j].off, nodes) == 0);
        if ((seqs[j].n ? nodes[seqs[j].n - 1] : 0) != got[j])
            bad++;
    }
    CHECK(bad == 0);
    flamme_pw_close(w, 0, 0, 0, 0);
    free(idx);
    free(p);
    free(seqs);
    free(got);
}

int main(void)
{
    RUN(frames_dense_and_stable);
    RUN(million_random_stacks);
    return CHECK_DONE();
}
