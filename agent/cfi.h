/*
 * agent/cfi.h — DWARF call-frame information (from .eh_frame) reduced to
 * what a stack walk needs on x86_64, for code built without frame pointers
 * (glibc, libm, C libraries): per address range, where the canonical frame
 * address (CFA) is and where the caller's rbp was saved. The return address
 * is always at CFA - 8.
 *
 * Built by the writer thread (writer/cfi_build.c: flamme_cfi_add_module
 * parses ELF files, allocates) and read by the SIGPROF handler (agent/cfi.c:
 * flamme_cfi_lookup_sigsafe, no locks, no allocation). Publication: the builder prepares a new
 * immutable table set and swaps one pointer (release); the handler loads it
 * (acquire). Old sets are kept until flamme_cfi_free_all at exit, since a
 * handler may still be reading one.
 */
#ifndef FLAMME_AGENT_CFI_H
#define FLAMME_AGENT_CFI_H
#include <stdint.h>

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

/* Callee-saved registers whose save slots the rows track, in this order. */
#define FLAMME_CFI_NSAVED 6
#define FLAMME_DW_RBP 6 /* DWARF numbers: rax rdx rcx rbx rsi rdi rbp rsp r8..r15 = 0..15 */
#define FLAMME_DW_RSP 7
#define FLAMME_CFI_SAVED_DWREGS {6, 3, 12, 13, 14, 15} /* rbp rbx r12 r13 r14 r15 */
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

/* Parses the .eh_frame (via .eh_frame_hdr or section headers) of the ELF
 * file `path` mapped with load bias `bias` (runtime address = st_value +
 * bias), covering runtime addresses [lo, hi), and publishes its rows.
 * Writer thread only. Returns the number of rows added, or -1 (file
 * unreadable or without CFI). */
long flamme_cfi_add_module(const char *path, uint64_t bias, uint64_t lo, uint64_t hi);

/* Finds the row covering pc. Returns 1 and fills *row, or 0 when pc is in no
 * module with CFI or in a gap (no FDE covers it).
 * async-signal-safe: yes. */
int flamme_cfi_lookup_sigsafe(uint64_t pc, struct flamme_cfi_row *row);

/* Frees every table (at exit, after sampling stopped and handlers are done). */
void flamme_cfi_free_all(void);

/* --- Additions by the cfi.c implementer (not part of the first agreed
 * interface; both are builder-side, writer thread only). --- */

/* Adds every readable r-x file mapping of /proc/self/maps, except the file
 * skip (a path as in maps, or any path naming the same inode; NULL = none)
 * and mappings already added (same file and range). Of the file fp_file
 * (likewise; NULL = none), whose code has frame pointers, only the rows of
 * the OCaml runtime's stack switches (CFA found in memory) are kept: the
 * frame-pointer chain skips the C caller of caml_start_program, these rows
 * do not. Deleted files are read through /proc/self/map_files.
 * Bias from the ELF program headers. The [vdso] is added once, from its
 * image in memory; anonymous code is not added. Returns the number of modules added (0 if none or maps unreadable). */
int flamme_cfi_add_from_maps(const char *fp_file, const char *skip);

/* Published modules, rows, and bytes they occupy (for summaries/tests). */
void flamme_cfi_stats(uint64_t *modules, uint64_t *rows, uint64_t *bytes);

#endif
