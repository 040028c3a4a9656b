/*
 * tests/unit/test_runsort.c — common/runsort.h sorts like qsort (same
 * order, and stable: equal keys keep their input order) on inputs made of
 * ascending runs, on random input, on one run and on the degenerate sizes.
 */
#include "common/runsort.h"
#include "tests/unit/check.h"

#include <stdint.h>
#include <stdlib.h>

struct el {
    uint64_t key;
    uint32_t seq; /* input position: checks stability */
    uint32_t pad;
};

static int by_key(const void *a, const void *b)
{
    const struct el *x = a, *y = b;
    return x->key < y->key ? -1 : x->key > y->key;
}

/* Full order (key, then input position): what a stable sort by key gives. */
static int by_key_seq(const void *a, const void *b)
{
    const struct el *x = a, *y = b;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static uint64_t rng = 88172645463325252ull;
static uint64_t next(void)
{
    return check_xorshift(&rng);
}

/* Sorts n elements made of runs of about run_len ascending keys (keys
 * drawn below key_max, so equal keys occur) both ways; 1 if identical. */
static int same_as_qsort(size_t n, size_t run_len, uint64_t key_max)
{
    struct el *a = malloc((n ? n : 1) * sizeof *a), *b = malloc((n ? n : 1) * sizeof *b);
    uint64_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (run_len && i % run_len == 0)
            k = next() % key_max;
        else if (run_len)
            k += next() % 3; /* ascending, with repeats */
        else
            k = next() % key_max;
        a[i] = (struct el){ k, (uint32_t)i, 0 };
    }
    memcpy(b, a, n * sizeof *a);
    int rc = flamme_sort_runs(a, n, sizeof *a, by_key);
    qsort(b, n, sizeof *b, by_key_seq);
    int same = rc == 0 && memcmp(a, b, n * sizeof *a) == 0;
    free(a);
    free(b);
    return same;
}

TEST(runs_like_unwind_rows)
{
    CHECK(same_as_qsort(100000, 12, 1u << 30));
    CHECK(same_as_qsort(100000, 700, 1u << 20));
    CHECK(same_as_qsort(12345, 5, 50)); /* many equal keys across runs */
}

TEST(random_and_sorted)
{
    CHECK(same_as_qsort(50000, 0, 1000)); /* random: runs of ~2 */
    CHECK(same_as_qsort(50000, 50000, 1u << 30)); /* one run */
    CHECK(same_as_qsort(3, 0, 2));
}

TEST(degenerate)
{
    CHECK(same_as_qsort(0, 0, 1));
    CHECK(same_as_qsort(1, 0, 1));
    struct el two[2] = { { 2, 0, 0 }, { 1, 1, 0 } };
    CHECK(flamme_sort_runs(two, 2, sizeof two[0], by_key) == 0);
    CHECK(two[0].key == 1 && two[1].key == 2);
}

int main(void)
{
    RUN(runs_like_unwind_rows);
    RUN(random_and_sorted);
    RUN(degenerate);
    return CHECK_DONE();
}
