/*
 * writer/dedup.c — interning tables of the writer thread (see writer/dedup.h).
 *
 * Owns: two open-addressing hash tables with linear probing and power-of-two
 * capacity, kept at most half full and doubled when they reach it, so every
 * call is amortized O(1) and long probe runs cannot build up.
 *   - frames: return address -> dense frame id.
 *   - stacks: sequence of frame ids -> dense stack id. The sequences live
 *     back to back in one growable arena; a stack is (offset, length, hash).
 * Called by: the writer thread only (single owner, no locking). Allocates.
 */
#include "writer/dedup.h"

#include "common/hash.h"

#include <stdlib.h>
#include <string.h>

struct stack_ent {
    uint64_t off;  /* start of the sequence in the arena */
    uint64_t hash;
    uint32_t n;
};

struct flamme_dedup {
    /* frames: slot holds id + 1 (0 = empty); key in faddr[slot]. */
    uint64_t *faddr;
    uint32_t *fslot;
    size_t fcap;     /* power of two */
    uint32_t nframes;

    /* stacks: slot holds id + 1 (0 = empty). */
    uint32_t *sslot;
    size_t scap;     /* power of two */
    struct stack_ent *stacks;
    size_t stacks_cap;
    uint32_t nstacks;
    uint32_t *arena;
    size_t arena_len, arena_cap;
};

#define INITIAL_CAP 1024u

/* Hash of a sequence; the length is mixed in so that a sequence and its
 * prefixes (or zero-padded extensions) differ. */
static uint64_t hash_ids(const uint32_t *ids, uint32_t n)
{
    uint64_t h = flamme_hash_mix64(0x6a09e667f3bcc909ull ^ n);
    uint32_t i = 0;
    for (; i + 1 < n; i += 2)
        h = flamme_hash_mix64(h ^ ((uint64_t)ids[i] | (uint64_t)ids[i + 1] << 32)) +
            0x9e3779b97f4a7c15ull;
    if (i < n)
        h = flamme_hash_mix64(h ^ ids[i] ^ 0xff51afd7ed558ccdull);
    return h;
}

flamme_dedup *flamme_dedup_new(void)
{
    flamme_dedup *d = calloc(1, sizeof *d);
    if (!d)
        return NULL;
    d->fcap = d->scap = INITIAL_CAP;
    d->faddr = malloc(d->fcap * sizeof *d->faddr);
    d->fslot = calloc(d->fcap, sizeof *d->fslot);
    d->sslot = calloc(d->scap, sizeof *d->sslot);
    if (!d->faddr || !d->fslot || !d->sslot) {
        flamme_dedup_free(d);
        return NULL;
    }
    return d;
}

void flamme_dedup_free(flamme_dedup *d)
{
    if (!d)
        return;
    free(d->faddr);
    free(d->fslot);
    free(d->sslot);
    free(d->stacks);
    free(d->arena);
    free(d);
}

/* Doubles the frame table. Returns 0 / -1 (table unchanged). */
static int frames_grow(flamme_dedup *d)
{
    size_t nc = d->fcap * 2, mask = nc - 1;
    uint64_t *na = malloc(nc * sizeof *na);
    uint32_t *ns = calloc(nc, sizeof *ns);
    if (!na || !ns) {
        free(na);
        free(ns);
        return -1;
    }
    for (size_t i = 0; i < d->fcap; i++) {
        if (!d->fslot[i])
            continue;
        size_t h = flamme_hash_mix64(d->faddr[i]) & mask;
        while (ns[h])
            h = (h + 1) & mask;
        ns[h] = d->fslot[i];
        na[h] = d->faddr[i];
    }
    free(d->faddr);
    free(d->fslot);
    d->faddr = na;
    d->fslot = ns;
    d->fcap = nc;
    return 0;
}

uint32_t flamme_dedup_frame(flamme_dedup *d, uint64_t addr, int *is_new)
{
    *is_new = 0;
    size_t mask = d->fcap - 1, h = flamme_hash_mix64(addr) & mask;
    for (; d->fslot[h]; h = (h + 1) & mask)
        if (d->faddr[h] == addr)
            return d->fslot[h] - 1;
    if (d->nframes >= UINT32_MAX - 1)
        return UINT32_MAX;
    if ((size_t)(d->nframes + 1) * 2 > d->fcap) {
        if (frames_grow(d) < 0)
            return UINT32_MAX;
        mask = d->fcap - 1;
        for (h = flamme_hash_mix64(addr) & mask; d->fslot[h]; h = (h + 1) & mask)
            ;
    }
    uint32_t id = d->nframes++;
    d->fslot[h] = id + 1;
    d->faddr[h] = addr;
    *is_new = 1;
    return id;
}

/* Doubles the stack table (entries keep their hash, so no rehashing of the
 * sequences). Returns 0 / -1 (table unchanged). */
static int stacks_grow(flamme_dedup *d)
{
    size_t nc = d->scap * 2, mask = nc - 1;
    uint32_t *ns = calloc(nc, sizeof *ns);
    if (!ns)
        return -1;
    for (size_t i = 0; i < d->scap; i++) {
        if (!d->sslot[i])
            continue;
        size_t h = d->stacks[d->sslot[i] - 1].hash & mask;
        while (ns[h])
            h = (h + 1) & mask;
        ns[h] = d->sslot[i];
    }
    free(d->sslot);
    d->sslot = ns;
    d->scap = nc;
    return 0;
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

uint32_t flamme_dedup_stack(flamme_dedup *d, const uint32_t *ids, uint32_t n, int *is_new)
{
    *is_new = 0;
    uint64_t hv = hash_ids(ids, n);
    size_t mask = d->scap - 1, h = hv & mask;
    for (; d->sslot[h]; h = (h + 1) & mask) {
        const struct stack_ent *e = &d->stacks[d->sslot[h] - 1];
        if (e->hash == hv && e->n == n &&
            (n == 0 || memcmp(d->arena + e->off, ids, (size_t)n * sizeof *ids) == 0))
            return d->sslot[h] - 1;
    }
    if (d->nstacks >= UINT32_MAX - 1)
        return UINT32_MAX;
    if (ensure((void **)&d->arena, &d->arena_cap, d->arena_len + n, sizeof *d->arena) < 0 ||
        ensure((void **)&d->stacks, &d->stacks_cap, (size_t)d->nstacks + 1, sizeof *d->stacks) < 0)
        return UINT32_MAX;
    if ((size_t)(d->nstacks + 1) * 2 > d->scap) {
        if (stacks_grow(d) < 0)
            return UINT32_MAX;
        mask = d->scap - 1;
        for (h = hv & mask; d->sslot[h]; h = (h + 1) & mask)
            ;
    }
    uint32_t id = d->nstacks++;
    if (n)
        memcpy(d->arena + d->arena_len, ids, (size_t)n * sizeof *ids);
    d->stacks[id] = (struct stack_ent){ .off = d->arena_len, .hash = hv, .n = n };
    d->arena_len += n;
    d->sslot[h] = id + 1;
    *is_new = 1;
    return id;
}
