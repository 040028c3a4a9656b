/*
 * writer/cfi_build.c — builds the .eh_frame unwind rows the stack walker
 * looks up (agent/cfi.h, common/cfi_tables.h).
 *
 * Owns: every module's row table and the published table set
 * (flamme_cfi_add_module, flamme_cfi_add_from_maps, flamme_cfi_stats,
 * flamme_cfi_free_all). Writer thread (or agent start-up); allocates, reads
 * ELF files through writer/elf.c, serialised by build_lock. The reader is
 * agent/cfi.c's flamme_cfi_lookup_sigsafe. A large file's table is read
 * from, or written to, the tables kept between processes
 * (writer/cfi_cache.h) instead of being built every time.
 */
#include "writer/cfi_build.h"

#include "common/bulk.h"
#include "common/cfi_tables.h"
#include "common/fds.h"
#include "common/forkchild.h"
#include "common/hash.h"
#include "common/index_table.h"
#include "common/runsort.h"
#include "writer/cfi_cache.h"
#include "writer/cfi_ocaml.h"
#include "writer/cfi_synth.h"
#include "writer/elf.h"

#include <elf.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#define EH_FRAME_MAX (64u << 20) /* refuse absurd .eh_frame sizes (bad input) */
#define STATE_STACK 8            /* DW_CFA_remember_state depth */
#define ROWS_RESERVE_MAX (4u << 20) /* rows reserved at most before building (96 MiB) */
#define DW_REG_RBP 6
#define DW_REG_RSP 7

/* Pointer encodings (LSB ABI, .eh_frame) and call-frame opcodes (DWARF 5
 * section 6.4.2, plus the GNU extensions gcc emits); <elf.h> has neither. */
enum {
    DW_EH_PE_absptr = 0x00, DW_EH_PE_uleb128 = 0x01, DW_EH_PE_udata2 = 0x02,
    DW_EH_PE_udata4 = 0x03, DW_EH_PE_udata8 = 0x04, DW_EH_PE_sleb128 = 0x09,
    DW_EH_PE_sdata2 = 0x0a, DW_EH_PE_sdata4 = 0x0b, DW_EH_PE_sdata8 = 0x0c,
    DW_EH_PE_pcrel = 0x10, DW_EH_PE_datarel = 0x30, DW_EH_PE_indirect = 0x80,
    DW_EH_PE_omit = 0xff,
};
enum {
    DW_CFA_nop = 0x00, DW_CFA_set_loc = 0x01, DW_CFA_advance_loc1 = 0x02,
    DW_CFA_advance_loc2 = 0x03, DW_CFA_advance_loc4 = 0x04, DW_CFA_offset_extended = 0x05,
    DW_CFA_restore_extended = 0x06, DW_CFA_undefined = 0x07, DW_CFA_same_value = 0x08,
    DW_CFA_register = 0x09, DW_CFA_remember_state = 0x0a, DW_CFA_restore_state = 0x0b,
    DW_CFA_def_cfa = 0x0c, DW_CFA_def_cfa_register = 0x0d, DW_CFA_def_cfa_offset = 0x0e,
    DW_CFA_def_cfa_expression = 0x0f, DW_CFA_expression = 0x10,
    DW_CFA_offset_extended_sf = 0x11, DW_CFA_def_cfa_sf = 0x12,
    DW_CFA_def_cfa_offset_sf = 0x13, DW_CFA_val_offset = 0x14, DW_CFA_val_offset_sf = 0x15,
    DW_CFA_val_expression = 0x16, DW_CFA_GNU_args_size = 0x2e,
    DW_CFA_GNU_negative_offset_extended = 0x2f,
    /* high two bits, operand in the low six */
    DW_CFA_advance_loc = 0x40, DW_CFA_offset = 0x80, DW_CFA_restore = 0xc0,
};

/* The set the handler reads (common/cfi_tables.h); written only here. */
_Atomic(struct cfi_set *) flamme_cfi_published;

static struct cfi_set *retired;  /* superseded sets (builder only) */
static struct cfi_mod *all_mods; /* (builder only) */
static pthread_mutex_t build_lock = PTHREAD_MUTEX_INITIALIZER;

/* ------------------------------------------------------------ byte reader */

/* A cursor over a buffer holding bytes of the ELF file whose first byte
 * has link-time address base_vaddr (needed for pc-relative pointers). Any
 * overrun sets bad and yields zeros. */
struct rd {
    const uint8_t *p, *end, *base;
    uint64_t base_vaddr;
    int bad;
};

static uint64_t rd_u(struct rd *r, size_t n)
{
    if (r->bad || (size_t)(r->end - r->p) < n) {
        r->bad = 1;
        r->p = r->end;
        return 0;
    }
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++)
        v |= (uint64_t)r->p[i] << (8 * i);
    r->p += n;
    return v;
}

static uint64_t rd_uleb(struct rd *r)
{
    uint64_t v = 0;
    for (unsigned sh = 0;; sh += 7) {
        if (r->bad || r->p >= r->end) {
            r->bad = 1;
            return 0;
        }
        uint8_t b = *r->p++;
        if (sh < 64)
            v |= (uint64_t)(b & 0x7f) << sh;
        if (!(b & 0x80))
            return v;
    }
}

static int64_t rd_sleb(struct rd *r)
{
    uint64_t v = 0;
    unsigned sh = 0;
    uint8_t b;
    do {
        if (r->bad || r->p >= r->end) {
            r->bad = 1;
            return 0;
        }
        b = *r->p++;
        if (sh < 64)
            v |= (uint64_t)(b & 0x7f) << sh;
        sh += 7;
    } while (b & 0x80);
    if (sh < 64 && (b & 0x40))
        v |= ~0ull << sh;
    return (int64_t)v;
}

/* Reads a DW_EH_PE-encoded pointer (link-time value). pcrel is relative to
 * the field's own address, datarel to datarel_base (the .eh_frame_hdr, as
 * in the hdr's table; 0 = unknown). Indirect, textrel, funcrel and aligned
 * encodings, and datarel without a base, set r->bad. DW_EH_PE_omit yields 0. */
static uint64_t rd_ptr(struct rd *r, uint8_t enc, uint64_t datarel_base)
{
    if (enc == DW_EH_PE_omit)
        return 0;
    uint64_t field = r->base_vaddr + (uint64_t)(r->p - r->base), v;
    switch (enc & 0x0f) {
    case DW_EH_PE_absptr: v = rd_u(r, 8); break;
    case DW_EH_PE_uleb128: v = rd_uleb(r); break;
    case DW_EH_PE_udata2: v = rd_u(r, 2); break;
    case DW_EH_PE_udata4: v = rd_u(r, 4); break;
    case DW_EH_PE_udata8: v = rd_u(r, 8); break;
    case DW_EH_PE_sleb128: v = (uint64_t)rd_sleb(r); break;
    case DW_EH_PE_sdata2: v = (uint64_t)(int64_t)(int16_t)rd_u(r, 2); break;
    case DW_EH_PE_sdata4: v = (uint64_t)(int64_t)(int32_t)rd_u(r, 4); break;
    case DW_EH_PE_sdata8: v = rd_u(r, 8); break;
    default: r->bad = 1; return 0;
    }
    switch (enc & 0x70) {
    case DW_EH_PE_absptr: break;
    case DW_EH_PE_pcrel: v += field; break;
    case DW_EH_PE_datarel:
        if (!datarel_base)
            r->bad = 1;
        v += datarel_base;
        break;
    default: r->bad = 1;
    }
    if (enc & DW_EH_PE_indirect)
        r->bad = 1;
    return v;
}

/* ------------------------------------------------------------ CFA programs */

enum { SAVE_SAME, SAVE_AT_OFF, SAVE_LOST };

/* What the unwinder knows at one pc: CFA = reg + off, where the return
 * address and the callee-saved registers (rbp, rbx, r12-r15: the only ones
 * a caller's frame can still need) were saved. */
struct regstate {
    uint64_t cfa_reg; /* DWARF register; above 15 makes the row UNKNOWN */
    int64_t cfa_off;
    int cfa_expr;     /* CFA given by an expression: 1 unusable, 2 a deref chain (below),
                       * 3 a lazy PLT's (plt_rows) */
    int plt_split;    /* cfa_expr 3: CFA = rsp + 8, + 8 from this byte of each 16 */
    uint64_t ex_reg;  /* deref chain: CFA = deref(ex_reg + ex_off) [+ ex_mid, deref] + ex_add */
    int64_t ex_off;
    int ex_nderef;
    uint64_t ex_mid, ex_add;
    int ra_how;
    int64_t ra_off;
    int save_how[FLAMME_CFI_NSAVED]; /* FLAMME_CFI_SAVED_DWREGS order */
    int64_t save_off[FLAMME_CFI_NSAVED];
    /* The saves as a rule holds them, made again only after a save
     * changed: most rows change only the CFA (an OCaml function's rows
     * follow its stack pointer), so remaking them at every row was work
     * for nothing on nearly all of the OCaml compiler's 160,000 rows. */
    int saves_made;
    int8_t saves[FLAMME_CFI_NSAVED];
};

static const uint8_t saved_dwregs[FLAMME_CFI_NSAVED] = FLAMME_CFI_SAVED_DWREGS;

/* Index of DWARF register reg among the tracked callee-saved ones, or -1. */
static int saved_index(uint64_t reg)
{
    for (int i = 0; i < FLAMME_CFI_NSAVED; i++)
        if (saved_dwregs[i] == reg)
            return i;
    return -1;
}

struct cie {
    uint64_t code_align, ra_reg;
    int64_t data_align;
    uint8_t fde_enc;
    int has_z, signal;
    const uint8_t *insns, *insns_end;
};

/* Rows of one module before packing: absolute pc. */
struct trow {
    uint64_t pc;
    struct rule r;
};

struct rowvec {
    struct trow *v;
    size_t n, cap;
    int oom;
    int unsorted; /* some row sorts before the one pushed ahead of it (trow_cmp) */
    uint64_t (*spans)[2]; /* link-time [begin, end) of each FDE, for cfi_synth */
    size_t nspans, spancap;
};

/* The slot for the next row, or NULL when out of memory (rv->oom). */
static struct trow *next_row(struct rowvec *rv)
{
    if (rv->oom)
        return NULL;
    if (rv->n == rv->cap) {
        size_t nc = rv->cap ? rv->cap * 2 : 4096;
        struct trow *nv = realloc(rv->v, nc * sizeof *nv);
        if (!nv) {
            rv->oom = 1;
            return NULL;
        }
        rv->v = nv;
        rv->cap = nc;
    }
    return &rv->v[rv->n];
}

/* Appends the row t (the slot next_row gave), noting whether it breaks
 * the order pack sorts by (trow_cmp). */
static void commit_row(struct rowvec *rv, const struct trow *t)
{
    if (rv->n) {
        const struct trow *last = t - 1;
        if (t->pc < last->pc ||
            (t->pc == last->pc && t->r.reg == RULE_GAP && last->r.reg != RULE_GAP))
            rv->unsorted = 1;
    }
    rv->n++;
}

static void push_row(struct rowvec *rv, uint64_t pc, struct rule r)
{
    struct trow *t = next_row(rv);
    if (t) {
        *t = (struct trow){ pc, r };
        commit_row(rv, t);
    }
}

/* Writes the compact rule for a state into *r; UNKNOWN when the walker
 * could not use it. A save slot the rule cannot hold (not a multiple of 8,
 * beyond +-1016 bytes) makes that register lost, not the row unusable. */
static void state_rule(struct regstate *st, struct rule *r)
{
    /* Written field by field into the row itself: a rule returned by value
     * went through the stack, and the partial stores then whole loads
     * stalled (most of this function's time in a profile). */
    r->pad = 0;
    r->deref = 0;
    r->cfa_add = 0;
    if (st->ra_how != SAVE_AT_OFF || st->ra_off != -8)
        goto unknown;
    if (st->cfa_expr == 2) {
        if (st->ex_reg > 15 || st->ex_off < INT32_MIN || st->ex_off > INT32_MAX ||
            st->ex_mid > 63 || st->ex_add > INT16_MAX)
            goto unknown;
        r->reg = RULE_DEREF;
        r->dwreg = (uint8_t)st->ex_reg;
        r->cfa_off = (int32_t)st->ex_off;
        r->deref = (uint8_t)(st->ex_nderef | (st->ex_mid << 2));
        r->cfa_add = (int16_t)st->ex_add;
    } else {
        if (st->cfa_expr || st->cfa_reg > 15 || st->cfa_off < INT32_MIN ||
            st->cfa_off > INT32_MAX)
            goto unknown;
        r->reg = RULE_REG;
        r->dwreg = (uint8_t)st->cfa_reg;
        r->cfa_off = (int32_t)st->cfa_off;
    }
    if (!st->saves_made) {
        for (int i = 0; i < FLAMME_CFI_NSAVED; i++) {
            int64_t off = st->save_off[i];
            if (st->save_how[i] == SAVE_SAME)
                st->saves[i] = 0;
            else if (st->save_how[i] == SAVE_AT_OFF && off != 0 && off % 8 == 0 &&
                     off >= -127 * 8 && off <= 127 * 8)
                st->saves[i] = (int8_t)(off / 8);
            else
                st->saves[i] = SAVE_SLOT_LOST;
        }
        st->saves_made = 1;
    }
    memcpy(r->save, st->saves, sizeof r->save);
    return;
unknown:
    r->cfa_off = 0;
    r->reg = RULE_UNKNOWN;
    r->dwreg = 0;
    memset(r->save, 0, sizeof r->save);
}

/* Appends a row at pc with the rule of state st. */
static void push_state(struct rowvec *rv, uint64_t pc, struct regstate *st)
{
    struct trow *t = next_row(rv);
    if (t) {
        t->pc = pc;
        state_rule(st, &t->r);
        commit_row(rv, t);
    }
}

/* Applies one register rule to a tracked callee-saved register or the
 * return address; other registers are irrelevant to the walker. */
static void set_reg(struct regstate *st, const struct cie *c, uint64_t reg, int how, int64_t off)
{
    int i = saved_index(reg);
    if (i >= 0) {
        st->save_how[i] = how;
        st->save_off[i] = off;
        st->saves_made = 0;
    } else if (reg == c->ra_reg) {
        st->ra_how = how;
        st->ra_off = off;
    }
}

static void restore_reg(struct regstate *st, const struct cie *c, uint64_t reg,
                        const struct regstate *init)
{
    int i = saved_index(reg);
    if (i >= 0)
        set_reg(st, c, reg, init->save_how[i], init->save_off[i]);
    else if (reg == c->ra_reg)
        set_reg(st, c, reg, init->ra_how, init->ra_off);
}

/* DWARF expression opcodes used by the OCaml runtime's stack-switch CFI. */
#define DW_OP_deref 0x06
#define DW_OP_plus_uconst 0x23
#define DW_OP_breg0 0x70

/* Recognises the CFA expressions the OCaml runtime gives its stack-switching
 * code (amd64.S: caml_c_call, caml_start_program, caml_runstack, ...):
 *   breg(any register) N, deref, [plus_uconst M, deref,] [plus_uconst K]
 * i.e. the CFA lives in memory the frame points at (a c_stack_link, a
 * saved stack pointer). Fills st's chain and returns 1, or 0 for any other
 * expression (the row stays UNKNOWN). */
static int parse_deref_chain(struct rd *ex, struct regstate *st)
{
    uint8_t op = (uint8_t)rd_u(ex, 1);
    if (ex->bad || op < DW_OP_breg0 || op > DW_OP_breg0 + 15)
        return 0;
    st->ex_reg = op - DW_OP_breg0;
    st->ex_off = rd_sleb(ex);
    st->ex_nderef = 0;
    st->ex_mid = st->ex_add = 0;
    uint64_t pending = 0;
    while (ex->p < ex->end && !ex->bad) {
        op = (uint8_t)rd_u(ex, 1);
        if (op == DW_OP_deref) {
            if (st->ex_nderef == 2 || (st->ex_nderef == 0 && pending))
                return 0;
            if (st->ex_nderef == 1)
                st->ex_mid = pending;
            pending = 0;
            st->ex_nderef++;
        } else if (op == DW_OP_plus_uconst) {
            pending += rd_uleb(ex);
        } else {
            return 0;
        }
    }
    st->ex_add = pending;
    return !ex->bad && st->ex_nderef >= 1;
}

/* The expression the linker gives a lazy-binding .plt's entries:
 * CFA = rsp + 8 + ((rip & 15) >= N ? 8 : 0), N 11 (10 with IBT): each
 * 16-byte entry is jmp *GOT; push $index (the 8); jmp to the first entry.
 * 1 (st->plt_split = N) if the len bytes at p are exactly that, else 0. */
static int plt_expression(const uint8_t *p, uint64_t len, struct regstate *st)
{
    static const uint8_t head[] = { DW_OP_breg0 + 7, 8, DW_OP_breg0 + 16, 0, 0x3f /* lit15 */,
                                    0x1a /* and */ };
    static const uint8_t tail[] = { 0x2a /* ge */, 0x33 /* lit3 */, 0x24 /* shl */,
                                    0x22 /* plus */ };
    if (len != sizeof head + 1 + sizeof tail || memcmp(p, head, sizeof head) != 0 ||
        (p[sizeof head] != 0x3a && p[sizeof head] != 0x3b) ||
        memcmp(p + sizeof head + 1, tail, sizeof tail) != 0)
        return 0;
    st->plt_split = p[sizeof head] - 0x30; /* DW_OP_lit0 + N */
    return 1;
}

#define PLT_ROWS_MAX_BYTES (1u << 20) /* a larger "PLT" FDE gets no rows */

/* Rows for [loc, end_pc) under a lazy PLT's expression (state st): two a
 * 16-byte entry, rsp + 8 then rsp + 16 from its byte plt_split (after the
 * push). The entries are 16-byte aligned in the file and in memory (the
 * load bias is a multiple of a page). A sample in them, on the first call
 * of a library function (the loader resolving it), was [broken]. */
static void plt_rows(struct rowvec *out, uint64_t loc, uint64_t end_pc, uint64_t bias,
                     const struct regstate *st)
{
    struct regstate s = *st;
    s.cfa_expr = 0;
    s.cfa_reg = DW_REG_RSP;
    if (end_pc - loc > PLT_ROWS_MAX_BYTES) {
        s.cfa_expr = 1;
        push_state(out, loc + bias, &s);
        return;
    }
    for (uint64_t b = loc & ~(uint64_t)15; b < end_pc && !out->oom; b += 16) {
        uint64_t split = b + (uint64_t)s.plt_split;
        if (loc < split) {
            s.cfa_off = 8;
            push_state(out, (b > loc ? b : loc) + bias, &s);
        }
        if (split < end_pc) {
            s.cfa_off = 16;
            push_state(out, (split > loc ? split : loc) + bias, &s);
        }
    }
}

/* Runs the CFA instructions in r. For an FDE (out != NULL) emits one row per
 * location advance, for locations in [*loc, end_pc); init is the state after
 * the CIE's instructions (for DW_CFA_restore). Returns 0, or -1 on a
 * malformed or unsupported program (the caller then marks the rest of the
 * FDE UNKNOWN; rows already emitted stand). */
static int run_cfa(struct rd *r, const struct cie *c, struct regstate *st,
                   const struct regstate *init, uint64_t *loc, uint64_t end_pc, uint64_t bias,
                   struct rowvec *out)
{
    struct regstate stack[STATE_STACK];
    int depth = 0;
    while (r->p < r->end && !r->bad) {
        uint8_t op = (uint8_t)rd_u(r, 1);
        uint64_t adv = 0, reg;
        int64_t off;
        switch (op & 0xc0) {
        case DW_CFA_advance_loc:
            adv = (op & 0x3f) * c->code_align;
            goto advance;
        case DW_CFA_offset:
            off = (int64_t)rd_uleb(r) * c->data_align;
            set_reg(st, c, op & 0x3f, SAVE_AT_OFF, off);
            continue;
        case DW_CFA_restore:
            if (!init)
                return -1;
            restore_reg(st, c, op & 0x3f, init);
            continue;
        }
        switch (op) {
        case DW_CFA_nop:
            break;
        case DW_CFA_set_loc: {
            uint64_t to = rd_ptr(r, c->fde_enc, 0);
            if (r->bad || to < *loc)
                return -1;
            adv = to - *loc;
            goto advance;
        }
        case DW_CFA_advance_loc1:
            adv = rd_u(r, 1) * c->code_align;
            goto advance;
        case DW_CFA_advance_loc2:
            adv = rd_u(r, 2) * c->code_align;
            goto advance;
        case DW_CFA_advance_loc4:
            adv = rd_u(r, 4) * c->code_align;
            goto advance;
        case DW_CFA_offset_extended:
            reg = rd_uleb(r);
            set_reg(st, c, reg, SAVE_AT_OFF, (int64_t)rd_uleb(r) * c->data_align);
            break;
        case DW_CFA_offset_extended_sf:
            reg = rd_uleb(r);
            set_reg(st, c, reg, SAVE_AT_OFF, rd_sleb(r) * c->data_align);
            break;
        case DW_CFA_GNU_negative_offset_extended:
            reg = rd_uleb(r);
            set_reg(st, c, reg, SAVE_AT_OFF, -(int64_t)rd_uleb(r) * c->data_align);
            break;
        case DW_CFA_restore_extended:
            reg = rd_uleb(r);
            if (!init)
                return -1;
            restore_reg(st, c, reg, init);
            break;
        case DW_CFA_undefined:
            /* An undefined return address marks the outermost frame: the
             * rule set_reg stores (LOST) makes such rows UNKNOWN, which stops
             * the walk there. An undefined rbp is simply not recovered. */
            reg = rd_uleb(r);
            set_reg(st, c, reg, reg == c->ra_reg ? SAVE_LOST : SAVE_SAME, 0);
            break;
        case DW_CFA_same_value:
            set_reg(st, c, rd_uleb(r), SAVE_SAME, 0);
            break;
        case DW_CFA_register: /* saved in another register: lost to the walker */
        case DW_CFA_val_offset:
            reg = rd_uleb(r);
            (void)rd_uleb(r);
            set_reg(st, c, reg, SAVE_LOST, 0);
            break;
        case DW_CFA_remember_state:
            if (depth == STATE_STACK)
                return -1;
            stack[depth++] = *st;
            break;
        case DW_CFA_restore_state:
            /* The CFA rule is restored too, as libgcc's unwinder does:
             * gcc's epilogue-in-the-middle code relies on it. */
            if (depth == 0)
                return -1;
            *st = stack[--depth];
            break;
        case DW_CFA_def_cfa:
            st->cfa_reg = rd_uleb(r);
            st->cfa_off = (int64_t)rd_uleb(r);
            st->cfa_expr = 0;
            break;
        case DW_CFA_def_cfa_sf:
            st->cfa_reg = rd_uleb(r);
            st->cfa_off = rd_sleb(r) * c->data_align;
            st->cfa_expr = 0;
            break;
        case DW_CFA_def_cfa_register:
            st->cfa_reg = rd_uleb(r);
            break;
        case DW_CFA_def_cfa_offset:
            st->cfa_off = (int64_t)rd_uleb(r);
            break;
        case DW_CFA_def_cfa_offset_sf:
            st->cfa_off = rd_sleb(r) * c->data_align;
            break;
        case DW_CFA_def_cfa_expression: {
            uint64_t len = rd_uleb(r);
            if (len > (uint64_t)(r->end - r->p))
                return -1;
            struct rd ex = { r->p, r->p + len, r->base, r->base_vaddr, 0 };
            st->cfa_expr = parse_deref_chain(&ex, st) ? 2 : plt_expression(r->p, len, st) ? 3 : 1;
            r->p += len;
            break;
        }
        case DW_CFA_expression:
        case DW_CFA_val_expression: {
            reg = rd_uleb(r);
            uint64_t len = rd_uleb(r);
            if (len > (uint64_t)(r->end - r->p))
                return -1;
            r->p += len;
            set_reg(st, c, reg, SAVE_LOST, 0);
            break;
        }
        case DW_CFA_val_offset_sf:
            reg = rd_uleb(r);
            (void)rd_sleb(r);
            set_reg(st, c, reg, SAVE_LOST, 0);
            break;
        case DW_CFA_GNU_args_size:
            (void)rd_uleb(r);
            break;
        default:
            return -1;
        }
        continue;
    advance:
        if (!out)
            return -1; /* a CIE may not advance */
        if (adv == 0)
            continue;
        push_state(out, *loc + bias, st);
        *loc += adv;
        if (*loc >= end_pc)
            return 0;
    }
    return r->bad ? -1 : 0;
}

/* ------------------------------------------------------------ .eh_frame */

/* The .eh_frame bytes and where they live at link time. */
struct ehf {
    uint8_t *buf;
    uint64_t size, vaddr;
    uint64_t hdr_vaddr; /* .eh_frame_hdr, datarel base; 0 if unknown */
};

/* Parses the CIE at offset off of the section. Returns 0, or -1. */
static int parse_cie(const struct ehf *e, uint64_t off, struct cie *c)
{
    if (off + 4 > e->size)
        return -1;
    struct rd r = { e->buf + off, e->buf + e->size, e->buf, e->vaddr, 0 };
    uint64_t len = rd_u(&r, 4);
    if (len == 0xffffffffu)
        len = rd_u(&r, 8);
    if (r.bad || len > (uint64_t)(r.end - r.p) || len < 4)
        return -1;
    r.end = r.p + len;
    if (rd_u(&r, 4) != 0)
        return -1;
    unsigned version = (unsigned)rd_u(&r, 1);
    if (version != 1 && version != 3 && version != 4)
        return -1;
    const char *aug = (const char *)r.p;
    size_t auglen = strnlen(aug, (size_t)(r.end - r.p));
    if (auglen == (size_t)(r.end - r.p))
        return -1;
    r.p += auglen + 1;
    if (version == 4 && (rd_u(&r, 1) != 8 || rd_u(&r, 1) != 0))
        return -1;
    memset(c, 0, sizeof *c);
    c->code_align = rd_uleb(&r);
    c->data_align = rd_sleb(&r);
    c->ra_reg = version == 1 ? rd_u(&r, 1) : rd_uleb(&r);
    c->fde_enc = DW_EH_PE_absptr;
    if (aug[0] == 'z') {
        c->has_z = 1;
        uint64_t zlen = rd_uleb(&r);
        if (r.bad || zlen > (uint64_t)(r.end - r.p))
            return -1;
        const uint8_t *data_end = r.p + zlen;
        for (const char *a = aug + 1; *a && !r.bad; a++) {
            if (*a == 'R')
                c->fde_enc = (uint8_t)rd_u(&r, 1);
            else if (*a == 'L')
                (void)rd_u(&r, 1); /* LSDA encoding: the FDE's aug data is skipped by length */
            else if (*a == 'P') {
                /* Only the size matters: pass a dummy datarel base so a
                 * datarel personality does not count as malformed. */
                uint8_t penc = (uint8_t)rd_u(&r, 1);
                (void)rd_ptr(&r, penc & ~DW_EH_PE_indirect, 1);
            } else if (*a == 'S')
                c->signal = 1;
            else if (*a != 'B')
                break; /* unknown letter: the rest is skipped by length */
        }
        if (r.bad || r.p > data_end)
            return -1;
        r.p = data_end;
    } else if (aug[0] != '\0') {
        return -1; /* pre-'z' augmentations (eh) are not in x86_64 binaries */
    }
    if (r.bad || c->code_align == 0)
        return -1;
    c->insns = r.p;
    c->insns_end = r.end;
    return 0;
}

/* Emits the rows of the FDE whose body is [p, end) and whose CIE is c.
 * Returns 0 (also for an FDE skipped as unusable), or -1 on allocation
 * failure. */
static int do_fde(const struct ehf *e, const uint8_t *p, const uint8_t *end,
                  const struct cie *c, uint64_t bias, struct rowvec *out)
{
    struct rd r = { p, end, e->buf, e->vaddr, 0 };
    uint64_t begin = rd_ptr(&r, c->fde_enc, e->hdr_vaddr);
    uint64_t range = rd_ptr(&r, c->fde_enc & 0x0f, 0);
    if (c->has_z) {
        uint64_t zlen = rd_uleb(&r);
        if (zlen > (uint64_t)(r.end - r.p))
            return 0;
        r.p += zlen;
    }
    if (r.bad || range == 0 || begin + range < begin)
        return 0;
    uint64_t end_pc = begin + range, loc = begin;
    if (out->nspans == out->spancap) {
        size_t nc = out->spancap ? out->spancap * 2 : 1024;
        uint64_t(*nv)[2] = realloc(out->spans, nc * sizeof *nv);
        if (!nv)
            return -1;
        out->spans = nv;
        out->spancap = nc;
    }
    out->spans[out->nspans][0] = begin;
    out->spans[out->nspans++][1] = end_pc;
    struct regstate init = { .cfa_reg = ~0ull, .ra_how = SAVE_LOST }; /* registers: SAME */
    struct rd cr = { c->insns, c->insns_end, e->buf, e->vaddr, 0 };
    if (run_cfa(&cr, c, &init, NULL, &loc, end_pc, bias, NULL) != 0)
        init.cfa_expr = 1; /* unusable CIE: whole FDE UNKNOWN */
    /* Signal frames ('S': glibc's __restore_rt, the OCaml runtime's stack
     * switches) need no special case: a trampoline's return address is an
     * expression, which already makes its rows UNKNOWN. */
    struct regstate st = init;
    if (run_cfa(&r, c, &st, &init, &loc, end_pc, bias, out) != 0)
        st.cfa_expr = 1;
    if (loc < end_pc && st.cfa_expr == 3)
        plt_rows(out, loc, end_pc, bias, &st);
    else if (loc < end_pc)
        push_state(out, loc + bias, &st);
    push_row(out, end_pc + bias, (struct rule){ 0, RULE_GAP, 0, 0, 0, 0, { 0 } });
    return out->oom ? -1 : 0;
}

/* An FDE found in .eh_frame: its first pc (link-time), where its body
 * (after the CIE pointer) starts and ends, and its CIE. */
struct fdeat {
    uint64_t begin, body, end, cie;
};

static int fdeat_cmp(const void *a, const void *b)
{
    const struct fdeat *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->body < y->body ? -1 : x->body > y->body; /* file order */
}

/* Finds every FDE of .eh_frame whose CIE parses, into *out (malloc'd, *n
 * of them). Returns 0, or -1 when out of memory (*out NULL). */
static int find_fdes(const struct ehf *e, struct fdeat **out, size_t *count)
{
    uint64_t off = 0, cie_at = ~0ull;
    struct cie cie;
    int cie_ok = 0;
    size_t n = 0, cap = 0;
    struct fdeat *v = NULL;
    while (off + 4 <= e->size) {
        struct rd r = { e->buf + off, e->buf + e->size, e->buf, e->vaddr, 0 };
        uint64_t len = rd_u(&r, 4);
        if (len == 0)
            break; /* terminator */
        if (len == 0xffffffffu)
            len = rd_u(&r, 8);
        if (r.bad || len > (uint64_t)(r.end - r.p) || len < 4)
            break;
        const uint8_t *body = r.p, *end = r.p + len;
        uint64_t id_pos = (uint64_t)(body - e->buf);
        uint32_t id = (uint32_t)rd_u(&r, 4);
        off = (uint64_t)(end - e->buf);
        if (id == 0)
            continue; /* a CIE: parsed when an FDE refers to it */
        if (id > id_pos)
            continue;
        uint64_t cie_off = id_pos - id;
        if (cie_off != cie_at) {
            cie_at = cie_off;
            cie_ok = parse_cie(e, cie_off, &cie) == 0;
        }
        if (!cie_ok)
            continue;
        r.end = end;
        uint64_t begin = rd_ptr(&r, cie.fde_enc, e->hdr_vaddr);
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 1024;
            struct fdeat *nv = realloc(v, nc * sizeof *nv);
            if (!nv) {
                free(v);
                *out = NULL;
                return -1;
            }
            v = nv;
            cap = nc;
        }
        v[n++] = (struct fdeat){ begin, id_pos + 4, off, cie_off };
    }
    *out = v;
    *count = n;
    return 0;
}

/* Emits the rows of every FDE of .eh_frame, in the order of their first
 * pc: each FDE's rows ascend and FDEs rarely overlap, so the rows come
 * out (nearly) sorted and pack's sort is one pass. In file order (an
 * executable's cold sections, libc's) the 180,000 rows of the OCaml
 * compiler were 13 runs, and merging them was a quarter of building its
 * table. Returns 0, or -1 on allocation failure. */
static int parse_eh_frame(const struct ehf *e, uint64_t bias, struct rowvec *out)
{
    struct fdeat *f;
    size_t n = 0;
    if (find_fdes(e, &f, &n) != 0)
        return -1;
    if (flamme_sort_runs(f, n, sizeof *f, fdeat_cmp) != 0)
        qsort(f, n, sizeof *f, fdeat_cmp);
    /* Room for the rows at once (growing by doubling copied the OCaml
     * compiler's rows several times): a row takes one byte of instructions
     * at least and two or more nearly always (an advance, a new CFA
     * offset), plus an end row per FDE. Pages never written are never
     * faulted in; a vector outgrown still grows. */
    if (out->cap == 0 && !out->oom) {
        size_t guess = (size_t)(e->size / 2) + n + 64;
        if (guess > ROWS_RESERVE_MAX)
            guess = ROWS_RESERVE_MAX;
        if ((out->v = malloc(guess * sizeof *out->v)))
            out->cap = guess;
    }
    uint64_t cie_at = ~0ull;
    struct cie cie;
    int cie_ok = 0, rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (f[i].cie != cie_at) {
            cie_at = f[i].cie;
            cie_ok = parse_cie(e, cie_at, &cie) == 0;
        }
        if (cie_ok && do_fde(e, e->buf + f[i].body, e->buf + f[i].end, &cie, bias, out) != 0)
            rc = -1;
    }
    free(f);
    return rc;
}

/* ------------------------------------------------------------ ELF */

/* Stripped of section headers: .eh_frame_hdr (PT_GNU_EH_FRAME) points at
 * .eh_frame, whose end is found by its terminator within the segment.
 * Returns 0, or -1. */
static int find_by_hdr(const struct flamme_elf *el, struct ehf *e, uint64_t *foff)
{
    const Elf64_Phdr *ph = el->ph;
    size_t nph = el->phnum;
    for (size_t i = 0; i < nph; i++) {
        if (ph[i].p_type != PT_GNU_EH_FRAME || ph[i].p_filesz < 8)
            continue;
        uint8_t hb[16];
        size_t got = ph[i].p_filesz < sizeof hb ? (size_t)ph[i].p_filesz : sizeof hb;
        if (flamme_elf_read(el, ph[i].p_offset, hb, got) != 0 || hb[0] != 1)
            return -1;
        struct rd r = { hb + 4, hb + got, hb, ph[i].p_vaddr, 0 };
        uint64_t at = rd_ptr(&r, hb[1], ph[i].p_vaddr);
        if (r.bad)
            return -1;
        e->hdr_vaddr = ph[i].p_vaddr;
        for (size_t k = 0; k < nph; k++) {
            if (ph[k].p_type == PT_LOAD && at >= ph[k].p_vaddr &&
                at < ph[k].p_vaddr + ph[k].p_filesz) {
                *foff = at - ph[k].p_vaddr + ph[k].p_offset;
                e->size = ph[k].p_vaddr + ph[k].p_filesz - at;
                e->vaddr = at;
                return 0;
            }
        }
        return -1;
    }
    return -1;
}

/* Loads the .eh_frame of image el into e->buf: found by section name, or
 * through PT_GNU_EH_FRAME when there are no section headers. Returns 0, or
 * -1. */
static int load_eh_frame(const struct flamme_elf *el, struct ehf *e)
{
    uint64_t foff = 0;
    int rc = -1;
    const Elf64_Shdr *sh = flamme_elf_section(el, ".eh_frame");
    if (sh) {
        const Elf64_Shdr *hdr = flamme_elf_section(el, ".eh_frame_hdr");
        e->hdr_vaddr = hdr ? hdr->sh_addr : 0;
        foff = sh->sh_offset;
        e->size = sh->sh_size;
        e->vaddr = sh->sh_addr;
        rc = 0;
    } else {
        rc = find_by_hdr(el, e, &foff);
    }
    if (rc != 0 || e->size == 0 || foff > el->size)
        return -1;
    if (e->size > el->size - foff)
        e->size = el->size - foff;
    if (e->size > EH_FRAME_MAX || !(e->buf = malloc(e->size)))
        return -1;
    if (flamme_elf_read(el, foff, e->buf, e->size) != 0) {
        free(e->buf);
        e->buf = NULL;
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------ building */

static int trow_cmp(const void *a, const void *b)
{
    const struct trow *x = a, *y = b;
    if (x->pc != y->pc)
        return x->pc < y->pc ? -1 : 1;
    /* A gap ending one FDE sorts before a row starting the next at the same
     * pc, so the latter wins when equal pcs are merged (last kept). */
    int gx = x->r.reg == RULE_GAP, gy = y->r.reg == RULE_GAP;
    return gy - gx;
}

static int same_rule(const struct rule *a, const struct rule *b)
{
    return memcmp(a, b, sizeof *a) == 0; /* no padding: pad is always 0 */
}

/* The distinct rules of one module being packed, each with its id (its
 * index in rules), found through an index table (common/index_table.h). */
struct ruledict {
    struct rule *rules;
    size_t n, cap;
    struct flamme_itab ids;
};

/* Keyed (common/hash.h): the rules come from the file, and a crafted
 * .eh_frame must not make every lookup walk the whole table. */
static uint64_t rule_hash(const void *ctx, uint32_t i)
{
    const struct ruledict *d = ctx;
    return flamme_table_hash(&d->rules[i], sizeof d->rules[i]);
}

static int rule_eq(const void *ctx, uint32_t i, const void *key, size_t len)
{
    const struct ruledict *d = ctx;
    (void)len;
    return same_rule(&d->rules[i], key);
}

/* The id of rule r in d, added if new. A module with more distinct rules
 * than a rid holds (none seen: libLLVM has 987) gets id 0, the unknown
 * rule, for the rest: those rows stop a walk rather than the whole module
 * having no rows. Returns the id, or -1 (allocation). */
static long rule_id(struct ruledict *d, const struct rule *r)
{
    if (flamme_itab_reserve(&d->ids, d->n, 1024, rule_hash, d) != 0)
        return -1;
    uint32_t *slot = flamme_itab_probe(&d->ids, flamme_table_hash(r, sizeof *r), rule_eq, d,
                                       r, sizeof *r);
    if (*slot)
        return (long)*slot - 1;
    if (d->n == FLAMME_CFI_MAX_RULES)
        return 0;
    if (d->n == d->cap) {
        size_t nc = d->cap ? 2 * d->cap : 64;
        struct rule *nr = realloc(d->rules, nc * sizeof *nr);
        if (!nr)
            return -1;
        d->rules = nr;
        d->cap = nc;
    }
    d->rules[d->n] = *r;
    *slot = (uint32_t)++d->n;
    return (long)d->n - 1;
}

/* Sorts rv, clips it to [lo, hi), merges equal pcs and repeated rules, and
 * packs it into a new module: each distinct rule once, with a uint16 id per
 * row (common/cfi_tables.h). The offsets are written over rv's own rows
 * (an offset is smaller than the row it comes from, so row i is read before
 * offset i overwrites it), then copied with the rules into blocks of their
 * final sizes from common/bulk.h, where the ids are written and where
 * tables read back from the cache also live (free_mod frees both alike).
 * The caller still frees rv.
 * Returns the module, or NULL (allocation). */
static struct cfi_mod *pack(struct rowvec *rv, const char *name, const struct stat *st,
                            uint64_t lo, uint64_t hi)
{
    if (rv->unsorted && flamme_sort_runs(rv->v, rv->n, sizeof *rv->v, trow_cmp) != 0)
        qsort(rv->v, rv->n, sizeof *rv->v, trow_cmp);
    /* The row in force at lo starts the table. */
    size_t first = 0;
    for (size_t i = 0; i < rv->n && rv->v[i].pc <= lo; i++)
        first = i;
    size_t k = 0;
    for (size_t i = first; i < rv->n && rv->v[i].pc < hi; i++) {
        struct trow t = rv->v[i];
        if (t.pc < lo)
            t.pc = lo;
        if (k && rv->v[k - 1].pc == t.pc)
            k--; /* same pc: the later row wins */
        if (k && same_rule(&rv->v[k - 1].r, &t.r))
            continue;
        if (k == 0 && t.r.reg == RULE_GAP)
            continue;
        rv->v[k++] = t;
    }
    struct ruledict d = { 0 };
    const struct rule unknown = { 0, RULE_UNKNOWN, 0, 0, 0, 0, { 0 } };
    struct cfi_mod *m = calloc(1, sizeof *m);
    uint16_t *rid = flamme_bulk_alloc((k ? k : 1) * sizeof *rid);
    int ok = m && rid && rv->v && (m->name = strdup(name)) && rule_id(&d, &unknown) == 0;
    _Static_assert(sizeof(uint32_t) <= sizeof(struct trow), "offsets packed over their rows");
    uint32_t *off = (uint32_t *)(void *)rv->v;
    for (size_t i = 0; ok && i < k; i++) {
        struct trow t = rv->v[i];
        long id = rule_id(&d, &t.r);
        ok = id >= 0;
        off[i] = (uint32_t)(t.pc - lo);
        rid[i] = (uint16_t)id;
    }
    flamme_itab_free(&d.ids);
    uint32_t *koff = ok ? flamme_bulk_alloc((k ? k : 1) * sizeof *koff) : NULL;
    struct rule *krules = koff ? flamme_bulk_alloc(d.n * sizeof *krules) : NULL;
    if (krules) {
        memcpy(koff, off, k * sizeof *koff);
        memcpy(krules, d.rules, d.n * sizeof *krules);
    }
    free(d.rules);
    if (!krules) {
        if (m)
            free(m->name);
        free(m);
        flamme_bulk_free(rid);
        flamme_bulk_free(koff);
        return NULL;
    }
    m->lo = lo;
    m->hi = hi;
    m->dev = (uint64_t)st->st_dev;
    m->ino = (uint64_t)st->st_ino;
    m->n = k;
    m->off = koff;
    m->rid = rid;
    m->rules = krules;
    m->nrules = d.n;
    return m;
}

/* Frees module m: one never published, or every module at free_all. */
static void free_mod(struct cfi_mod *m)
{
    free(m->name);
    flamme_bulk_free(m->off);
    flamme_bulk_free(m->rid);
    flamme_bulk_free(m->rules);
    free(m);
}

/* Publishes a set made of the current one minus modules overlapping m's
 * range, plus m. Builder lock held. Returns 0, or -1 (allocation). */
static int publish(struct cfi_mod *m)
{
    struct cfi_set *old = atomic_load_explicit(&flamme_cfi_published, memory_order_relaxed);
    size_t n_old = old ? old->n : 0;
    struct cfi_set *s = malloc(sizeof *s + (n_old + 1) * sizeof s->mod[0]);
    if (!s)
        return -1;
    size_t k = 0;
    int placed = 0;
    for (size_t i = 0; i < n_old; i++) {
        struct cfi_mod *o = old->mod[i];
        if (o->lo < m->hi && m->lo < o->hi)
            continue; /* replaced (added again, or its range now holds m) */
        if (!placed && o->lo > m->lo) {
            s->mod[k++] = m;
            placed = 1;
        }
        s->mod[k++] = o;
    }
    if (!placed)
        s->mod[k++] = m;
    s->n = k;
    m->all_next = all_mods;
    all_mods = m;
    if (old) {
        old->retired_next = retired;
        retired = old;
    }
    s->retired_next = NULL;
    /* Pairs with the acquire load in flamme_cfi_lookup_sigsafe. */
    atomic_store_explicit(&flamme_cfi_published, s, memory_order_release);
    return 0;
}

static int span_cmp(const void *a, const void *b)
{
    const uint64_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

struct synth_ctx {
    struct rowvec *rv;
    uint64_t bias;
};

/* flamme_synth_emit_fn: appends the derived row s (link-time pc) to the
 * module's rows at its runtime pc. Returns 0, or -1 when out of memory. */
static int synth_row(void *p, const struct flamme_synth_row *s)
{
    struct synth_ctx *c = p;
    struct rule r = { 0, RULE_GAP, 0, 0, 0, 0, { 0 } };
    if (s->rsp_off) {
        r.cfa_off = s->rsp_off;
        r.reg = RULE_REG;
        r.dwreg = DW_REG_RSP;
        memcpy(r.save, s->save, sizeof r.save);
    }
    push_row(c->rv, s->pc + c->bias, r);
    c->rv->unsorted = 1; /* after every FDE's rows */
    return c->rv->oom ? -1 : 0;
}

/* Adds the rows derived from the code of el's functions that no FDE covers
 * (writer/cfi_synth.h), for link-time addresses [lo, hi). rv's spans are
 * sorted and merged here. Returns 0, or -1 when out of memory. */
static int add_synth_rows(const struct flamme_elf *el, struct rowvec *rv, uint64_t bias,
                          uint64_t lo, uint64_t hi)
{
    size_t n = 0;
    /* parse_eh_frame runs the FDEs in the order of their first pc */
    int sorted = 1;
    for (size_t i = 1; i < rv->nspans && sorted; i++)
        sorted = rv->spans[i - 1][0] <= rv->spans[i][0];
    if (!sorted)
        qsort(rv->spans, rv->nspans, sizeof *rv->spans, span_cmp);
    for (size_t i = 0; i < rv->nspans; i++) {
        if (n && rv->spans[i][0] <= rv->spans[n - 1][1]) {
            if (rv->spans[i][1] > rv->spans[n - 1][1])
                rv->spans[n - 1][1] = rv->spans[i][1];
        } else {
            rv->spans[n][0] = rv->spans[i][0];
            rv->spans[n++][1] = rv->spans[i][1];
        }
    }
    rv->nspans = n;
    struct synth_ctx c = { rv, bias };
    return flamme_cfi_synth_module(el, (const uint64_t(*)[2])rv->spans, n, lo, hi, synth_row, &c) <
                   0 ? -1 : 0;
}

/* The frame-table reader the agent handed over (flamme_cfi_set_frame_sites);
 * NULL: rows are not checked against OCaml's frame descriptors. Builder lock. */
static const struct flamme_frame_sites_ops *frame_sites;

void flamme_cfi_set_frame_sites(const struct flamme_frame_sites_ops *ops)
{
    pthread_mutex_lock(&build_lock);
    frame_sites = ops;
    pthread_mutex_unlock(&build_lock);
}

/* One OCaml call site of the module: runtime return address, frame size. */
struct site {
    uint64_t ret;
    uint32_t size;
};

struct sitevec {
    struct site *v;
    size_t n, cap;
    uint64_t bias, lo, hi; /* the mapping: only its own code's sites */
};

/* flamme_frame_site_fn: keeps a site of this mapping's code. Returns 0, or
 * -1 when out of memory. */
static int site_add(void *p, uint64_t ret, uint32_t size)
{
    struct sitevec *s = p;
    uint64_t r = ret + s->bias;
    if (r <= s->lo || r > s->hi || size < 8 || size % 8)
        return 0;
    if (s->n == s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 1024;
        struct site *nv = realloc(s->v, nc * sizeof *nv);
        if (!nv)
            return -1;
        s->v = nv;
        s->cap = nc;
    }
    s->v[s->n++] = (struct site){ r, size };
    return 0;
}

static int site_cmp(const void *a, const void *b)
{
    const struct site *x = a, *y = b;
    return x->ret < y->ret ? -1 : x->ret > y->ret;
}

/* Makes the row that a walk looks up for each OCaml call site (its return
 * address - 1: a caller's frame) say CFA = rsp + the descriptor's frame
 * size, where the module's rows say another rsp offset or nothing. OCaml
 * emits the calls of caml_call_gc and caml_ml_array_bound_error after the
 * function's body with the CFA of the frame outside any `try`: in a `try`
 * the trap frame (16 bytes a level) is left out, and the walk read a word
 * of the frame as the caller's return address (a junk frame, or [broken]).
 * The row covers the call's last byte only, which no sampled pc can be
 * (it is inside the call instruction), so the interrupted frame's rows are
 * unchanged. Rows other than rsp-based are left alone. Returns the number
 * of sites mended. */
static size_t mend_call_sites(struct rowvec *rv, struct sitevec *s)
{
    if (!s->n || !rv->n || rv->oom)
        return 0;
    if (rv->unsorted && flamme_sort_runs(rv->v, rv->n, sizeof *rv->v, trow_cmp) != 0)
        qsort(rv->v, rv->n, sizeof *rv->v, trow_cmp);
    rv->unsorted = 0;
    /* Sites in order: the rows added make one ascending run for pack. */
    if (flamme_sort_runs(s->v, s->n, sizeof *s->v, site_cmp) != 0)
        qsort(s->v, s->n, sizeof *s->v, site_cmp);
    size_t n0 = rv->n, mended = 0;
    const struct rule gap = { 0, RULE_GAP, 0, 0, 0, 0, { 0 } };
    for (size_t i = 0; i < s->n && !rv->oom; i++) {
        uint64_t at = s->v[i].ret - 1;
        size_t lo = 0, hi = n0; /* the first row after at */
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (rv->v[mid].pc <= at)
                lo = mid + 1;
            else
                hi = mid;
        }
        struct rule r = lo ? rv->v[lo - 1].r : gap, fixed;
        if (r.reg == RULE_GAP) {
            fixed = (struct rule){ (int32_t)s->v[i].size, RULE_REG, DW_REG_RSP, 0, 0, 0, { 0 } };
        } else if (r.reg == RULE_REG && r.dwreg == DW_REG_RSP) {
            if (r.cfa_off == (int32_t)s->v[i].size)
                continue;
            fixed = r;
            fixed.cfa_off = (int32_t)s->v[i].size;
        } else {
            continue;
        }
        int row_at_ret = lo < n0 && rv->v[lo].pc == s->v[i].ret;
        push_row(rv, at, fixed);
        if (!row_at_ret)
            push_row(rv, s->v[i].ret, r);
        mended++;
    }
    rv->unsorted = 1;
    return mended;
}

#define SWITCHES_MAX 4 /* spans kept from one image (caml_raise_exn: one) */

/* The runtime's unannounced stack switches found in an image, mended once
 * the call sites are (switch_mend). */
struct switches {
    struct flamme_switch_span v[SWITCHES_MAX];
    int n;
};

/* flamme_cfi_ocaml_scan's span: keeps it. Returns 0. */
static int switch_keep(void *p, const struct flamme_switch_span *s)
{
    struct switches *w = p;
    if (w->n < SWITCHES_MAX)
        w->v[w->n++] = *s;
    return 0;
}

/* Makes the rows of [s->lo, s->hi) (link-time; the mapping [lo, hi) has
 * this bias) say the span's rule instead (runtime_hooks/switch_rows.h:
 * caml_raise_exn on the C stack, whose rows describe the OCaml stack it
 * left); the row in force at s->hi before stays in force from there. The
 * rows are sorted first; a row is added only where none starts, so no two
 * share a pc. A span outside the mapping is ignored. */
static void switch_mend(struct rowvec *rv, const struct flamme_switch_span *s, uint64_t bias,
                        uint64_t map_lo, uint64_t map_hi)
{
    uint64_t lo = s->lo + bias, hi = s->hi + bias;
    if (rv->oom || lo >= hi || lo < map_lo || hi > map_hi)
        return;
    if (rv->unsorted && flamme_sort_runs(rv->v, rv->n, sizeof *rv->v, trow_cmp) != 0)
        qsort(rv->v, rv->n, sizeof *rv->v, trow_cmp);
    rv->unsorted = 0;
    struct rule r = { s->cfa_off, RULE_REG, s->dwreg, 0, 0, 0, { 0 } };
    r.save[0] = s->rbp_save;
    const struct rule gap = { 0, RULE_GAP, 0, 0, 0, 0, { 0 } };
    size_t n0 = rv->n, a = 0, b;
    while (a < n0 && rv->v[a].pc < lo) /* the first row at or after lo */
        a++;
    for (b = a; b < n0 && rv->v[b].pc < hi; b++)
        ;
    /* In force at hi: a row starting there, else the last one before. */
    int row_at_hi = b < n0 && rv->v[b].pc == hi;
    struct rule after = b ? rv->v[b - 1].r : gap;
    int row_at_lo = a < n0 && rv->v[a].pc == lo;
    for (size_t i = a; i < b; i++)
        rv->v[i].r = r;
    if (!row_at_lo)
        push_row(rv, lo, r);
    if (!row_at_hi)
        push_row(rv, hi, after);
    rv->unsorted = 1;
}

/* Builds and publishes the module for the x86_64 ELF open on fd, mapped at
 * [lo, hi) with load bias bias, or (bias_from_map) with the bias of an
 * executable mapping starting at lo at file offset map_off. switch_only: the
 * file's code has frame pointers, keep only the rows whose CFA is found in
 * memory (the OCaml runtime's stack switches: caml_start_program,
 * caml_c_call, caml_runstack...); elsewhere the walker follows rbp. Builder
 * lock held. Returns the number of rows, or -1. */
static long add_fd(int fd, const char *name, uint64_t bias, int bias_from_map, uint64_t map_off,
                   uint64_t lo, uint64_t hi, int switch_only)
{
    struct ehf e = { 0 };
    struct stat st;
    struct flamme_elf el;
    if (hi <= lo || hi - lo > UINT32_MAX || fstat(fd, &st) != 0 || flamme_elf_open_fd(&el, fd) != 0)
        return -1;
    int ok = el.eh.e_machine == EM_X86_64 &&
             (!bias_from_map || flamme_elf_exec_bias(el.ph, el.phnum, lo, map_off, &bias) == 0);
    /* The same file at the same range in its own addresses has the same
     * rows in every process: another may have kept them (cfi_cache.h). */
    struct flamme_cfi_key key = { &st, lo - bias, hi - lo, switch_only };
    struct cfi_mod *m = ok ? flamme_cfi_cache_load(&key, lo, name) : NULL;
    ok = ok && (m || load_eh_frame(&el, &e) == 0);
    if (!ok) {
        flamme_elf_close(&el);
        return -1;
    }
    if (!m) {
        struct rowvec rv = { 0 };
        int rc = parse_eh_frame(&e, bias, &rv);
        free(e.buf);
        for (size_t i = 0; switch_only && i < rv.n; i++)
            if (rv.v[i].r.reg != RULE_DEREF) {
                rv.v[i].r = (struct rule){ 0, RULE_GAP, 0, 0, 0, 0, { 0 } };
                rv.unsorted = 1; /* a gap now shares a pc with the row after it */
            }
        /* Frame pointers do not help code without CFI either (crtstuff,
         * hand-written stubs): its derived rows are kept in both modes. */
        if (rc == 0 && !rv.oom && add_synth_rows(&el, &rv, bias, lo - bias, hi - bias) != 0)
            rc = -1;
        /* One pass over the symbols for both: the call sites only without
         * frame pointers (elsewhere the walker follows rbp), the switches
         * in both modes (rbp does not lead out of the C stack
         * caml_raise_exn moved to). */
        if (rc == 0 && !rv.oom && frame_sites) {
            struct sitevec sv = { NULL, 0, 0, bias, lo, hi };
            struct switches sw = { .n = 0 };
            /* Out of memory there: the rows as the file gives them. */
            if (flamme_cfi_ocaml_scan(&el, frame_sites, switch_only ? NULL : site_add, &sv,
                                      switch_keep, &sw) == 0) {
                mend_call_sites(&rv, &sv);
                for (int i = 0; i < sw.n; i++)
                    switch_mend(&rv, &sw.v[i], bias, lo, hi);
            }
            free(sv.v);
        }
        if (rc == 0 && !rv.oom)
            m = pack(&rv, name, &st, lo, hi);
        free(rv.v);
        free(rv.spans);
        if (!m) {
            flamme_elf_close(&el);
            return -1;
        }
        m->switch_only = switch_only;
        if (m->n)
            flamme_cfi_cache_store(&key, m);
    }
    flamme_elf_close(&el);
    if (m->n == 0 || publish(m) != 0) {
        free_mod(m);
        return -1;
    }
    return (long)m->n;
}

long flamme_cfi_add_module(const char *path, uint64_t bias, uint64_t lo, uint64_t hi)
{
    struct flamme_fd_id fid;
    int fd = flamme_open_high(path, O_RDONLY, &fid);
    if (fd < 0)
        return -1;
    pthread_mutex_lock(&build_lock);
    long n = add_fd(fd, path, bias, 0, 0, lo, hi, 0);
    pthread_mutex_unlock(&build_lock);
    flamme_close_checked(fd, &fid);
    return n;
}

/* ------------------------------------------------------------ maps */

/* 1 if the mapping's file (path, device, inode) is the file named skip. */
static int is_skipped(const char *skip, const char *path, dev_t dev, uint64_t ino)
{
    if (!skip || !skip[0])
        return 0;
    if (strcmp(skip, path) == 0)
        return 1;
    struct stat st;
    return stat(skip, &st) == 0 && st.st_dev == dev && (uint64_t)st.st_ino == ino;
}

/* 1 if this file is published with this range (whatever path it was added
 * by: /lib and /usr/lib name one file). Builder lock held. */
static int already_added(dev_t dev, uint64_t ino, uint64_t lo, uint64_t hi, int switch_only)
{
    const struct cfi_set *s = atomic_load_explicit(&flamme_cfi_published, memory_order_relaxed);
    for (size_t i = 0; s && i < s->n; i++) {
        const struct cfi_mod *m = s->mod[i];
        if (m->lo == lo && m->hi == hi && m->dev == (uint64_t)dev && m->ino == ino &&
            m->switch_only == switch_only)
            return 1;
    }
    return 0;
}

/* The vDSO (clock_gettime's code) is no file: its image is copied from
 * memory into a memfd, which the file code then reads like any other.
 * Builder lock held. Returns 1 if added. */
static int add_vdso(uint64_t start, uint64_t end)
{
    static int done;
    if (done || end <= start || end - start > (16u << 20))
        return 0;
    done = 1;
    struct flamme_fd_id fid;
    flamme_fd_window_enter(); /* common/fds.h */
    int fd = flamme_fd_high(memfd_create("flamme-vdso", MFD_CLOEXEC), &fid);
    flamme_fd_window_leave();
    if (fd < 0)
        return 0;
    int ok = write(fd, (const void *)(uintptr_t)start, end - start) == (ssize_t)(end - start) &&
             add_fd(fd, "[vdso]", 0, 1, 0, start, end, 0) > 0;
    flamme_close_checked(fd, &fid);
    return ok;
}

int flamme_cfi_add_from_maps(const char *fp_file, const char *skip)
{
    FILE *f = flamme_fopen_high("/proc/self/maps");
    if (!f)
        return 0;
    char line[4096 + 256];
    int added = 0;
    pthread_mutex_lock(&build_lock);
    while (fgets(line, sizeof line, f)) {
        unsigned long long start, end, off, ino;
        unsigned dmaj, dmin;
        char perms[8];
        int pathpos = 0;
        if (sscanf(line, "%llx-%llx %7s %llx %x:%x %llu %n", &start, &end, perms, &off, &dmaj,
                   &dmin, &ino, &pathpos) < 7 || !pathpos)
            continue;
        char *path = line + pathpos;
        path[strcspn(path, "\n")] = '\0';
        static const char del[] = " (deleted)";
        size_t pl = strlen(path);
        int deleted = pl > sizeof del - 1 && strcmp(path + pl - (sizeof del - 1), del) == 0;
        if (deleted)
            path[pl - (sizeof del - 1)] = '\0';
        if (strlen(perms) >= 3 && perms[2] == 'x' && strcmp(path, "[vdso]") == 0) {
            added += add_vdso(start, end);
            continue;
        }
        if (strlen(perms) < 3 || perms[0] != 'r' || perms[2] != 'x' || path[0] != '/')
            continue;
        int sw = is_skipped(fp_file, path, makedev(dmaj, dmin), ino);
        if (is_skipped(skip, path, makedev(dmaj, dmin), ino) ||
            already_added(makedev(dmaj, dmin), ino, start, end, sw))
            continue;
        /* map_files names the very inode that is mapped, even if the path
         * now names another file. */
        char mf[64];
        snprintf(mf, sizeof mf, "/proc/self/map_files/%llx-%llx", start, end);
        struct flamme_fd_id fid;
        int fd = flamme_open_high(mf, O_RDONLY, &fid);
        if (fd < 0 && !deleted)
            fd = flamme_open_high(path, O_RDONLY, &fid);
        if (fd < 0)
            continue;
        struct stat st;
        if (fstat(fd, &st) == 0 && (uint64_t)st.st_ino == ino &&
            add_fd(fd, path, 0, 1, off, start, end, sw) > 0)
            added++;
        flamme_close_checked(fd, &fid);
    }
    pthread_mutex_unlock(&build_lock);
    fclose(f);
    return added;
}

void flamme_cfi_stats(uint64_t *modules, uint64_t *rows, uint64_t *bytes)
{
    pthread_mutex_lock(&build_lock);
    const struct cfi_set *s = atomic_load_explicit(&flamme_cfi_published, memory_order_relaxed);
    uint64_t nm = 0, nr = 0, nb = 0;
    for (size_t i = 0; s && i < s->n; i++) {
        nm++;
        nr += s->mod[i]->n;
        nb += sizeof *s->mod[i] + s->mod[i]->n * (sizeof(uint32_t) + sizeof(uint16_t)) +
              s->mod[i]->nrules * sizeof(struct rule);
    }
    if (s)
        nb += sizeof *s + s->n * sizeof s->mod[0];
    pthread_mutex_unlock(&build_lock);
    *modules = nm;
    *rows = nr;
    *bytes = nb;
}

void flamme_cfi_free_all(void)
{
    pthread_mutex_lock(&build_lock);
    struct cfi_set *s = atomic_exchange_explicit(&flamme_cfi_published, NULL, memory_order_acq_rel);
    free(s);
    while (retired) {
        struct cfi_set *next = retired->retired_next;
        free(retired);
        retired = next;
    }
    while (all_mods) {
        struct cfi_mod *next = all_mods->all_next;
        free_mod(all_mods);
        all_mods = next;
    }
    pthread_mutex_unlock(&build_lock);
}

int flamme_cfi_build_atfork_child(void)
{
    return flamme_mutex_reset_child(&build_lock);
}
