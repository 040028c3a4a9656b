/*
 * writer/dedup.c — interning tables of the writer thread (see writer/dedup.h).
 *
 * Owns: two tables on common/index_table.h (open addressing, at most half
 * full, doubled when they reach it: every call amortized O(1)) over keys
 * kept here by id:
 *   - frames: return address -> dense frame id (faddr[id]).
 *   - stacks: sequence of frame ids -> dense stack id. The sequences live
 *     back to back in one growable arena; a stack is (offset, length, hash).
 * Called by: the writer thread only (single owner, no locking). Allocates.
 */
#include "writer/dedup.h"

#include "common/hash.h"
#include "common/index_table.h"

#include <stdlib.h>
#include <string.h>

struct stack_ent {
    uint64_t off;  /* start of the sequence in the arena */
    uint64_t hash;
    uint32_t n;
};

struct flamme_dedup {
    struct flamme_itab frames; /* -> index into faddr = frame id */
    uint64_t *faddr;
    size_t faddr_cap;
    uint32_t nframes;

    struct flamme_itab stack_tab; /* -> index into stacks = stack id */
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
    return calloc(1, sizeof(flamme_dedup));
}

void flamme_dedup_free(flamme_dedup *d)
{
    if (!d)
        return;
    flamme_itab_free(&d->frames);
    flamme_itab_free(&d->stack_tab);
    free(d->faddr);
    free(d->stacks);
    free(d->arena);
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

/* Entries keep their hash: growth rehashes no sequence. */
static uint64_t stack_hash(const void *ctx, uint32_t i)
{
    return ((const flamme_dedup *)ctx)->stacks[i].hash;
}

struct stack_key {
    const uint32_t *ids;
    uint32_t n;
    uint64_t hash;
};

static int stack_eq(const void *ctx, uint32_t i, const void *key, size_t len)
{
    (void)len;
    const flamme_dedup *d = ctx;
    const struct stack_key *k = key;
    const struct stack_ent *e = &d->stacks[i];
    return e->hash == k->hash && e->n == k->n &&
           (k->n == 0 || memcmp(d->arena + e->off, k->ids, (size_t)k->n * sizeof *k->ids) == 0);
}

uint32_t flamme_dedup_stack(flamme_dedup *d, const uint32_t *ids, uint32_t n, int *is_new)
{
    *is_new = 0;
    struct stack_key k = {ids, n, hash_ids(ids, n)};
    if (flamme_itab_reserve(&d->stack_tab, d->nstacks, INITIAL_CAP, stack_hash, d) < 0)
        return UINT32_MAX;
    uint32_t *slot = flamme_itab_probe(&d->stack_tab, k.hash, stack_eq, d, &k, sizeof k);
    if (*slot)
        return *slot - 1;
    if (d->nstacks >= UINT32_MAX - 1)
        return UINT32_MAX;
    if (ensure((void **)&d->arena, &d->arena_cap, d->arena_len + n, sizeof *d->arena) < 0 ||
        ensure((void **)&d->stacks, &d->stacks_cap, (size_t)d->nstacks + 1, sizeof *d->stacks) < 0)
        return UINT32_MAX;
    uint32_t id = d->nstacks++;
    if (n)
        memcpy(d->arena + d->arena_len, ids, (size_t)n * sizeof *ids);
    d->stacks[id] = (struct stack_ent){ .off = d->arena_len, .hash = k.hash, .n = n };
    d->arena_len += n;
    *slot = id + 1;
    *is_new = 1;
    return id;
}
