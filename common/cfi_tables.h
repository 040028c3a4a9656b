/*
 * common/cfi_tables.h — layout of the published unwind tables, shared by the
 * walker's lookup (agent/cfi.c, signal handler) and their builder
 * (writer/cfi_build.c, writer thread), which publishes them for the handler:
 * in common/ so that neither side includes the other's headers. Internal to
 * those two files (and agent/cfi.h, for the register numbers).
 *
 * Row table of one module: parallel arrays, 6 bytes a row: `off` (pc minus
 * the module's lo, uint32, dense for the binary search) and `rid` (uint16,
 * an index into the module's `rules`: how the CFA is computed, where the
 * callee-saved registers rbp, rbx, r12-r15 were saved). Code repeats few
 * rules (103 distinct in the 162k rows of the OCaml compiler, 987 in
 * libLLVM's 950k), so the rules are kept once each: a 16-byte rule per row
 * was 3.2 MB for the compiler, every page of it a page fault to build or
 * read. A RULE_GAP row ends an FDE that is not followed directly by
 * another one: addresses there have no CFI.
 *
 * Publication: the builder makes a new immutable `struct cfi_set` (the sorted
 * list of modules, old modules shared, never modified) and stores it into
 * flamme_cfi_published with memory_order_release; the handler's
 * memory_order_acquire load pairs with that store, so every row written
 * before the swap is visible to a handler that sees the new set. Superseded
 * sets and replaced modules are kept (a handler may still be reading them)
 * until flamme_cfi_free_all.
 */
#ifndef FLAMME_COMMON_CFI_TABLES_H
#define FLAMME_COMMON_CFI_TABLES_H
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* Callee-saved registers whose save slots the rows track, in this order. */
#define FLAMME_CFI_NSAVED 6
#define FLAMME_DW_RBP 6 /* DWARF numbers: rax rdx rcx rbx rsi rdi rbp rsp r8..r15 = 0..15 */
#define FLAMME_DW_RSP 7
#define FLAMME_DW_RSI 4
#define FLAMME_CFI_SAVED_DWREGS {6, 3, 12, 13, 14, 15} /* rbp rbx r12 r13 r14 r15 */

#define RULE_GAP 255 /* no FDE covers this address */

#define RULE_REG 0      /* CFA = reg[dwreg] + cfa_off */
#define RULE_DEREF 1    /* CFA = *(reg[dwreg] + cfa_off) [+ mid, deref] + cfa_add */
#define RULE_UNKNOWN 2  /* no usable rule */
#define FLAMME_CFI_MAX_RULES 65536 /* rid is a uint16 */
#define SAVE_SLOT_LOST (-128) /* save[i]: the register cannot be recovered */

struct rule {
    int32_t cfa_off;
    uint8_t reg;    /* RULE_* or RULE_GAP */
    uint8_t dwreg;  /* DWARF register number (0-15) the CFA is computed from */
    uint8_t deref;  /* RULE_DEREF: number of derefs (1-2) | mid << 2 */
    uint8_t pad;    /* always 0 (rules are compared whole) */
    int16_t cfa_add;
    /* rbp, rbx, r12, r13, r14, r15 (FLAMME_CFI_SAVED order): 0 = unchanged,
     * SAVE_SLOT_LOST, else saved at CFA + 8 * save[i]. */
    int8_t save[6];
};

struct cfi_mod {
    uint64_t lo, hi; /* runtime range covered */
    size_t n;
    uint32_t *off;   /* n entries, strictly increasing */
    uint16_t *rid;   /* n entries, each < nrules */
    struct rule *rules; /* nrules distinct rules */
    size_t nrules;
    char *name;      /* path as given (for debugging) */
    uint64_t dev, ino; /* file identity, to recognise a module added again */
    int switch_only;   /* only the stack-switch rows (a file with frame pointers) */
    struct cfi_mod *all_next; /* every module ever built, for free_all */
};

struct cfi_set {
    size_t n;
    struct cfi_set *retired_next; /* builder-side list of superseded sets */
    struct cfi_mod *mod[];        /* sorted by lo, disjoint */
};

/* The set the handler reads; written only by the builder (defined in
 * writer/cfi_build.c). */
extern _Atomic(struct cfi_set *) flamme_cfi_published;

#endif
