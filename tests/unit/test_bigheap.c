/*
 * tests/unit/test_bigheap.c — agent/bigheap.c, linked as libflamme.so links
 * it (--wrap of malloc, calloc, realloc and free): blocks keep their bytes
 * through any mix of small and large allocations, growth across the
 * small/large line and frees (checked against a model), calloc's blocks
 * are zero even when reused, glibc's own blocks go back to glibc, fresh
 * small blocks come on pages already resident (populated ahead), and
 * large ones too, unless calloc asked for them.
 */
#include "agent/bigheap.h"
#include "tests/unit/blocks.h"
#include "tests/unit/check.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint64_t next(void)
{
    return check_xorshift(&rng);
}

static int zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return 0;
    return 1;
}

/* Sizes on both sides of the small/large line (120 KB) and of the
 * classes' steps. */
static size_t some_size(void)
{
    switch (next() % 8) {
    case 0:
        return next() % 64;
    case 1:
    case 2:
        return next() % 1024;
    case 3:
    case 4:
        return next() % 16384;
    case 5:
        return (120 << 10) - 16 + next() % 32;
    case 6:
        return next() % (200 << 10);
    default:
        return next() % (600 << 10);
    }
}

#define LIVE 200
static uint8_t *blk[LIVE];
static size_t len[LIVE], key[LIVE];

TEST(blocks_keep_their_bytes_through_any_mix)
{
    size_t keys = 1;
    int bad = 0, zbad = 0;
    for (int step = 0; step < 30000; step++) {
        int i = (int)(next() % LIVE);
        unsigned op = (unsigned)(next() % 4);
        if (!blk[i] || op == 0) {
            free(blk[i]); /* NULL at first: a no-op */
            size_t n = some_size();
            if (next() % 2) {
                blk[i] = calloc(1, n);
                if (blk[i] && !zero(blk[i], n))
                    zbad++;
            } else {
                blk[i] = malloc(n);
            }
            len[i] = n;
            key[i] = keys++;
            if (blk[i])
                block_fill(blk[i], key[i], 0, n);
        } else if (op == 1) {
            size_t n = some_size();
            uint8_t *q = realloc(blk[i], n ? n : 1);
            if (!q)
                continue;
            size_t kept = len[i] < n ? len[i] : n;
            if (!block_holds(q, key[i], kept))
                bad++;
            block_fill(q, key[i], kept, n);
            blk[i] = q;
            len[i] = n;
        } else if (op == 2) {
            if (!block_holds(blk[i], key[i], len[i]))
                bad++;
        } else {
            free(blk[i]);
            blk[i] = NULL;
        }
    }
    for (int i = 0; i < LIVE; i++) {
        if (blk[i] && !block_holds(blk[i], key[i], len[i]))
            bad++;
        free(blk[i]);
        blk[i] = NULL;
    }
    CHECK(bad == 0);
    CHECK(zbad == 0);
}

TEST(a_reused_block_from_calloc_is_zero)
{
    for (size_t n = 24; n < (130 << 10); n = n * 3 / 2) {
        uint8_t *p = malloc(n);
        CHECK(p != NULL);
        if (!p)
            continue;
        memset(p, 0xa5, n);
        free(p);
        uint8_t *q = calloc(n, 1); /* likely p again */
        CHECK(q != NULL && zero(q, n));
        free(q);
    }
}

TEST(glibc_blocks_go_back_to_glibc)
{
    /* strdup's block is glibc's (libc calls its own malloc, not the
     * wrap): freed and grown through the wrap as glibc's. */
    char *s = strdup("a block of glibc's");
    CHECK(s != NULL);
    s = realloc(s, 64);
    CHECK(s != NULL && strcmp(s, "a block of glibc's") == 0);
    s = realloc(s, 300 << 10); /* now a large block of the agent's */
    CHECK(s != NULL && strcmp(s, "a block of glibc's") == 0);
    free(s);
    char *t = strdup("another");
    free(t);
}

TEST(fresh_small_blocks_come_on_resident_pages)
{
    /* Does this kernel populate at all (Linux 5.14+)? Without it the
     * allocator works as glibc's does, page fault by page fault. */
    if (!pages_can_populate()) {
        printf("  (MADV_POPULATE_WRITE refused: skipped)\n");
        return;
    }
    /* 4 MB of 3 KB blocks, no free in between: several chunks' worth of
     * fresh pages. Each block's pages are resident before it is written
     * (a page fault each on glibc's fresh pages: 21-26 us on a VM). */
    enum { N = 1400, SZ = 3000 };
    static uint8_t *p[N];
    int missing = 0, ok = 1;
    for (int i = 0; i < N; i++) {
        p[i] = malloc(SZ);
        if (!p[i]) {
            ok = 0;
            continue;
        }
        int a = pages_absent(p[i], SZ);
        missing += a < 0 ? 1000 : a;
        memset(p[i], i & 0xff, SZ);
    }
    for (int i = 0; i < N; i++) {
        ok &= p[i] != NULL && p[i][SZ - 1] == (uint8_t)(i & 0xff);
        free(p[i]);
    }
    CHECK(ok);
    printf("  %d pages not resident before their block was written\n", missing);
    CHECK(missing == 0);
}

/* A large block from malloc (or grown by realloc) is written by its
 * caller, so it comes populated; one from calloc may stay sparse (a hash
 * table), so it does not. */
TEST(large_blocks_are_populated_unless_from_calloc)
{
    if (!pages_can_populate()) {
        printf("  (MADV_POPULATE_WRITE refused: skipped)\n");
        return;
    }
    enum { SZ = 200 << 10 };
    uint8_t *p = malloc(SZ), *q = calloc(1, SZ);
    CHECK(p != NULL && q != NULL);
    if (!p || !q)
        return;
    CHECK(pages_absent(p, SZ) == 0);
    CHECK(pages_absent(q, SZ) >= SZ / 4096);
    CHECK(zero(q, SZ));
    block_fill(p, 7, 0, SZ);
    uint8_t *r = realloc(p, 2 * SZ);
    CHECK(r != NULL);
    if (r) {
        CHECK(pages_absent(r + SZ, SZ - 4096) == 0); /* what it gained */
        CHECK(block_holds(r, 7, SZ));
        p = r;
    }
    free(p);
    free(q);
}

int main(void)
{
    RUN(blocks_keep_their_bytes_through_any_mix);
    RUN(a_reused_block_from_calloc_is_zero);
    RUN(glibc_blocks_go_back_to_glibc);
    RUN(fresh_small_blocks_come_on_resident_pages);
    RUN(large_blocks_are_populated_unless_from_calloc);
    return CHECK_DONE();
}
