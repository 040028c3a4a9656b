/*
 * tools/fnagg.h — per-function self and total weights of folded stacks,
 * gathered through flamme_collapse_profile's emit callback, so `flamme
 * report` and `flamme top` count and name functions exactly as `flamme
 * collapse` and the SVG show them. Any thread; allocates.
 */
#ifndef FLAMME_TOOLS_FNAGG_H
#define FLAMME_TOOLS_FNAGG_H
#include <stddef.h>
#include <stdint.h>

#include "common/index_table.h"

struct flamme_fn {
    char *name;
    uint64_t self, total;
    size_t stamp; /* last line counted in total, +1 (0 = never) */
};

/* Zero-initialize; flamme_fnagg_free releases. */
struct flamme_fnagg {
    struct flamme_fn *fns; /* n of them, in order of first appearance */
    size_t cap, n;
    struct flamme_itab index; /* name -> index in fns */
    uint64_t weight, complete, truncated, broken; /* by the stack's root frame */
    size_t line; /* current line number, for the stamp */
    int oom;     /* an allocation failed: the figures are short */
};

/* Entry for name s[0..n), created with zero weights if absent; NULL on
 * allocation failure. The pointer is good until the next get (the array
 * grows). */
struct flamme_fn *flamme_fnagg_get(struct flamme_fnagg *a, const char *s, size_t n);

/* flamme_collapse_profile's emit (ctx: a struct flamme_fnagg): self for the
 * leaf, total once per distinct function of the stack; the markers
 * [truncated], [broken], [no frames] are no function. */
void flamme_fnagg_stack(void *ctx, const char *stack, uint64_t w);

/* qsort comparators over struct flamme_fn * (heaviest first, then by
 * name; by total, equal totals put the one with less self first: a caller
 * before the hot leaf under it that has the same total). */
int flamme_fn_by_self(const void *x, const void *y);
int flamme_fn_by_total(const void *x, const void *y);

/* The functions of a in a new array (*n of them), sorted by total if
 * by_total else by self; NULL on allocation failure. */
struct flamme_fn **flamme_fnagg_sorted(const struct flamme_fnagg *a, int by_total, size_t *n);

void flamme_fnagg_free(struct flamme_fnagg *a);

#endif
