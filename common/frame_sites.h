/*
 * common/frame_sites.h — how the unwind-row builder (writer/cfi_build.c)
 * asks about OCaml's frame descriptors without knowing their layout: the
 * layout is the runtime's (runtime_hooks/frametable.c), the rows are the
 * writer's, and neither includes the other. The agent hands the writer
 * runtime_hooks' functions through writer/writer_host.h.
 *
 * Why: every OCaml call site has a frame descriptor whose frame size the
 * GC relies on, while the compiler's CFI is wrong at some of them (the
 * out-of-line calls of caml_call_gc and caml_ml_array_bound_error inside a
 * `try`: their rows leave out the trap frame). Rows are checked against
 * the descriptors when built. Likewise the runtime's caml_raise_exn, which
 * moves to the C stack to record a backtrace and keeps its CFI as if it
 * had not (runtime_hooks/switch_rows.c).
 * Who: the writer thread (or agent start-up) building a module's rows;
 * allocates nothing itself. Never a signal handler.
 */
#ifndef FLAMME_COMMON_FRAME_SITES_H
#define FLAMME_COMMON_FRAME_SITES_H
#include <stddef.h>
#include <stdint.h>

/* Copies len bytes at link-time address addr of an image to dst. Returns
 * 0, or -1 when the image has no such bytes. */
typedef int (*flamme_image_read_fn)(void *ctx, uint64_t addr, void *dst, size_t len);

/* One call from OCaml code: the call's return address (link-time) and the
 * size of the calling frame there (its CFA is rsp + frame_size). Returns
 * 0, or -1 to stop. */
typedef int (*flamme_frame_site_fn)(void *ctx, uint64_t ret, uint32_t frame_size);

/* A span of one of the runtime's hand-written functions whose CFI says
 * nothing of a stack switch made there, and the rule that holds in it. */
struct flamme_switch_span {
    uint64_t lo, hi;  /* link-time [lo, hi) */
    uint8_t dwreg;    /* CFA = DWARF register dwreg + cfa_off */
    int32_t cfa_off;
    int8_t rbp_save;  /* rbp saved at CFA + 8 * rbp_save; 0: unchanged */
};

struct flamme_frame_sites_ops {
    /* 1 if an image's data symbol of this name is a frame table (one per
     * compilation unit, and the runtime's), else 0. */
    int (*is_table)(const char *name);
    /* Reads the table at link-time address table through rd (the image is
     * untrusted: every read checked, counts bounded by what rd can read)
     * and calls site for each call from OCaml code in it. Returns the
     * number of sites, or -1 when site stopped. */
    long (*sites)(uint64_t table, flamme_image_read_fn rd, void *rctx, flamme_frame_site_fn site,
                  void *sctx);
    /* 1 if a function symbol of this name is one of those (switch_span),
     * else 0. */
    int (*is_switch_fn)(const char *name);
    /* Reads that function (link-time addr, size bytes; 0: unknown) through
     * rd and finds its span. Returns 1 and sets *out, or 0 (code of
     * another shape, unreadable, or a switch no rule can describe). */
    int (*switch_span)(uint64_t addr, uint64_t size, flamme_image_read_fn rd, void *rctx,
                       struct flamme_switch_span *out);
};

#endif
