/*
 * writer/cfi_cache.h — unwind rows kept on disk between processes.
 *
 * Building the rows of a large executable is the largest cost a profiled
 * process pays once (the OCaml compiler: 162,000 rows, about 5 ms), and a
 * build under `flamme record` starts the same compiler for every file. The
 * rows of a file depend only on that file, the range it is mapped at (in
 * its own addresses, not the process's) and the builder, so they are kept
 * in one file per (file, range) in the cache directory and read back by the
 * next process instead of being built again.
 *
 * The same directory keeps other per-file tables as plain bytes
 * (flamme_kept_load/store): the symbols of large executables
 * (writer/symbols.c).
 *
 * Who: writer/cfi_build.c, under its build lock (agent start-up or the
 * writer thread), and writer/symbols.c (writer thread). Allocates, opens
 * files. Never a signal handler.
 *
 * Trust: a cached table is used only if its header names the same builder
 * (this flamme's own build-id), the same file (device, inode, size,
 * modification and change times) and the same range, and its rows are well
 * formed (offsets increasing inside the range, rule kinds the builder
 * makes). A file that fails any check is ignored. The walker reads every
 * stack word through checked reads whatever a row says, so even a row that
 * passed these checks wrongly could only give a wrong stack, never a fault.
 */
#ifndef FLAMME_WRITER_CFI_CACHE_H
#define FLAMME_WRITER_CFI_CACHE_H
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "common/cfi_tables.h"

/* What names a table: the file it was built from and the range. */
struct flamme_cfi_key {
    const struct stat *st; /* of the file the rows come from */
    uint64_t link_lo;      /* the range's start in the file's own addresses (lo - bias) */
    uint64_t len;          /* hi - lo */
    int switch_only;
};

/* Sets the cache directory (created 0700 when first written; NULL or "" turns
 * the cache off). Call before any table is built. */
void flamme_cfi_cache_configure(const char *dir);

/* Tables with fewer rows are not worth a file: they build in less than
 * the time it takes to open one. 8,192 until 2026-11-28; where a page
 * fault costs 11-15 us, building libm's 6,279 rows (their .eh_frame
 * copied, the row vector grown) cost more than reading them back, and an
 * OCaml hello world under the agent at 1 Hz went from +10.3 to +8.2 ms. */
#define FLAMME_CFI_CACHE_MIN_ROWS 1024

/* Reads the table for k into a new module covering [lo, lo + k->len) (name
 * copied). Returns it, or NULL when the cache is off, has no such table, or
 * the table fails a check. */
struct cfi_mod *flamme_cfi_cache_load(const struct flamme_cfi_key *k, uint64_t lo, const char *name);

/* Writes m's rows as the table for k (through a new file renamed into
 * place; an older table of the same name is replaced whole), and keeps the
 * directory at most FLAMME_CFI_CACHE_MAX_FILES tables and
 * FLAMME_CFI_CACHE_MAX_BYTES, dropping the least recently used. Best
 * effort: failures leave the cache as it was. */
void flamme_cfi_cache_store(const struct flamme_cfi_key *k, const struct cfi_mod *m);

/* Any other table kept for one file, as bytes (the symbols of a large
 * executable: writer/symbols.c), under the same key but the range, with
 * kind (up to 7 characters) as the table's magic. The caller checks what
 * it reads: only the key is checked here. */
#define FLAMME_KEPT_MAX_BLOB (64ull << 20)

/* The bytes kept for kind and the file of st: a new block of
 * common/bulk.h (*len set; free it with flamme_bulk_free), or NULL when
 * there are none (or the cache is off). */
void *flamme_kept_load(const char *kind, const struct stat *st, size_t *len);

/* Whether tables are kept at all (a cache directory is set): a caller
 * skips the work of making what it would keep when not. */
int flamme_kept_on(void);

/* Keeps a then b (b may be NULL with blen 0) for kind and the file of st,
 * replacing what was kept. Best effort. */
void flamme_kept_store(const char *kind, const struct stat *st, const void *a, size_t alen,
                       const void *b, size_t blen);

#define FLAMME_CFI_CACHE_MAX_FILES 256
#define FLAMME_CFI_CACHE_MAX_BYTES (128ull << 20) /* ocamlopt.opt: 0.97 + 1.26 MB */

#endif
