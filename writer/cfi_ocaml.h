/*
 * writer/cfi_ocaml.h — the OCaml call sites of an ELF image, and the
 * runtime's stack switches its CFI leaves out, for checking its unwind rows
 * (writer/cfi_build.c). Each compilation unit's frame table
 * (a data symbol) has a descriptor per call from OCaml code, with the size
 * of the calling frame there, which the GC relies on; the compiler's CFI is
 * wrong at some of those calls (common/frame_sites.h says which).
 * Who: writer/cfi_build.c when it builds a module's rows (writer thread or
 * agent start-up); allocates, reads the file. Never a signal handler.
 */
#ifndef FLAMME_WRITER_CFI_OCAML_H
#define FLAMME_WRITER_CFI_OCAML_H
#include "common/frame_sites.h"
#include "writer/elf.h"

/* One pass over el's symbols for what mends its rows: calls site(site_ctx,
 * ret, frame_size) (link-time return addresses) for each descriptor of each
 * frame table (the data symbols ops->is_table accepts; none when site is
 * NULL), and span(span_ctx, s) for each stack switch of the OCaml runtime
 * that el's rows leave out (ops->switch_span, of the functions
 * ops->is_switch_fn names; none when span is NULL). Symbols come from
 * .dynsym, or from .symtab for a kind .dynsym has none of. Returns 0 (also
 * with no ops, or nothing found), or -1 when out of memory or a callback
 * stopped. */
int flamme_cfi_ocaml_scan(const struct flamme_elf *el, const struct flamme_frame_sites_ops *ops,
                          flamme_frame_site_fn site, void *site_ctx,
                          int (*span)(void *ctx, const struct flamme_switch_span *s),
                          void *span_ctx);

#endif
