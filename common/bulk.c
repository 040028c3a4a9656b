/*
 * common/bulk.c — huge-page chunks for once-read tables (see bulk.h).
 *
 * A chunk is a 2 MB-aligned anonymous mapping, 2 MB or a multiple when one
 * block needs more, advised MADV_HUGEPAGE. Blocks under FLAMME_BULK_MIN
 * are carved too while the process's allowance for them lasts (bulk.h),
 * then malloc'd. A block is carved upwards from
 * the first chunk with room for it (a new one when none has: a table
 * larger than what is left in the others does not strand their room).
 * Each chunk counts its live blocks and is unmapped when the last is freed
 * (a spare kept for reuse would hold 2 MB the program never gets back).
 * Freeing or growing the block carved last in its chunk works in place, so
 * the arrays the builders grow by doubling, and the sort's scratch, leave
 * no holes. Every block starts after a 16-byte head naming its chunk
 * (NULL: the block came from malloc).
 * Under AddressSanitizer the parts of a chunk not handed out, and the
 * heads of the blocks in it, are poisoned, so reads past a table's end are
 * reported as they were with malloc.
 */
#include "common/bulk.h"
#include "common/forkchild.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#define CHUNK ((size_t)2 << 20) /* x86-64's transparent huge page */

struct chunk {
    size_t len;         /* bytes mapped, a multiple of CHUNK */
    size_t used;        /* bytes from the chunk's start handed out (or this header) */
    size_t live;        /* blocks not yet freed */
    struct chunk *next; /* in chunks; the size keeps blocks 16-aligned */
};

struct head {
    size_t size;      /* bytes the caller asked for */
    struct chunk *in; /* NULL: malloc'd */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct chunk *chunks; /* every chunk, newest first (under lock) */
static size_t mapped;        /* bytes of all chunks (under lock) */
static size_t small_carved;  /* spans of small blocks ever carved (under lock) */

/* Bytes a block of n takes in a chunk, head included; 0 on overflow. */
static size_t span_of(size_t n)
{
    if (n > SIZE_MAX / 2)
        return 0;
    return (sizeof(struct head) + n + 15) & ~(size_t)15;
}

/* Maps a chunk of len bytes (a multiple of CHUNK) at a CHUNK boundary, the
 * alignment a huge page needs. Returns NULL when mmap fails. */
static struct chunk *map_chunk(size_t len)
{
    size_t over = len + CHUNK;
    char *m = mmap(NULL, over, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return NULL;
    char *a = (char *)(((uintptr_t)m + CHUNK - 1) & ~(uintptr_t)(CHUNK - 1));
    if (a > m)
        munmap(m, (size_t)(a - m));
    if (m + over > a + len)
        munmap(a + len, (size_t)(m + over - (a + len)));
    /* Failing (THP not built in) leaves small pages: only slower. */
    madvise(a, len, MADV_HUGEPAGE);
    struct chunk *c = (struct chunk *)(void *)a;
    c->len = len;
    c->used = sizeof *c;
    c->live = 0;
    c->next = chunks;
    chunks = c;
    POISON(a + sizeof *c, len - sizeof *c);
    mapped += len;
    return c;
}

static void unmap_chunk(struct chunk *c)
{
    struct chunk **pp = &chunks;
    while (*pp != c)
        pp = &(*pp)->next;
    *pp = c->next;
    mapped -= c->len;
    UNPOISON(c, c->len);
    munmap(c, c->len);
}

/* The block of span bytes carved at c's top; the caller holds lock. */
static struct head *carve(struct chunk *c, size_t span, size_t n)
{
    struct head *h = (struct head *)(void *)((char *)c + c->used);
    c->used += span;
    c->live++;
    UNPOISON(h, sizeof *h + n);
    h->size = n;
    h->in = c;
    POISON(h, sizeof *h);
    return h;
}

/* p's head, readable again (a chunk block's head is poisoned under ASan). */
static struct head *head_of(void *p)
{
    struct head *h = (struct head *)p - 1;
    UNPOISON(h, sizeof *h);
    return h;
}

/* A block of n bytes (span with its head) from the first chunk with room,
 * or from a new one. The caller holds lock. Returns NULL when out of
 * memory. */
static struct head *chunk_alloc(size_t span, size_t n)
{
    for (struct chunk *c = chunks; c; c = c->next)
        if (c->len - c->used >= span)
            return carve(c, span, n);
    size_t len = (sizeof(struct chunk) + span + CHUNK - 1) & ~(CHUNK - 1);
    struct chunk *c = len >= span ? map_chunk(len) : NULL;
    return c ? carve(c, span, n) : NULL;
}

/* A block of n bytes; counted: against the allowance whatever its size
 * (every small block is). */
static void *bulk_alloc(size_t n, int counted)
{
    size_t span = span_of(n);
    if (!span)
        return NULL;
    struct head *h = NULL;
    pthread_mutex_lock(&lock);
    int small = counted || n < FLAMME_BULK_MIN;
    if (!small || FLAMME_BULK_SMALL_MAX - small_carved >= span) {
        h = chunk_alloc(span, n);
        if (h && small)
            small_carved += span;
    }
    pthread_mutex_unlock(&lock);
    if (!h && small) {
        /* Past the allowance (or no chunk could be mapped). */
        if (!(h = malloc(sizeof *h + n)))
            return NULL;
        h->size = n;
        h->in = NULL;
    }
    return h ? h + 1 : NULL;
}

void *flamme_bulk_alloc(size_t n)
{
    return bulk_alloc(n, 0);
}

void *flamme_bulk_alloc_counted(size_t n)
{
    return bulk_alloc(n, 1);
}

static int is_top(const struct head *h)
{
    return (const char *)h + span_of(h->size) == (const char *)h->in + h->in->used;
}

/* Gives back h's block; the caller holds lock. */
static void chunk_free(struct head *h)
{
    struct chunk *c = h->in;
    if (is_top(h))
        c->used -= span_of(h->size);
    POISON(h, span_of(h->size));
    if (--c->live == 0)
        unmap_chunk(c);
}

void flamme_bulk_free(void *p)
{
    if (!p)
        return;
    struct head *h = head_of(p);
    if (!h->in) {
        free(h);
        return;
    }
    pthread_mutex_lock(&lock);
    chunk_free(h);
    pthread_mutex_unlock(&lock);
}

void *flamme_bulk_realloc(void *p, size_t n)
{
    if (!p)
        return flamme_bulk_alloc(n);
    struct head *h = head_of(p);
    size_t span = span_of(n);
    if (!span)
        return NULL;
    if (!h->in && n < FLAMME_BULK_MIN) {
        struct head *g = realloc(h, sizeof *g + n);
        if (!g)
            return NULL;
        g->size = n;
        return g + 1;
    }
    if (h->in) {
        pthread_mutex_lock(&lock);
        struct chunk *c = h->in;
        size_t old = span_of(h->size);
        int done = 0;
        /* Growth of a small block counts against the allowance. */
        size_t more = n < FLAMME_BULK_MIN && span > old ? span - old : 0;
        if (is_top(h) && c->len - (c->used - old) >= span &&
            FLAMME_BULK_SMALL_MAX - small_carved >= more) {
            c->used = c->used - old + span; /* grown or shrunk at the top */
            small_carved += more;
            done = 1;
        } else if (n <= h->size) {
            done = 1; /* shrunk below another block: the tail stays unused */
        }
        if (done) {
            if (n < h->size)
                POISON((char *)p + n, h->size - n);
            UNPOISON(p, n);
            h->size = n;
            POISON(h, sizeof *h);
        }
        pthread_mutex_unlock(&lock);
        if (done)
            return p;
    }
    void *q = flamme_bulk_alloc(n);
    if (!q)
        return NULL;
    memcpy(q, p, h->size < n ? h->size : n);
    flamme_bulk_free(p);
    return q;
}

size_t flamme_bulk_small_left(void)
{
    pthread_mutex_lock(&lock);
    size_t left = FLAMME_BULK_SMALL_MAX - small_carved;
    pthread_mutex_unlock(&lock);
    return left;
}

size_t flamme_bulk_mapped(void)
{
    pthread_mutex_lock(&lock);
    size_t m = mapped;
    pthread_mutex_unlock(&lock);
    return m;
}

int flamme_bulk_atfork_child(void)
{
    return flamme_mutex_reset_child(&lock);
}
