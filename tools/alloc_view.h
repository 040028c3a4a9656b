/*
 * tools/alloc_view.h — which weight a verb shows: CPU samples (the
 * default), or the sampled allocations of a profile (ALLOC records) as
 * bytes or blocks allocated, or only those still alive at the end (the
 * live view). Every verb loads the profile, then applies the view, which
 * replaces the samples by one per sampled allocation weighted by its
 * estimate (doc/format.md), so collapse, svg, diff and export need nothing
 * else. Any thread; allocates.
 */
#ifndef FLAMME_TOOLS_ALLOC_VIEW_H
#define FLAMME_TOOLS_ALLOC_VIEW_H
#include <stddef.h>
#include "common/profile.h"

struct flamme_view {
    int alloc;  /* 1: allocations (--alloc) */
    int live;   /* 1: only blocks alive at the end (--live; implies alloc) */
    int blocks; /* 1: weight = blocks, not bytes (--blocks) */
};

/* Parses one of --alloc, --live, --blocks into v. Returns 1 if arg was
 * one of them, else 0. */
int flamme_view_option(struct flamme_view *v, const char *arg);

/* The unit of the weights the view gives ("samples", "bytes", "blocks"). */
const char *flamme_view_unit(const struct flamme_view *v);

/* Applies v to p (loaded from path). Returns 0, or -1 with one line in err
 * ("PATH: no sampled allocations ..." when the profile has none, or is
 * asked for --live without having tracked blocks; or out of memory).
 * Weights are rounded so that their sum over the profile stays the sum of
 * the estimates (the rounding error carried from one to the next). */
int flamme_view_apply(struct flamme_profile *p, const struct flamme_view *v, const char *path,
                      char *err, size_t errlen);

/* Whether p's allocations were sampled by heap fill (INFO alloc_method,
 * doc/format.md): bytes only, no blocks, no live view. */
int flamme_view_heapfill(const struct flamme_profile *p);

/* How many domains made p's sampled allocations: with more than one, the
 * live view is known to miss blocks (OCaml 5.3's Memprof; doc/design.md),
 * which the live view says on stderr. */
int flamme_view_live_domains(const struct flamme_profile *p);

/* The samples v would give p (v->alloc set), as a new array in *out (n in
 * *n), p unchanged. Returns 0, -1 with err as above. */
int flamme_view_samples(const struct flamme_profile *p, const struct flamme_view *v,
                        const char *path, struct flamme_sample **out, size_t *n, char *err,
                        size_t errlen);

#endif
