/*
 * writer/dedup.c — interning tables of the writer thread (see writer/dedup.h).
 *
 * Owns: a table on common/index_table.h (open addressing, at most half
 * full, doubled when it reaches it: every call amortized O(1)) from return
 * address to dense frame id (faddr[id]). Stacks are the profile's prefix
 * tree's nodes (writer/intern.c, common/profile.c).
 * Called by: the writer thread only (single owner, no locking). Allocates.
 */
#include "writer/dedup.h"

#include "common/hash.h"
#include "common/index_table.h"

#include <stdlib.h>

struct flamme_dedup {
    struct flamme_itab frames; /* -> index into faddr = frame id */
    uint64_t *faddr;
    size_t faddr_cap;
    uint32_t nframes;
};

#define INITIAL_CAP 1024u

flamme_dedup *flamme_dedup_new(void)
{
    return calloc(1, sizeof(flamme_dedup));
}

void flamme_dedup_free(flamme_dedup *d)
{
    if (!d)
        return;
    flamme_itab_free(&d->frames);
    free(d->faddr);
    free(d);
}

/* Geometric growth of an array to hold at least need elements of size elem.
 * Returns 0 / -1 (array unchanged). */
static int ensure(void **arr, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 1024;
    while (c < need)
        c *= 2;
    void *a = realloc(*arr, c * elem);
    if (!a)
        return -1;
    *arr = a;
    *cap = c;
    return 0;
}

static uint64_t frame_hash(const void *ctx, uint32_t i)
{
    return flamme_hash_mix64(((const flamme_dedup *)ctx)->faddr[i]);
}

static int frame_eq(const void *ctx, uint32_t i, const void *key, size_t len)
{
    (void)len;
    return ((const flamme_dedup *)ctx)->faddr[i] == *(const uint64_t *)key;
}

uint32_t flamme_dedup_frame(flamme_dedup *d, uint64_t addr, int *is_new)
{
    *is_new = 0;
    if (flamme_itab_reserve(&d->frames, d->nframes, INITIAL_CAP, frame_hash, d) < 0)
        return UINT32_MAX;
    uint32_t *slot = flamme_itab_probe(&d->frames, flamme_hash_mix64(addr), frame_eq, d, &addr,
                                       sizeof addr);
    if (*slot)
        return *slot - 1;
    if (d->nframes >= UINT32_MAX - 1 ||
        ensure((void **)&d->faddr, &d->faddr_cap, (size_t)d->nframes + 1, sizeof *d->faddr) < 0)
        return UINT32_MAX;
    uint32_t id = d->nframes++;
    d->faddr[id] = addr;
    *slot = id + 1;
    *is_new = 1;
    return id;
}
