/*
 * writer/lines.h — source positions (file, line) for code addresses of one
 * ELF file, from its DWARF .debug_line (OCaml compilers with frame pointers
 * emit it even without -g; with -g always). Built and used by the writer
 * thread (allocates, reads the file with pread); never from a handler.
 */
#ifndef FLAMME_WRITER_LINES_H
#define FLAMME_WRITER_LINES_H
#include <stddef.h>
#include <stdint.h>

typedef struct flamme_lines flamme_lines;

/* Reads the .debug_line section of the ELF file at path (DWARF versions 2
 * to 5) and where each line-number sequence lies; a unit's rows are made on
 * the first lookup in it. Returns the table, or NULL when the file is
 * unreadable, not ELF, or has no usable line information. */
flamme_lines *flamme_lines_open(const char *path);

/* Source position of the instruction at vaddr (an address in the file's own
 * virtual address space: the "offset" writer/symbols.c returns); may run
 * the line-number program of vaddr's unit (allocates). Returns 1 and sets
 * *file (valid until flamme_lines_close) and *line, or 0. */
int flamme_lines_lookup(flamme_lines *l, uint64_t vaddr, const char **file, uint32_t *line);

/* CPU time (this thread's clock) the lookups have spent so far making
 * units' rows: at most once per unit, so bounded by the file's size. */
uint64_t flamme_lines_run_ns(const flamme_lines *l);

/* How many units the lookups ran from .debug_line (not read back from the
 * rows an earlier process kept: flamme_lines_keep). */
size_t flamme_lines_units_run(const flamme_lines *l);

/* Keeps the rows of the units l ran (from .debug_line) for later
 * processes, with those kept before, when l's index is kept (a large
 * .debug_line, flamme_lines_kept_min): they are read back instead of run
 * again. Nothing to do when no unit was run since the last call. Best
 * effort. */
void flamme_lines_keep(flamme_lines *l);

void flamme_lines_close(flamme_lines *l);

/* A .debug_line of at most this many bytes (16 MB) is copied whole when the
 * table is opened; a larger one is read again, a window at a time, when
 * its units are run (the file checked to be the one opened). Tests lower
 * it to reach the second way. */
extern uint64_t flamme_lines_whole_max;

/* A .debug_line of at least this many bytes (256 KB) has its index (where
 * each unit's code lies, not the units' rows) kept between processes in
 * the cache directory (writer/cfi_cache.h), read back instead of built
 * from .debug_aranges and .debug_info. Tests lower it. */
extern uint64_t flamme_lines_kept_min;

#endif
