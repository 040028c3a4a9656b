/*
 * common/bulk.h — memory for the tables a process reads or builds once:
 * unwind rows read back from the cache, kept symbols, the line index; and
 * the profile writer's compressor.
 *
 * Why not malloc: glibc serves each such block with its own mapping, so
 * every 4 KB page of it costs the program a page fault when first touched
 * (the read that fills it). Where a fault is expensive (11-15 µs each
 * measured on a Firecracker microVM, where reading a 1.26 MB table into
 * malloc'd memory took 5.8 ms and into a transparent huge page 0.2-0.3 ms)
 * those faults were most of what the agent cost a short process such as
 * each compiler run of `dune build`. Blocks of FLAMME_BULK_MIN bytes and up
 * are carved from 2 MB-aligned chunks the kernel is asked to back with
 * transparent huge pages (madvise MADV_HUGEPAGE; kernels set to "never", or
 * without a free huge page, back them with small pages as before). Smaller
 * blocks are carved there too, until FLAMME_BULK_SMALL_MAX bytes of them
 * have been in the process's life, then go to malloc: the tables of a
 * small program's libraries (libc's, the loader's: 9-62 KB each) are what
 * it reads at start-up, and a freed block that is not the last carved
 * leaves a hole nothing reuses, so a program that loads and unloads
 * libraries for ever must not carve them for ever. A chunk is unmapped
 * once every block in it is freed.
 *
 * Who: the builder and the writer (writer/cfi_cache.c, cfi_build.c,
 * symbols.c, lines.c), the profile writer (common/profile.c, zlib's
 * state) and the tools that link them; any thread, serialised
 * by a lock. async-signal-safe: no. The handler only reads blocks, which
 * are freed under the same rules as before (agent/cfi.c, writer/).
 */
#ifndef FLAMME_COMMON_BULK_H
#define FLAMME_COMMON_BULK_H
#include <stddef.h>

/* Blocks from this size up come from huge-page chunks. */
#define FLAMME_BULK_MIN ((size_t)64 << 10)

/* Bytes of smaller blocks carved from chunks in a process's life, at most
 * (the rest come from malloc). */
#define FLAMME_BULK_SMALL_MAX ((size_t)1 << 20)

/* n bytes aligned to 16, uninitialised. Returns NULL when out of memory
 * (n == 0 gives a valid block of its own). */
void *flamme_bulk_alloc(size_t n);

/* As flamme_bulk_alloc, but counted against the small blocks' allowance
 * whatever its size (malloc'd past it): for what a process makes once and
 * may make again, so that making it for ever leaves no holes for ever
 * (a profile's compressor: one per profile, one per segment of a
 * continuous one). Not for blocks that grow: flamme_bulk_realloc counts
 * only small blocks' growth. */
void *flamme_bulk_alloc_counted(size_t n);

/* Grows or shrinks p (from flamme_bulk_alloc/realloc, or NULL) to n bytes,
 * keeping its contents up to the smaller size; in place when p is the last
 * block of its chunk and the chunk has room. Returns the block, or NULL
 * when out of memory, p then untouched. */
void *flamme_bulk_realloc(void *p, size_t n);

/* Frees p (NULL allowed). */
void flamme_bulk_free(void *p);

/* Bytes mapped for chunks now (for tests and the benchmark). */
size_t flamme_bulk_mapped(void);

/* Bytes of small blocks that may still be carved from chunks (for tests). */
size_t flamme_bulk_small_left(void);

/* In a fork child: the lock may have been held by a thread that is gone.
 * Returns 1 if it was free at the fork (the chunks are whole), else 0. */
int flamme_bulk_atfork_child(void);

#endif
