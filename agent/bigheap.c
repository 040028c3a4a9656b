/*
 * agent/bigheap.c — the agent's blocks, mapped by the agent itself rather
 * than by glibc's malloc: large ones a mapping each, small ones carved
 * from chunks whose pages are populated ahead (the second part, below).
 *
 * Why: glibc serves a request at or above its mmap threshold (128 KB at
 * first) with a mapping of its own, and when the program frees such a
 * block glibc raises the threshold to the block's size, and the heap's
 * trim threshold to twice that, for the whole process. The agent's freeing
 * of a 1.9 MB table it had built (writer/cfi_build.c, a first run with no
 * kept tables) made the program's own blocks of up to 1.9 MB come from the
 * heap from then on: tests/unwind/growstack.ml, whose fibers' stacks grow
 * past 128 KB and are freed again, ran in 0.07 s of CPU under such a run
 * and 1.2-2.4 s alone or under a run with kept tables. A profile of
 * another program, not of this one.
 *
 * libflamme.so is linked with --wrap for malloc, calloc, realloc and free
 * (mk/agent.mk), so the agent's own calls come here: blocks of BIG_MIN
 * bytes and up get a mapping of their own, as glibc would have given them,
 * and the rest are carved from chunks of the agent's own (below), so glibc
 * never maps nor frees a mapping for the agent (if a chunk cannot be had,
 * a block comes from glibc after all). Blocks libc functions return
 * (strdup...) are glibc's and go back to it (a small block is known by its
 * chunk, a large one by its table). Any thread, under a lock; never the
 * signal handler, which allocates nothing.
 *
 * Not in the flamme OCaml library (FLAMME_LINKED): the program's own link
 * (dune's or ocamlfind's) makes it, without the --wrap, so there the agent
 * allocates from glibc as before.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <malloc.h>
#include <unistd.h>

#include "agent/bigheap.h"
#include "common/forkchild.h"

#ifndef FLAMME_LINKED

/* Below glibc's lowest mmap threshold (128 KB), with room for its chunk
 * overhead: no request of the agent's is ever glibc's to map. */
#define BIG_MIN ((size_t)120 << 10)
/* A block starts this far into its mapping, after its length. */
#define HEAD 16
/* Live large blocks at most; past it they go to glibc (the agent keeps a
 * few dozen: its tables, rings and buffers). */
#define BIG_MAX 1024

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t m);
void *__real_realloc(void *p, size_t n);
void __real_free(void *p);

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static uintptr_t bases[BIG_MAX]; /* mapping of each live block, 0: free slot (under lock) */
static int nbig;                 /* slots in use at most (under lock) */

/* The slot of the block at p, or -1 (not one of ours). The caller holds
 * lock. */
static int slot_of(const void *p)
{
    uintptr_t base = (uintptr_t)p - HEAD;
    for (int i = 0; i < nbig; i++)
        if (bases[i] == base)
            return i;
    return -1;
}

/* 1 if p (non-NULL) may be one of ours: a block starts HEAD bytes into a
 * page. glibc's blocks may too, so the table decides. */
static int maybe_ours(const void *p)
{
    return ((uintptr_t)p & 4095) == HEAD;
}

static size_t map_len(size_t n)
{
    long pg = sysconf(_SC_PAGESIZE);
    size_t page = pg > 0 ? (size_t)pg : 4096;
    return (n + HEAD + page - 1) & ~(page - 1);
}

/* A fresh mapping for n bytes (zeroed), registered; its pages populated
 * if fill is set (the caller writes the block: malloc's content is
 * undefined, so whoever asks for it fills it), else mapped as they are
 * first touched (calloc's tables may stay sparse). Returns the block, or
 * NULL (too large, no mapping, or the table full: the caller asks glibc). */
static void *big_map(size_t n, int fill)
{
    if (n > SIZE_MAX / 2)
        return NULL;
    size_t len = map_len(n);
    void *m = mmap(NULL, len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | (fill ? MAP_POPULATE : 0), -1, 0);
    if (m == MAP_FAILED)
        return NULL;
    pthread_mutex_lock(&lock);
    int i = 0;
    while (i < nbig && bases[i])
        i++;
    if (i == BIG_MAX) {
        pthread_mutex_unlock(&lock);
        munmap(m, len);
        return NULL;
    }
    bases[i] = (uintptr_t)m;
    if (i == nbig)
        nbig++;
    pthread_mutex_unlock(&lock);
    *(size_t *)m = len;
    return (char *)m + HEAD;
}

/* Populates the pages of [p, p + n), which the caller is about to write:
 * one call instead of a page fault a page (small blocks, below). Best
 * effort (MADV_POPULATE_WRITE: Linux 5.14). */
static void populate(void *p, size_t n)
{
    uintptr_t lo = (uintptr_t)p & ~(uintptr_t)4095, hi = ((uintptr_t)p + n + 4095) & ~(uintptr_t)4095;
    madvise((void *)lo, hi - lo, MADV_POPULATE_WRITE);
}

/* ---- Small blocks: size classes carved from populated chunks ----
 *
 * Why: on a VM a page fault can cost far more than the page. On this
 * project's VM (2026-12-02) a first touch of an anonymous page took
 * 21-26 us (14-19 us of the thread's CPU), where MADV_POPULATE_WRITE
 * mapped pages at 0.4-1.6 us each; a
 * short compile under the agent (ocamlopt -c, 999 Hz) took ~400 more
 * faults than alone, most of them the writer's small blocks (frame names,
 * line rows, interning tables, zlib's state) landing on fresh pages of
 * glibc's arena one at a time. Here a chunk's pages are populated ahead
 * of the carving, 64 KB at a time, so the blocks land on mapped pages.
 * A freed block goes on its class's list for the next block of the class;
 * nothing goes back to the kernel (as with glibc's arenas, in practice).
 * A block starts SMALL_HEAD bytes after a head holding its class. */
#define SMALL_CHUNK ((size_t)1 << 20)
#define SMALL_AHEAD ((size_t)64 << 10)
#define SMALL_HEAD 16
#define SMALL_CHUNKS 4096 /* 4 GB of small blocks at most, then glibc's */
#define NCLASS 26         /* 32, 48, 64, 96 ... 128 KB + 64 KB: past BIG_MIN + SMALL_HEAD */

static uintptr_t chunks[SMALL_CHUNKS]; /* bases, sorted (under lock) */
static int nchunks;                    /* (under lock) */
static char *carve, *carve_end, *populated; /* the chunk carved from (under lock) */
static void *freelist[NCLASS];              /* (under lock) */
_Static_assert(((NCLASS - 1) & 1 ? (size_t)48 : (size_t)32) << ((NCLASS - 1) / 2) >=
                   BIG_MIN + SMALL_HEAD,
               "the largest class holds any block below BIG_MIN");

/* A class's block size, head included. */
static size_t class_size(int c)
{
    return (c & 1 ? (size_t)48 : (size_t)32) << (c / 2);
}

static int class_of(size_t n)
{
    size_t need = n + SMALL_HEAD;
    int c = 0;
    while (class_size(c) < need)
        c++;
    return c;
}

/* 1 if p lies in one of the small chunks. The caller holds lock. */
static int in_chunks(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    int lo = 0, hi = nchunks;
    while (lo < hi) { /* the last base <= a */
        int mid = (lo + hi) / 2;
        if (chunks[mid] <= a)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo > 0 && a - chunks[lo - 1] < SMALL_CHUNK;
}

/* A new chunk to carve from, registered. Returns 0, or -1 (no mapping, or
 * the table full). The caller holds lock. */
static int small_chunk(void)
{
    if (nchunks == SMALL_CHUNKS)
        return -1;
    void *m = mmap(NULL, SMALL_CHUNK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return -1;
    int i = nchunks++;
    while (i > 0 && chunks[i - 1] > (uintptr_t)m) {
        chunks[i] = chunks[i - 1];
        i--;
    }
    chunks[i] = (uintptr_t)m;
    carve = populated = m;
    carve_end = (char *)m + SMALL_CHUNK;
    return 0;
}

/* A block of at least n bytes (n < BIG_MIN), zeroed if zero is set.
 * Returns NULL when no chunk can be had (the caller asks glibc). */
static void *small_alloc(size_t n, int zero)
{
    int c = class_of(n);
    size_t sz = class_size(c);
    pthread_mutex_lock(&lock);
    char *b = freelist[c];
    if (b) {
        freelist[c] = *(void **)(b + SMALL_HEAD);
        pthread_mutex_unlock(&lock);
        if (zero)
            memset(b + SMALL_HEAD, 0, n);
        return b + SMALL_HEAD;
    }
    if ((!carve || (size_t)(carve_end - carve) < sz) && small_chunk() != 0) {
        pthread_mutex_unlock(&lock);
        return NULL;
    }
    b = carve;
    carve += sz;
    if (carve > populated) {
        /* Without MADV_POPULATE_WRITE (before Linux 5.14) the pages
         * fault in as they are touched, as glibc's do. */
        size_t len = ((size_t)(carve - populated) + SMALL_AHEAD - 1) / SMALL_AHEAD * SMALL_AHEAD;
        if (len > (size_t)(carve_end - populated))
            len = (size_t)(carve_end - populated);
        populate(populated, len);
        populated += len;
    }
    pthread_mutex_unlock(&lock);
    *(uint32_t *)b = (uint32_t)c; /* a fresh chunk is zero: no memset */
    return b + SMALL_HEAD;
}

/* The class of p if it is a small block, else -1. */
static int small_class(const void *p)
{
    pthread_mutex_lock(&lock);
    int ours = in_chunks(p);
    pthread_mutex_unlock(&lock);
    return ours ? (int)*(const uint32_t *)((const char *)p - SMALL_HEAD) : -1;
}

static void small_free(void *p, int c)
{
    pthread_mutex_lock(&lock);
    *(void **)p = freelist[c];
    freelist[c] = (char *)p - SMALL_HEAD;
    pthread_mutex_unlock(&lock);
}

__attribute__((visibility("hidden"))) void *__wrap_malloc(size_t n)
{
    void *p = n >= BIG_MIN ? big_map(n, 1) : small_alloc(n, 0);
    return p ? p : __real_malloc(n);
}

__attribute__((visibility("hidden"))) void *__wrap_calloc(size_t n, size_t m)
{
    if (m && n > SIZE_MAX / m)
        return __real_calloc(n, m); /* glibc's overflow error */
    /* a fresh mapping is zero */
    void *p = n * m >= BIG_MIN ? big_map(n * m, 0) : small_alloc(n * m, 1);
    return p ? p : __real_calloc(n, m);
}

__attribute__((visibility("hidden"))) void __wrap_free(void *p)
{
    if (!p)
        return;
    int c = small_class(p);
    if (c >= 0) {
        small_free(p, c);
        return;
    }
    if (maybe_ours(p)) {
        pthread_mutex_lock(&lock);
        int i = slot_of(p);
        if (i >= 0) {
            bases[i] = 0;
            while (nbig > 0 && !bases[nbig - 1])
                nbig--;
        }
        pthread_mutex_unlock(&lock);
        if (i >= 0) {
            void *m = (char *)p - HEAD;
            munmap(m, *(size_t *)m);
            return;
        }
    }
    __real_free(p);
}

__attribute__((visibility("hidden"))) void *__wrap_realloc(void *p, size_t n)
{
    if (!p)
        return __wrap_malloc(n);
    if (n == 0) { /* what glibc's realloc does with any block: free it */
        __wrap_free(p);
        return NULL;
    }
    int c = small_class(p);
    if (c >= 0) {
        size_t cap = class_size(c) - SMALL_HEAD;
        if (n <= cap)
            return p;
        void *q = __wrap_malloc(n);
        if (q) {
            memcpy(q, p, cap);
            small_free(p, c);
        }
        return q; /* NULL: p is unchanged */
    }
    if (maybe_ours(p)) {
        /* Ours stays ours, whatever the size (moved by the kernel, no copy).
         * The lock is held across the mremap: once the old mapping is gone
         * another thread's big_map may be given its address, and until the
         * slot names the new one a free of that block would find this slot
         * first, unmap it, and leave its own slot naming a hole. */
        pthread_mutex_lock(&lock);
        int i = slot_of(p);
        if (i >= 0) {
            void *m = (char *)p - HEAD, *q = NULL;
            size_t len = *(size_t *)m, nlen = n > SIZE_MAX / 2 ? 0 : map_len(n);
            void *nm = !nlen ? MAP_FAILED : nlen == len ? m : mremap(m, len, nlen, MREMAP_MAYMOVE);
            if (nm != MAP_FAILED) {
                /* A block grown is filled next, as a malloc'd one is
                 * (arrays doubled: at most what they had again). */
                if (nlen > len)
                    populate((char *)nm + len, nlen - len);
                *(size_t *)nm = nlen;
                bases[i] = (uintptr_t)nm;
                q = (char *)nm + HEAD;
            }
            pthread_mutex_unlock(&lock);
            return q; /* NULL: p is unchanged, as with glibc */
        }
        pthread_mutex_unlock(&lock);
    }
    if (n >= BIG_MIN) {
        void *q = big_map(n, 1);
        if (q) {
            size_t old = malloc_usable_size(p);
            memcpy(q, p, old < n ? old : n);
            __real_free(p);
            return q;
        }
    }
    return __real_realloc(p, n);
}

int flamme_bigheap_atfork_child(void)
{
    return flamme_mutex_reset_child(&lock);
}

#else

int flamme_bigheap_atfork_child(void)
{
    return 1;
}

#endif
