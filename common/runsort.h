/*
 * common/runsort.h — a natural merge sort for tables that arrive as
 * ascending runs: the unwind rows of writer/cfi_build.c (each FDE's rows in
 * order, the FDEs mostly in address order) and the line rows of
 * writer/lines.c (each line-number sequence in order). glibc's qsort sorted
 * them as if they were random: most of the agent's start-up before the
 * program's main (the executable's and libraries' unwind rows) was that
 * sort. Here an input already in order costs one pass, r runs cost
 * O(n log r). Stable. Pure; allocates (a run index and one copy of the
 * table, from common/bulk.h: for a large table, fresh pages were most of
 * its cost), so never from a signal handler.
 */
#ifndef FLAMME_COMMON_RUNSORT_H
#define FLAMME_COMMON_RUNSORT_H
#include "common/bulk.h"

#include <stddef.h>
#include <string.h>

/* Sorts the n elements of size sz at base by cmp (qsort's contract).
 * Returns 0, or -1 when out of memory: base is then unchanged and the
 * caller sorts it another way (qsort). */
static inline int flamme_sort_runs(void *base, size_t n, size_t sz,
                                   int (*cmp)(const void *, const void *))
{
    if (n < 2)
        return 0;
    char *a = base;
    size_t first = 1; /* where the first run ends */
    while (first < n && cmp(a + (first - 1) * sz, a + first * sz) <= 0)
        first++;
    if (first == n)
        return 0;
    /* start[k] = first element of run k; start[nruns] = n. Each element
     * is compared with its predecessor once: at most n runs. */
    size_t *start = flamme_bulk_alloc((n + 1) * sizeof *start);
    char *tmp = start ? flamme_bulk_alloc(n * sz) : NULL;
    if (!tmp) {
        flamme_bulk_free(start);
        return -1;
    }
    size_t nruns = 0;
    start[nruns++] = 0;
    start[nruns++] = first;
    for (size_t i = first + 1; i < n; i++)
        if (cmp(a + (i - 1) * sz, a + i * sz) > 0)
            start[nruns++] = i;
    start[nruns] = n;
    char *src = a, *dst = tmp;
    while (nruns > 1) {
        size_t out = 0; /* runs after this pass */
        for (size_t r = 0; r < nruns; r += 2) {
            size_t lo = start[r], mid = start[r + 1];
            size_t hi = r + 2 <= nruns ? start[r + 2] : mid;
            size_t i = lo, j = mid, o = lo;
            /* The left run wins ties: stable. */
            while (i < mid && j < hi) {
                if (cmp(src + j * sz, src + i * sz) < 0)
                    memcpy(dst + o++ * sz, src + j++ * sz, sz);
                else
                    memcpy(dst + o++ * sz, src + i++ * sz, sz);
            }
            memcpy(dst + o * sz, src + i * sz, (mid - i) * sz);
            o += mid - i;
            memcpy(dst + o * sz, src + j * sz, (hi - j) * sz);
            start[out++] = lo;
        }
        start[out] = n;
        nruns = out;
        char *t = src;
        src = dst;
        dst = t;
    }
    if (src != a)
        memcpy(a, src, n * sz);
    flamme_bulk_free(tmp); /* the last carved first: both given back in place */
    flamme_bulk_free(start);
    return 0;
}

#endif
