/*
 * agent/alloc.h — sampled allocations into the profile: the OCaml library's
 * Gc.Memprof callbacks (ocaml_stubs/) hand each sampled block's callstack
 * (code addresses from the runtime's frame tables) and, for the live view,
 * each promotion and death, to the calling thread's ring; the writer turns
 * them into ALLOC / ALLOC_EVENT records (doc/format.md).
 *
 * Who: the thread that runs a Memprof callback (normal context, holding
 * its domain), never a signal handler. The thread's sample handler is the
 * ring's other producer; the two exclude each other through the slot's
 * ring_busy flag (the handler skips a sample that lands on it).
 */
#ifndef FLAMME_AGENT_ALLOC_H
#define FLAMME_AGENT_ALLOC_H
#include <stdint.h>

/* The ring records, and the values of truncated (FLAMME_ALLOC_CUT,
 * FLAMME_ALLOC_LOST): common/ring.h. */
#include "common/ring.h"

struct flamme_alloc_in {
    const uint64_t *addrs; /* return addresses, leaf (the allocation point) first */
    uint32_t n;
    int truncated;         /* FLAMME_ALLOC_CUT or FLAMME_ALLOC_LOST, else 0 */
    uint32_t n_samples;
    uint64_t size_words;
    unsigned heap, source; /* enum flamme_alloc_heap / flamme_alloc_source */
    double rate;
};

/* Appends one sampled allocation to the calling thread's ring. Returns its
 * id (> 0, unique in the process), or 0 when it was dropped (no profile, no
 * ring for this thread, ring full: counted as lost). */
uint64_t flamme_alloc_sample(const struct flamme_alloc_in *a);

/* Appends an ALLOC_EVENT (enum flamme_alloc_event) for block id. Returns 0,
 * or -1 when dropped (counted as lost). */
int flamme_alloc_event(uint64_t id, unsigned event);

/* Heap-fill sampling (doc/design.md), from the GC hooks in normal context:
 * one ALLOC record of `words` words (rate 1) on heap for the stack of the
 * hook's caller (ret, sp after the return, fp), less the runtime's frames
 * above the innermost OCaml one. Returns 0 (recorded, or dropped and
 * counted as lost), or -1 when the stack has no OCaml frame (the caller
 * keeps the weight for the domain's next sample). */
int flamme_alloc_heapfill(uintptr_t ret, uintptr_t sp, uintptr_t fp, uint64_t words, unsigned heap);

/* Under LD_PRELOAD with FLAMME_ALLOC (no library): turns heap-fill
 * sampling on for the next start (release: flamme_ocaml_check_runtime's).
 * Constructor only (dlsym). Returns 0, or -1 after one line on stderr
 * saying why not (not OCaml 5.3, no frame tables). */
int flamme_heapfill_prepare(const char *release);

/* Allocation profiling started (rate, live tracking) or stopped (rate 0):
 * the writer records it (flamme_writer_alloc_mode). */
void flamme_alloc_set_mode(double rate, int live);

#endif
