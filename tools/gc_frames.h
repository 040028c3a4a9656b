/*
 * tools/gc_frames.h — recognizes the OCaml 5 runtime's GC and stop-the-world
 * functions in a sampled stack (names from the 5.1-5.5 runtime sources: minor_gc.c,
 * major_gc.c, domain.c; 5.5 has no caml_empty_mark_stack, whose callers
 * are named too),
 * for `flamme collapse --fold-gc`, and the GC section of `flamme report`.
 * Functions over a loaded profile; any thread.
 */
#ifndef FLAMME_TOOLS_GC_FRAMES_H
#define FLAMME_TOOLS_GC_FRAMES_H
#include <stdint.h>
#include <stdio.h>

#include "common/profile.h"

enum flamme_gc_class {
    FLAMME_GCC_NONE = 0, /* the stack is not in the GC */
    FLAMME_GCC_GC = 1,   /* GC work: minor/major collection, allocation slow path, roots, ... */
    FLAMME_GCC_STW = 2,  /* waiting for other domains in a stop-the-world section or barrier */
};

/* Classifies a stack (frame ids leaf first, as in struct flamme_stack).
 * The GC part of a stack starts at the root-most frame that is a GC or STW
 * function; its class is decided by the leaf-most frame that is one (so GC
 * work done while waiting, e.g. an opportunistic major slice inside a spin,
 * counts as GC, and a domain spinning in stw_handler as a wait). Sets
 * *gc_root to the index in st->frames of the root-most GC frame (only when
 * the result is not FLAMME_GCC_NONE). Frame ids out of range are ignored. */
enum flamme_gc_class flamme_gc_classify(const struct flamme_profile *p,
                                        const struct flamme_stack *st, uint32_t *gc_root);

/* The folded-stack frame that stands for a folded GC part: "[GC]" or
 * "[GC stw wait]". */
const char *flamme_gc_class_label(enum flamme_gc_class c);

/* Prints the GC section of `flamme report` to out: per domain, the share of
 * sample weight flagged as taken in a minor collection / major slice, the
 * share whose stack is in GC work / in a stop-the-world wait, and count,
 * total, p50, p90, p99 and max of the GC records' durations per kind.
 * Returns 0, or -1 on allocation failure (nothing or part printed). */
int flamme_gc_report(const struct flamme_profile *p, FILE *out);

#endif
