/*
 * common/index_table.h — the hash table of the interning tables: open
 * addressing with linear probing over indexes into the caller's own array
 * of keys (a slot holds index + 1, 0 is empty), power-of-two capacity, kept
 * at most half full. The caller owns the keys and says how to hash one
 * (for re-inserting on growth) and how to compare one with a key looked up.
 * Used by tools/folded.c (frame names), tools/diff.c (stacks),
 * tools/export.c (strings, threads), tools/collapse.c, common/merge.c,
 * writer/lines.c (file names), writer/dedup.c, writer/writer.c (the
 * raw-stack cache) and common/profile.c (the prefix tree of stacks, the
 * reader's threads). Pure; one
 * owner per table; allocates on growth, so never from a signal handler.
 */
#ifndef FLAMME_COMMON_INDEX_TABLE_H
#define FLAMME_COMMON_INDEX_TABLE_H
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct flamme_itab {
    uint32_t *slot; /* index + 1; 0 = empty */
    size_t cap;     /* a power of two, or 0 before the first reserve */
};

/* Hash of the key of index i (the same function the lookups use). */
typedef uint64_t (*flamme_itab_hash_fn)(const void *ctx, uint32_t i);
/* 1 if the key of index i is the len bytes at key. */
typedef int (*flamme_itab_eq_fn)(const void *ctx, uint32_t i, const void *key, size_t len);

/* Makes room for `more` indexes when n are in: the table doubles (from
 * min_cap, a power of two) and indexes 0..n-1 are re-inserted with hash.
 * Returns 0, or -1 when out of memory (the table is unchanged). */
static inline int flamme_itab_reserve_more(struct flamme_itab *t, size_t n, size_t more,
                                           size_t min_cap, flamme_itab_hash_fn hash,
                                           const void *ctx)
{
    if (2 * (n + more) <= t->cap)
        return 0;
    size_t nc = t->cap ? t->cap * 2 : min_cap;
    while (2 * (n + more) > nc)
        nc *= 2;
    /* Zeroed by writing, not by calloc: a fresh page first read (a probe
     * finding a slot empty) maps the shared zero page, and the first write
     * to it then replaces that page and flushes the TLB of every CPU the
     * process runs on, an interrupt to each of the program's threads. The
     * memset goes through a volatile pointer: the compiler would otherwise
     * turn malloc + memset back into calloc. */
    static void *(*volatile const zero)(void *, int, size_t) = memset;
    uint32_t *ns = malloc(nc * sizeof *ns);
    if (!ns)
        return -1;
    zero(ns, 0, nc * sizeof *ns);
    for (size_t i = 0; i < n; i++) {
        size_t j = hash(ctx, (uint32_t)i) & (nc - 1);
        while (ns[j])
            j = (j + 1) & (nc - 1);
        ns[j] = (uint32_t)i + 1;
    }
    free(t->slot);
    t->slot = ns;
    t->cap = nc;
    return 0;
}

/* flamme_itab_reserve_more for one more index. */
static inline int flamme_itab_reserve(struct flamme_itab *t, size_t n, size_t min_cap,
                                      flamme_itab_hash_fn hash, const void *ctx)
{
    return flamme_itab_reserve_more(t, n, 1, min_cap, hash, ctx);
}

/* The slot on the probe path of hash h that holds an index whose key eq
 * finds equal to key[0..len), or else the empty slot ending the path (where
 * a new index goes: *slot = index + 1). NULL when the table has no slots. */
static inline uint32_t *flamme_itab_probe(const struct flamme_itab *t, uint64_t h,
                                          flamme_itab_eq_fn eq, const void *ctx, const void *key,
                                          size_t len)
{
    if (!t->cap)
        return NULL;
    size_t mask = t->cap - 1, j = h & mask;
    while (t->slot[j] && !eq(ctx, t->slot[j] - 1, key, len))
        j = (j + 1) & mask;
    return &t->slot[j];
}

static inline void flamme_itab_free(struct flamme_itab *t)
{
    free(t->slot);
    t->slot = NULL;
    t->cap = 0;
}

#endif
