/*
 * tools/alloc_view.c — allocation views of a loaded profile (see
 * alloc_view.h).
 */
#include "tools/alloc_view.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int flamme_view_option(struct flamme_view *v, const char *arg)
{
    if (strcmp(arg, "--alloc") == 0)
        v->alloc = 1;
    else if (strcmp(arg, "--live") == 0)
        v->alloc = v->live = 1;
    else if (strcmp(arg, "--blocks") == 0)
        v->alloc = v->blocks = 1;
    else
        return 0;
    return 1;
}

const char *flamme_view_unit(const struct flamme_view *v)
{
    return !v->alloc ? "samples" : v->blocks ? "blocks" : "bytes";
}

int flamme_view_apply(struct flamme_profile *p, const struct flamme_view *v, const char *path,
                      char *err, size_t errlen)
{
    if (!v->alloc)
        return 0;
    struct flamme_sample *s;
    size_t n;
    if (flamme_view_samples(p, v, path, &s, &n, err, errlen) != 0)
        return -1;
    free(p->samples);
    p->samples = s;
    p->nsamples = n;
    return 0;
}

int flamme_view_heapfill(const struct flamme_profile *p)
{
    const char *m = flamme_profile_info(p, "alloc_method");
    return m && strcmp(m, "heapfill") == 0;
}

int flamme_view_live_domains(const struct flamme_profile *p)
{
    uint64_t seen[2] = { 0, 0 }; /* domain ids 0..127 (Max_domains) */
    int n = 0;
    for (size_t i = 0; i < p->nallocs; i++) {
        int32_t d = p->allocs[i].domain;
        if (d < 0 || d >= 128 || (seen[d / 64] >> (d % 64) & 1))
            continue;
        seen[d / 64] |= 1ull << (d % 64);
        n++;
    }
    return n;
}

int flamme_view_samples(const struct flamme_profile *p, const struct flamme_view *v,
                        const char *path, struct flamme_sample **out, size_t *nout, char *err,
                        size_t errlen)
{
    if (!p->nallocs) {
        snprintf(err, errlen,
                 "%s: no sampled allocations in this profile (record with flamme record --alloc, "
                 "or Flamme.start ~alloc)",
                 path);
        return -1;
    }
    const char *live = flamme_profile_info(p, "alloc_live");
    if (v->live && !(live && strcmp(live, "1") == 0)) {
        snprintf(err, errlen,
                 "%s: blocks were not tracked until they died, so there is no live view "
                 "(record with --live, or Flamme.start ~live:true)",
                 path);
        return -1;
    }
    if (v->blocks && flamme_view_heapfill(p)) {
        snprintf(err, errlen,
                 "%s: allocations were sampled by heap fill (an unmodified binary), which counts "
                 "bytes, not blocks (link the flamme library for block counts)",
                 path);
        return -1;
    }
    if (v->live && flamme_view_live_domains(p) > 1)
        fprintf(stderr,
                "%s: warning: %d domains allocated while blocks were tracked; OCaml 5.3's "
                "Gc.Memprof reports some blocks another domain promotes as dead, so the live "
                "view may miss some (doc/design.md)\n",
                path, flamme_view_live_domains(p));
    struct flamme_sample *s = malloc(p->nallocs * sizeof *s);
    if (!s) {
        snprintf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    size_t n = 0;
    double carry = 0;
    for (size_t i = 0; i < p->nallocs; i++) {
        const struct flamme_alloc *a = &p->allocs[i];
        if (v->live && a->died_ns)
            continue;
        carry += v->blocks ? flamme_alloc_blocks(a) : flamme_alloc_bytes(a);
        double w = carry < 0 ? 0 : carry > 4294967295.0 ? 4294967295.0 : (double)(uint64_t)carry;
        carry -= w;
        if (w == 0)
            continue;
        s[n++] = (struct flamme_sample){.stack_id = a->stack_id,
                                        .tid = a->tid,
                                        .weight = (uint32_t)w,
                                        .flags = a->flags,
                                        .domain = a->domain,
                                        .time_ns = a->time_ns,
                                        .serial = a->serial,
                                        .thread = a->thread};
    }
    *out = s;
    *nout = n;
    return 0;
}
