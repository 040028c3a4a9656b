/*
 * writer/cfi_synth.h — unwind rows for functions that have no FDE, derived
 * from their machine code. An executable's crtstuff functions
 * (deregister_tm_clones, register_tm_clones, __do_global_dtors_aux,
 * frame_dummy), _init, and hand-written assembly without CFI directives
 * (a C stub's .S file) have no .eh_frame entry: a sample there fell back
 * on rbp, which such code does not keep, and the walk broke.
 *
 * From a function's entry (CFA = rsp + 8, the call ABI) every path is
 * followed through a small, exactly decoded subset of x86-64: the stack
 * pointer's offset from the CFA and the slots of pushed callee-saved
 * registers are tracked instruction by instruction. Anything outside the
 * subset, any change of rsp by an unknown amount, paths that disagree at a
 * join, or a path that runs off the function's end gives the function no
 * rows at all (what it had before): a rule is derived, never guessed.
 * Who: writer/cfi_build.c, when it builds a module's rows (writer thread or
 * agent start-up); allocates. Never a signal handler.
 */
#ifndef FLAMME_WRITER_CFI_SYNTH_H
#define FLAMME_WRITER_CFI_SYNTH_H
#include <stddef.h>
#include <stdint.h>

#include "common/cfi_tables.h"
#include "writer/elf.h"

/* One derived row, from its pc to the next row's: CFA = rsp + rsp_off, the
 * callee-saved registers (FLAMME_CFI_SAVED_DWREGS order) unchanged (0) or
 * saved at CFA + 8 * save[i]. rsp_off 0: no rule (code never reached from
 * the entry, or the function's end). pc is the code's link-time address. */
struct flamme_synth_row {
    uint64_t pc;
    int32_t rsp_off;
    int8_t save[FLAMME_CFI_NSAVED];
};

/* Receives the rows of one function in ascending pc; the last has rsp_off
 * 0. Returns 0, or -1 to stop (out of memory). */
typedef int (*flamme_synth_emit_fn)(void *ctx, const struct flamme_synth_row *row);

/* Derives the rows of the function whose len code bytes (its entry first)
 * are at link-time address entry. Returns the number of rows emitted, 0
 * when the code is outside the subset (no rows: see above), or -1 when
 * out of memory or emit stopped. */
long flamme_cfi_synth_function(const uint8_t *code, size_t len, uint64_t entry,
                               flamme_synth_emit_fn emit, void *ctx);

/* Runs flamme_cfi_synth_function over every function symbol of el's
 * symbol table (.symtab, else .dynsym) in an executable section whose
 * entry lies in [lo, hi) (link-time) and outside spans: the ranges the
 * module's FDEs cover, nspans of them, sorted by start and disjoint. A
 * function ends at its size, the next function symbol or span, or its
 * section's end. Returns the number of rows emitted (0: no symbols, or
 * none without an FDE that could be derived), or -1 (out of memory, emit
 * stopped). */
long flamme_cfi_synth_module(const struct flamme_elf *el, const uint64_t (*spans)[2],
                             size_t nspans, uint64_t lo, uint64_t hi, flamme_synth_emit_fn emit,
                             void *ctx);

#endif
