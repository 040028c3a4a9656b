/*
 * tests/unit/test_bulk.c — common/bulk.h: blocks keep their bytes through
 * any mix of allocations, growth and frees (checked against a model), the
 * block carved last grows and shrinks in place, chunks are given back when
 * their blocks are, and a large table filled by a read costs a few page
 * faults where the kernel backs the chunk with a huge page.
 */
#include "common/bulk.h"
#include "common/profile.h"
#include "tests/unit/blocks.h"
#include "tests/unit/check.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next(void)
{
    return check_xorshift(&rng);
}

#define SLOTS 48
#define CHUNK_BYTES ((size_t)2 << 20)

/* Random sizes from a few bytes to 3 MB (past a chunk), random growth,
 * shrinking and frees: every live block still holds its own pattern, is
 * 16-aligned, and no two overlap. */
TEST(blocks_keep_their_bytes_through_any_mix)
{
    uint8_t *p[SLOTS] = { 0 };
    size_t n[SLOTS] = { 0 }, id[SLOTS] = { 0 }, ids = 0;
    int bad = 0;
    for (int step = 0; step < 3000 && !bad; step++) {
        size_t s = next() % SLOTS;
        uint64_t r = next();
        size_t want = (r & 3) == 0   ? (size_t)(next() % (3u << 20))
                      : (r & 3) == 1 ? (size_t)(next() % (256u << 10))
                                     : (size_t)(next() % (8u << 10));
        if (!p[s]) {
            p[s] = flamme_bulk_alloc(want);
            CHECK(p[s] != NULL);
            if (!p[s])
                return;
            n[s] = want;
            id[s] = ++ids;
            block_fill(p[s], id[s], 0, want);
        } else if (r & 4) {
            uint8_t *q = flamme_bulk_realloc(p[s], want);
            CHECK(q != NULL);
            if (!q)
                return;
            if (!block_holds(q, id[s], want < n[s] ? want : n[s]))
                bad = 1;
            p[s] = q;
            if (want > n[s])
                block_fill(q, id[s], n[s], want);
            n[s] = want;
        } else {
            if (!block_holds(p[s], id[s], n[s]))
                bad = 1;
            flamme_bulk_free(p[s]);
            p[s] = NULL;
        }
        if (((uintptr_t)p[s] & 15) != 0)
            bad = 1;
    }
    CHECK(!bad);
    for (size_t a = 0; a < SLOTS; a++)
        for (size_t b = a + 1; b < SLOTS; b++)
            if (p[a] && p[b] && n[a] && n[b])
                CHECK(p[a] + n[a] <= p[b] || p[b] + n[b] <= p[a]);
    for (size_t s = 0; s < SLOTS; s++) {
        if (p[s])
            CHECK(block_holds(p[s], id[s], n[s]));
        flamme_bulk_free(p[s]);
    }
    /* Every block freed: every chunk given back. */
    CHECK(flamme_bulk_mapped() == 0);
}

/* A table grown by doubling, as the builders do, stays where it is while
 * it is the last block carved, and so does the sort's scratch after it. */
TEST(the_block_carved_last_grows_in_place)
{
    uint8_t *v = flamme_bulk_alloc(FLAMME_BULK_MIN);
    CHECK(v != NULL);
    if (!v)
        return;
    block_fill(v, 7, 0, FLAMME_BULK_MIN);
    uint8_t *w = flamme_bulk_realloc(v, 4 * FLAMME_BULK_MIN);
    CHECK(w == v);
    CHECK(block_holds(w, 7, FLAMME_BULK_MIN));
    /* Shrunk at the top, then a block after it takes the room given back. */
    w = flamme_bulk_realloc(w, FLAMME_BULK_MIN);
    CHECK(w == v);
    uint8_t *x = flamme_bulk_alloc(FLAMME_BULK_MIN);
    CHECK(x != NULL && x > w && x < w + 2 * FLAMME_BULK_MIN);
    /* No longer the top: growing moves it, contents kept. */
    block_fill(w, 7, 0, FLAMME_BULK_MIN);
    uint8_t *y = flamme_bulk_realloc(w, 2 * FLAMME_BULK_MIN);
    CHECK(y != NULL && y != w);
    CHECK(y && block_holds(y, 7, FLAMME_BULK_MIN));
    flamme_bulk_free(x);
    flamme_bulk_free(y);
}

/* The profile writer's compressor (zlib's ~260 KB of state, most of it
 * 64 KB blocks) is carved from a chunk, counted against the allowance,
 * and given back with the writer. Runs first: the allowance is the
 * process's. */
TEST(the_compressor_comes_from_a_chunk)
{
    CHECK(flamme_bulk_small_left() == FLAMME_BULK_SMALL_MAX);
    CHECK(flamme_bulk_mapped() == 0);
    int fd = open("/dev/null", O_WRONLY);
    struct flamme_header h = { FLAMME_VERSION_MAJOR, FLAMME_VERSION_MINOR, 1, 99, 0, 0, 0 };
    flamme_pw *w = fd >= 0 ? flamme_pw_open(fd, &h) : NULL;
    CHECK(w != NULL);
    if (!w)
        return;
    size_t used = FLAMME_BULK_SMALL_MAX - flamme_bulk_small_left();
    printf("  info: the compressor took %zu KB of the allowance\n", used >> 10);
    CHECK(used >= (256u << 10) && used < (320u << 10));
    CHECK(flamme_bulk_mapped() == CHUNK_BYTES);
    CHECK(flamme_pw_info(w, "k", "v") == 0 && flamme_pw_flush(w) == 0);
    CHECK(flamme_pw_close(w, 0, 0, 1, 0) == 0);
    CHECK(flamme_bulk_mapped() == 0);
}

/* Small blocks share chunks while the process's allowance lasts: the
 * first maps one, the next ones (a small program's libraries' tables) are
 * carved beside it; then they come from malloc, and never map another, so
 * a program that loads and unloads libraries for ever leaves no holes for
 * ever. Runs first: the allowance is the process's. */
TEST(small_blocks_share_chunks_until_the_allowance)
{
    CHECK(flamme_bulk_small_left() > (512u << 10)); /* less the compressor's */
    CHECK(flamme_bulk_mapped() == 0);
    enum { N = 4096 };
    static uint8_t *b[N];
    size_t n = 0, carved = 0;
    b[n] = flamme_bulk_alloc(9000);
    CHECK(b[n] != NULL && flamme_bulk_mapped() == CHUNK_BYTES);
    block_fill(b[n++], 1, 0, 9000);
    while (n < N && flamme_bulk_small_left() >= 9024) {
        size_t before = flamme_bulk_small_left();
        b[n] = flamme_bulk_alloc(9000);
        CHECK(b[n] != NULL);
        carved += before - flamme_bulk_small_left() == 9024;
        block_fill(b[n], n + 1, 0, 9000);
        n++;
    }
    /* 9000 bytes and the head, rounded to 16: every one came from a chunk,
     * all in the first (under 1 MB of them in 2 MB). */
    CHECK(carved == n - 1 && n > 50);
    CHECK(flamme_bulk_mapped() == CHUNK_BYTES);
    /* Past the allowance: 3 MB more of small blocks map nothing. */
    size_t past = n;
    while (n < past + 340) {
        b[n] = flamme_bulk_alloc(9000);
        CHECK(b[n] != NULL);
        if (!b[n])
            break;
        block_fill(b[n], n + 1, 0, 9000);
        n++;
    }
    CHECK(flamme_bulk_mapped() == CHUNK_BYTES);
    /* A carved small block grows in place at the top only within the
     * allowance: growing the last carved one now moves it to malloc. */
    uint8_t *last = b[past - 1];
    uint8_t *g = flamme_bulk_realloc(last, 20000);
    CHECK(g != NULL && g != last && block_holds(g, past, 9000));
    b[past - 1] = g;
    for (size_t i = 0; i < n; i++) {
        CHECK(block_holds(b[i], i + 1, 9000));
        flamme_bulk_free(b[i]);
    }
    CHECK(flamme_bulk_mapped() == 0);
}

/* Chunks are given back when their last block is: two tables that do not
 * fit one chunk take two, and a third fits beside the first. (The small
 * blocks' allowance is spent: the first test.) */
TEST(chunks_are_given_back)
{
    void *small = flamme_bulk_alloc(FLAMME_BULK_MIN - 1);
    CHECK(small != NULL);
    CHECK(flamme_bulk_mapped() == 0);
    void *a = flamme_bulk_alloc(1200 << 10), *b = flamme_bulk_alloc(1200 << 10);
    CHECK(a && b);
    CHECK(flamme_bulk_mapped() == ((size_t)4 << 20));
    void *c = flamme_bulk_alloc(700 << 10);
    CHECK(c != NULL);
    CHECK(flamme_bulk_mapped() == ((size_t)4 << 20));
    flamme_bulk_free(a);
    flamme_bulk_free(b);
    CHECK(flamme_bulk_mapped() == ((size_t)2 << 20)); /* c's chunk */
    flamme_bulk_free(c);
    flamme_bulk_free(small);
    CHECK(flamme_bulk_mapped() == 0);
}

static long minflt(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_minflt;
}

/* "[madvise]" or "[always]": the kernel may back the chunk with huge pages. */
static int thp_possible(void)
{
    char buf[128] = { 0 };
    int fd = open("/sys/kernel/mm/transparent_hugepage/enabled", O_RDONLY);
    if (fd < 0)
        return 0;
    ssize_t r = read(fd, buf, sizeof buf - 1);
    close(fd);
    return r > 0 && !strstr(buf, "[never]");
}

/* thp_fault_fallback from /proc/vmstat: huge page faults that got small
 * pages (no free huge page), when the check below cannot hold. */
static long thp_fallbacks(void)
{
    char buf[16384];
    int fd = open("/proc/vmstat", O_RDONLY);
    if (fd < 0)
        return -1;
    ssize_t r = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (r <= 0)
        return -1;
    buf[r] = '\0';
    const char *p = strstr(buf, "thp_fault_fallback ");
    return p ? atol(p + strlen("thp_fault_fallback ")) : -1;
}

/* What the change is for: a 1.5 MB table read into a block (the kept
 * symbols of the OCaml compiler are 1.26 MB) costs a handful of faults,
 * where malloc'd memory costs one per 4 KB page, 384 here. Every other
 * test gave its chunks back, so this block's chunk is fresh. */
TEST(a_large_table_costs_few_page_faults)
{
    if (!thp_possible()) {
        printf("  skipped: transparent huge pages are off on this kernel\n");
        return;
    }
    size_t len = 1536u << 10;
    CHECK(flamme_bulk_mapped() == 0);
    long fb0 = thp_fallbacks(), f0 = minflt();
    uint8_t *p = flamme_bulk_alloc(len);
    CHECK(p != NULL);
    if (!p)
        return;
    int fd = open("/proc/self/exe", O_RDONLY);
    size_t got = 0;
    while (fd >= 0 && got < len) { /* a file read fills it, as the loaders do */
        ssize_t r = pread(fd, p + got, len - got, 0);
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    if (got < len)
        memset(p + got, 1, len - got);
    if (fd >= 0)
        close(fd);
    long faults = minflt() - f0, fb = thp_fallbacks() - fb0;
    printf("  info: %zu KB filled with %ld page faults (%ld huge page fallbacks)\n", len >> 10,
           faults, fb);
    if (fb == 0)
        CHECK(faults < 64);
    else
        printf("  skipped: the kernel had no free huge page\n");
    flamme_bulk_free(p);
}

int main(void)
{
    RUN(the_compressor_comes_from_a_chunk);
    RUN(small_blocks_share_chunks_until_the_allowance);
    RUN(blocks_keep_their_bytes_through_any_mix);
    RUN(the_block_carved_last_grows_in_place);
    RUN(chunks_are_given_back);
    RUN(a_large_table_costs_few_page_faults);
    return CHECK_DONE();
}
