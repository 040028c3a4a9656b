/*
 * tests/unit/blocks.h — what the allocator tests share (test_bulk.c and
 * test_bigheap.c): a pattern that tells every block's bytes
 * apart, and whether pages are resident. Test code only.
 */
#ifndef FLAMME_TESTS_BLOCKS_H
#define FLAMME_TESTS_BLOCKS_H
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>

/* The byte block k holds at position i. */
static inline uint8_t block_pat(size_t k, size_t i)
{
    return (uint8_t)(k * 131 + i * 7 + (i >> 9));
}

/* 1 if p[0..n) is block k's pattern. */
static inline int block_holds(const uint8_t *p, size_t k, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != block_pat(k, i))
            return 0;
    return 1;
}

static inline void block_fill(uint8_t *p, size_t k, size_t from, size_t n)
{
    for (size_t i = from; i < n; i++)
        p[i] = block_pat(k, i);
}

/* 1 if this kernel populates pages on request (MADV_POPULATE_WRITE,
 * Linux 5.14); the code under test then does, else it leaves pages to
 * fault in. */
static inline int pages_can_populate(void)
{
    void *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    int can = m != MAP_FAILED && madvise(m, 4096, MADV_POPULATE_WRITE) == 0;
    if (m != MAP_FAILED)
        munmap(m, 4096);
    return can;
}

/* How many of the pages holding [p, p + n) are not resident (at most 64
 * pages), or -1. */
static inline int pages_absent(const void *p, size_t n)
{
    uintptr_t lo = (uintptr_t)p & ~(uintptr_t)4095, hi = ((uintptr_t)p + n + 4095) & ~(uintptr_t)4095;
    unsigned char v[64];
    size_t np = (hi - lo) / 4096;
    if (np > sizeof v || mincore((void *)lo, hi - lo, v) != 0)
        return -1;
    int k = 0;
    for (size_t i = 0; i < np; i++)
        k += !(v[i] & 1);
    return k;
}
#endif
