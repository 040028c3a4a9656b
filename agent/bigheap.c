/*
 * agent/bigheap.c — the agent's large blocks, mapped by the agent itself
 * rather than by glibc's malloc.
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
 * and the rest go to glibc, which then never maps nor frees a mapping for
 * the agent. Blocks libc functions return (strdup...) are glibc's and go
 * back to it. Any thread, under a lock; never the signal handler, which
 * allocates nothing.
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

/* A fresh mapping for n bytes (zeroed), registered. Returns the block, or
 * NULL (too large, no mapping, or the table full: the caller asks glibc). */
static void *big_map(size_t n)
{
    if (n > SIZE_MAX / 2)
        return NULL;
    size_t len = map_len(n);
    void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
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

__attribute__((visibility("hidden"))) void *__wrap_malloc(size_t n)
{
    void *p = n >= BIG_MIN ? big_map(n) : NULL;
    return p ? p : __real_malloc(n);
}

__attribute__((visibility("hidden"))) void *__wrap_calloc(size_t n, size_t m)
{
    if (m && n > SIZE_MAX / m)
        return __real_calloc(n, m); /* glibc's overflow error */
    void *p = n * m >= BIG_MIN ? big_map(n * m) : NULL; /* a fresh mapping is zero */
    return p ? p : __real_calloc(n, m);
}

__attribute__((visibility("hidden"))) void __wrap_free(void *p)
{
    if (p && maybe_ours(p)) {
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
        void *q = big_map(n);
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
