/*
 * writer/cfi_build.h — the builder of the .eh_frame unwind rows that the
 * stack walker looks up (agent/cfi.h: flamme_cfi_lookup_sigsafe). The
 * tables are published in the layout of common/cfi_tables.h.
 * Who: the writer thread, and a thread that just loaded a library
 * (flamme_writer_libraries_changed); serialised inside; allocates, reads
 * ELF files. Never a signal handler.
 */
#ifndef FLAMME_WRITER_CFI_BUILD_H
#define FLAMME_WRITER_CFI_BUILD_H
#include <stdint.h>

#include "common/frame_sites.h"

/* Parses the .eh_frame (via .eh_frame_hdr or section headers) of the ELF
 * file `path` mapped with load bias `bias` (runtime address = st_value +
 * bias), covering runtime addresses [lo, hi), and publishes its rows.
 * Writer thread only. Returns the number of rows added, or -1 (file
 * unreadable or without CFI). */
long flamme_cfi_add_module(const char *path, uint64_t bias, uint64_t lo, uint64_t hi);

/* Hands the builder the reader of OCaml's frame tables (the agent's
 * runtime_hooks/frametable.c, through writer/writer_host.h), so that the
 * rows at OCaml call sites are checked against their frame descriptors
 * (common/frame_sites.h); NULL: not checked. Before modules are added. */
void flamme_cfi_set_frame_sites(const struct flamme_frame_sites_ops *ops);

/* Frees every table (at exit, after sampling stopped and handlers are done). */
void flamme_cfi_free_all(void);

/* Adds every readable r-x file mapping of /proc/self/maps, except the file
 * skip (a path as in maps, or any path naming the same inode; NULL = none)
 * and mappings already added (same file and range). Of the file fp_file
 * (likewise; NULL = none), whose code has frame pointers, only the rows of
 * the OCaml runtime's stack switches (CFA found in memory) are kept: the
 * frame-pointer chain skips the C caller of caml_start_program, these rows
 * do not. Deleted files are read through /proc/self/map_files.
 * Bias from the ELF program headers. The [vdso] is added once, from its
 * image in memory; anonymous code is not added. Returns the number of
 * modules added (0 if none or maps unreadable). */
int flamme_cfi_add_from_maps(const char *fp_file, const char *skip);

/* In a fork child: 1 if no thread was building tables at the fork (they
 * are whole), else 0; the builder's lock is usable again either way. */
int flamme_cfi_build_atfork_child(void);

/* Published modules, rows, and bytes they occupy (for summaries/tests). */
void flamme_cfi_stats(uint64_t *modules, uint64_t *rows, uint64_t *bytes);

#endif
