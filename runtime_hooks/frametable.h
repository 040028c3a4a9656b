/*
 * runtime_hooks/frametable.h — code addresses for Gc.Memprof callstacks.
 * A Memprof callstack (OCaml 5.3 native) is an array of backtrace slots:
 * a frame descriptor's address (its first word is the return address), or,
 * for the leaf of an allocation made by OCaml code compiled with -g, the
 * address of that allocation's debuginfo, which names no code. This module
 * indexes the program's frame tables once (debuginfo -> the return address
 * of the descriptor that holds it) so that both kinds give an address the
 * writer symbolizes like any sampled pc.
 *
 * The same descriptors give the size of the calling frame at every call
 * from OCaml code, which the unwind rows are checked against
 * (common/frame_sites.h): flamme_frametable_image_sites reads them from an
 * executable's or library's file.
 *
 * Who: the OCaml library's stubs (normal context): flamme_frametable_index
 * before Gc.Memprof starts, then flamme_frametable_slot_addr from any
 * domain (the index is read-only once built). The writer, through the
 * agent's host (writer/writer_host.h): flamme_frametable_is_table_symbol
 * and flamme_frametable_image_sites, pure, any thread.
 */
#ifndef FLAMME_RUNTIME_HOOKS_FRAMETABLE_H
#define FLAMME_RUNTIME_HOOKS_FRAMETABLE_H
#include <stdint.h>

#include "common/frame_sites.h"

/* Indexes the frame tables listed by tables (the runtime's NULL-terminated
 * caml_frametable array: each a descriptor count then the descriptors).
 * Once per process; later calls do nothing. Returns 0, or -1 (no memory:
 * leaves of allocations made by OCaml code then come out unknown). */
int flamme_frametable_index(void *const *tables);

/* In a fork child: 1 if no thread was building the index at the fork,
 * else 0; its lock is usable again either way. */
int flamme_frametable_atfork_child(void);

/* The code address of one backtrace slot as stored in the OCaml array (a
 * tagged value), or 0 when it names none the index knows. */
uintptr_t flamme_frametable_slot_addr(uintptr_t slot_value);

/* Whether pc is the return address of a call from OCaml code (it has a
 * frame descriptor): the innermost OCaml frame of a stack walked from the
 * runtime. 0 before flamme_frametable_index. Any thread, normal context. */
int flamme_frametable_is_ocaml_ret(uintptr_t pc);

/* struct flamme_frame_sites_ops's is_table: "caml<unit>.frametable" (5.x)
 * or "caml<unit>__frametable" (4.x), caml_system's and caml_startup's
 * included. */
int flamme_frametable_is_table_symbol(const char *name);

/* struct flamme_frame_sites_ops's sites (common/frame_sites.h): the
 * descriptors of the table at link-time address table, read through rd;
 * the returns to C have no frame and are skipped. Returns the number of
 * sites given to site, or -1 when it stopped. */
long flamme_frametable_image_sites(uint64_t table, flamme_image_read_fn rd, void *rctx,
                                   flamme_frame_site_fn site, void *sctx);

#endif
