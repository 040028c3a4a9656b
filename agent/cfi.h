/*
 * agent/cfi.h — DWARF call-frame information (from .eh_frame) reduced to
 * what a stack walk needs on x86_64, for code built without frame pointers
 * (glibc, libm, C libraries): per address range, where the canonical frame
 * address (CFA) is and where the caller's rbp was saved. The return address
 * is always at CFA - 8.
 *
 * Built by the writer thread (writer/cfi_build.h: flamme_cfi_add_module
 * parses ELF files, allocates) and read by the SIGPROF handler (agent/cfi.c:
 * flamme_cfi_lookup_sigsafe, no locks, no allocation). Publication: the builder prepares a new
 * immutable table set and swaps one pointer (release); the handler loads it
 * (acquire), through the layout of common/cfi_tables.h. Old sets are kept
 * until flamme_cfi_free_all at exit, since a
 * handler may still be reading one.
 */
#ifndef FLAMME_AGENT_CFI_H
#define FLAMME_AGENT_CFI_H
#include <stdint.h>

#include "common/cfi_tables.h" /* FLAMME_CFI_NSAVED, FLAMME_DW_* */

#define FLAMME_CFA_RSP 0     /* CFA = rsp + cfa_off */
#define FLAMME_CFA_RBP 1     /* CFA = rbp + cfa_off */
#define FLAMME_CFA_UNKNOWN 2 /* no usable rule here (other expressions, PLT, signal frame) */
/* The OCaml runtime's stack switches: the CFA is found in memory,
 * v = *(reg + cfa_off); if nderef == 2, v = *(v + mid_add); CFA = v + cfa_add. */
#define FLAMME_CFA_DEREF_RSP 3
#define FLAMME_CFA_DEREF_RBP 4
/* The same two shapes on any other register (dwreg): OCaml code around a
 * [@@noalloc] call has CFA = rbx + N (it keeps its own stack pointer in rbx
 * while on the C stack), caml_c_call_stack_args a deref of rbx; gcc's
 * stack-realigning prologues use r10 at their entry. */
#define FLAMME_CFA_REG 5
#define FLAMME_CFA_DEREF_REG 6

#define FLAMME_SAVE_SAME 0          /* save[i]: the caller's value is the current one */
#define FLAMME_SAVE_LOST INT32_MIN  /* save[i]: the caller's value cannot be recovered */

struct flamme_cfi_row {
    uint64_t pc;      /* absolute address where this row starts (rows sorted, a row
                         lasts until the next row's pc or the table's end) */
    uint8_t cfa_reg;  /* FLAMME_CFA_* */
    uint8_t dwreg;    /* the register the CFA is computed from (DWARF number; 7 for
                         the RSP kinds, 6 for the RBP kinds) */
    int32_t cfa_off;
    int32_t rbp_off;  /* caller's rbp saved at CFA + rbp_off; 0 = rbp not saved (unchanged
                         or lost: see save[0]) */
    uint8_t nderef, mid_add; /* deref kinds: see above */
    int32_t cfa_add;
    /* Caller's rbp, rbx, r12..r15 (FLAMME_CFI_SAVED_DWREGS order): saved at
     * CFA + save[i], or FLAMME_SAVE_SAME / FLAMME_SAVE_LOST. */
    int32_t save[FLAMME_CFI_NSAVED];
};

/* Finds the row covering pc. Returns 1 and fills *row, or 0 when pc is in no
 * module with CFI or in a gap (no FDE covers it).
 * async-signal-safe: yes. */
int flamme_cfi_lookup_sigsafe(uint64_t pc, struct flamme_cfi_row *row);

/* A thread's memo of the rows it looked up last, by pc (direct-mapped),
 * kept decoded. A deep stack repeats a few hundred return addresses
 * thousands of times (recursion): each then costs a hash and a copy
 * instead of two binary searches and a decode over the module's tables
 * (cache misses in a large program). Owned by one thread's handler (or the
 * thread itself with its handler kept out), in its slot
 * (agent/threads.h); emptied when the published set changes. */
#define FLAMME_CFI_CACHE_BITS 9
#define FLAMME_CFI_CACHE (1u << FLAMME_CFI_CACHE_BITS)
struct cfi_set;
struct flamme_cfi_cache_entry {
    uint64_t pc; /* 0: empty */
    int found;   /* row covers pc; 0: no row (no module with CFI, or a gap) */
    struct flamme_cfi_row row;
};
struct flamme_cfi_cache {
    const struct cfi_set *set; /* the set the entries were found in */
    struct flamme_cfi_cache_entry e[FLAMME_CFI_CACHE];
};

/* flamme_cfi_lookup_sigsafe through c (NULL: no memo). Same result.
 * async-signal-safe: yes. */
int flamme_cfi_lookup_cached_sigsafe(struct flamme_cfi_cache *c, uint64_t pc,
                                     struct flamme_cfi_row *row);

#endif
