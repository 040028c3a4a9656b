/*
 * agent/walk.c — the stack walker (see agent/walk.h). Runs in the SIGPROF
 * handler on any thread (and in normal context around blocking calls): no
 * malloc, no locks, no stdio. Memory is read directly only inside the
 * known stacks (the caller's ranges); elsewhere through a fault-tolerant
 * copy or read.
 *
 * Registers: the walk carries the registers it knows, by DWARF number. The
 * interrupted frame knows them all (from the signal's ucontext); each step
 * by call-frame information keeps rsp (the CFA) and the callee-saved
 * registers rbp, rbx, r12-r15, restored from their save slots where the
 * rows say so, and forgets the rest (caller-saved: a caller cannot rely on
 * them either). That is what OCaml needs: around a [@@noalloc] call (and in
 * caml_c_call_stack_args) the OCaml frame's CFA is rbx-based, and the C
 * callee may have pushed rbx. A step by frame pointer keeps rsp and rbp only.
 */
#include "agent/walk.h"

#include <stdatomic.h>
#include <stddef.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/ucontext.h>
#include <unistd.h>

#include "agent/cfi.h"
#include "common/profile.h"

#define MAX_RANGES 16
/* A bound on stack crossings whatever else holds (the walk never goes
 * back down a stack it has left: see seen). */
#define MAX_SWITCHES 4096

#define R_RSP FLAMME_DW_RSP
#define R_RBP FLAMME_DW_RBP
#define BIT(i) FLAMME_WALK_REG(i)
/* rbx, rbp, r12-r15: what survives a call (SysV ABI), plus rsp. */
#define KEPT_MASK (BIT(3) | BIT(6) | BIT(7) | BIT(12) | BIT(13) | BIT(14) | BIT(15))

static const uint8_t saved_dw[FLAMME_CFI_NSAVED] = FLAMME_CFI_SAVED_DWREGS;

struct walk {
    struct flamme_walk_regs g;
    const struct flamme_range *ranges;
    int nranges;
    struct flamme_walk_copy *copy;
    uintptr_t copy_base, copy_len; /* the copied chunk covers [copy_base, copy_base + copy_len) */
    int cur;                       /* range of the current frame, or -1 */
    int switches;                  /* moves to another stack towards younger addresses */
    uintptr_t ra_at;               /* where the last step read its return address (0: a copy) */
    uint8_t step;                  /* what the last step was (FLAMME_STEP_*, agent/memo.h) */
    /* Handlers nested deeper than the ranges given (struct flamme_walk_copy's
     * more): the rest of the chain, and the window of ranges the walk moves
     * along it (ranges then points at own). window counts the moves. */
    uintptr_t more;
    int more_direct, first_ocaml, window;
    struct flamme_range own[MAX_RANGES];
    /* The oldest point the walk reached in each stack (0: not yet): a stack
     * is walked from its young end to its old one, so the walk may come
     * back to a stack it left (OCaml -> C -> a callback's OCaml -> C ...)
     * only above that point; anything else is a loop. */
    uintptr_t seen[MAX_RANGES];
};

/* Index of the range holding [addr, addr+len), or -1. */
static int find_range(const struct flamme_range *r, int n, uintptr_t addr, uintptr_t len,
                      int hint)
{
    if (hint >= 0 && addr >= r[hint].lo && addr + len <= r[hint].hi && addr + len > addr)
        return hint;
    for (int i = 0; i < n; i++)
        if (addr >= r[i].lo && addr + len <= r[i].hi && addr + len > addr)
            return i;
    return -1;
}

/* The walk reached memory in none of its stacks while the thread's
 * effect-handler chain goes on beyond them: drops the OCaml stacks before
 * the current one (the walk goes from a stack to its parent only, so it
 * has left them; the system stack, before first_ocaml, stays) and fetches
 * the chain's next stacks into the room made. Returns 1 if stacks were
 * added, 0 if none could be (no chain left, the walk not on an OCaml
 * stack, no room: the current stack is already the window's first). */
static int more_ranges(struct walk *w)
{
    if (!w->more || w->cur < w->first_ocaml || w->cur >= w->nranges)
        return 0;
    int keep = w->nranges - w->cur, at = w->first_ocaml + keep;
    if (at >= MAX_RANGES)
        return 0;
    if (w->ranges != w->own) {
        for (int i = 0; i < w->nranges; i++)
            w->own[i] = w->ranges[i];
        w->ranges = w->own;
    }
    for (int i = 0; i < keep; i++) {
        w->own[w->first_ocaml + i] = w->own[w->cur + i];
        w->seen[w->first_ocaml + i] = w->seen[w->cur + i];
    }
    for (int i = at; i < MAX_RANGES; i++)
        w->seen[i] = 0;
    int k = flamme_ocaml_more_ranges_sigsafe(&w->more, w->more_direct, w->copy->chain, w->own + at,
                                             MAX_RANGES - at);
    w->nranges = at + k;
    w->cur = w->first_ocaml;
    w->window++;
    /* A new stretch of the chain: its stack switches are bounded afresh
     * (the chain is walked in order, and the frame count bounds the walk). */
    w->switches = 0;
    return k > 0;
}

/* The known stack holding [addr, addr+len) as find_range finds it, moving
 * the window along the effect-handler chain once when none does. */
static int locate(struct walk *w, uintptr_t addr, uintptr_t len)
{
    int r = find_range(w->ranges, w->nranges, addr, len, w->cur);
    if (r < 0 && more_ranges(w))
        r = find_range(w->ranges, w->nranges, addr, len, -1);
    return r;
}

/* Copies the stack words at [addr, addr + words*8) into copy->buf with
 * fault-tolerant reads, one page at a time, stopping at the first unreadable
 * page. Returns the number of words copied (0: nothing readable). */
static uint32_t copy_chunk(struct flamme_walk_copy *copy, uintptr_t addr)
{
    uint32_t got = 0;
    while (got < copy->words) {
        uintptr_t at = addr + (uintptr_t)got * 8;
        uintptr_t page_end = (at | 0xfff) + 1;
        uint32_t n = (uint32_t)((page_end - at) / 8);
        if (n > copy->words - got)
            n = copy->words - got;
        if (n == 0 || flamme_safe_read_sigsafe(copy->buf + got, at, (unsigned long)n * 8) != 0)
            break;
        got += n;
    }
    return got;
}

/* Reads the aligned stack word at addr: directly when a known range holds
 * it (*range = its index), else from a checked copy (*range = -1), taking a
 * new chunk (starting a little below addr, within addr's page, so that the
 * save slots under a CFA come along) while the budget lasts. Returns 0, or
 * -1 when the word cannot be read. */
static int stack_word(struct walk *w, uintptr_t addr, uintptr_t *v, int *range)
{
    if (addr & 7)
        return -1;
    int r = locate(w, addr, 8);
    if (range)
        *range = r;
    if (r >= 0) {
        *v = *(const uintptr_t *)addr;
        return 0;
    }
    struct flamme_walk_copy *c = w->copy;
    if (!c)
        return -1;
    if (addr < w->copy_base || addr + 8 > w->copy_base + w->copy_len) {
        if (c->budget <= 0)
            return -1;
        c->budget--;
        uintptr_t start = addr - 64;
        if (start > addr || (start & ~(uintptr_t)0xfff) != (addr & ~(uintptr_t)0xfff))
            start = addr & ~(uintptr_t)0xfff;
        w->copy_base = start;
        w->copy_len = (uintptr_t)copy_chunk(c, start) * 8;
        if (addr + 8 > w->copy_base + w->copy_len)
            return -1;
    }
    *v = c->buf[(addr - w->copy_base) / 8];
    return 0;
}

/* Reads any word (the runtime's stack-switch records: a c_stack_link, a
 * fiber's handler): directly inside the known stacks, else with a
 * fault-tolerant read. Returns 0, or -1. */
static int any_word(const struct walk *w, uintptr_t addr, uintptr_t *v)
{
    if (find_range(w->ranges, w->nranges, addr, 8, -1) >= 0) {
        *v = *(const uintptr_t *)addr;
        return 0;
    }
    return flamme_safe_read_sigsafe(v, addr, sizeof *v) == 0 ? 0 : -1;
}

/* When the sampled pc sits at a point where rbp does not yet (or no longer)
 * describe the current function's frame, returns the caller's return address
 * read from the stack pointer, sets *ok and *ra_slot (where it was read);
 * otherwise *ok = 0. At each of these points the callee-saved registers
 * still hold the caller's values (nothing pushed yet but rbp, or all
 * restored). Recognises
 * OCaml's (and gcc's) frame-pointer code: the stack-overflow check before
 * the prologue, push %rbp, mov %rsp,%rbp, and ret or a tail-call jmp right
 * after pop %rbp; and PLT entries (jmp through the GOT, endbr64). Reads the
 * code bytes around pc, which are mapped since the thread was executing them
 * (backwards only within pc's page). */
static uintptr_t leaf_caller(uintptr_t pc, uintptr_t sp, const struct flamme_range *r, int n,
                             int *ok, uintptr_t *ra_slot)
{
    const unsigned char *c = (const unsigned char *)pc;
    int back = (pc & 0xfff) >= 4; /* c[-1..-4] readable */
    uintptr_t slot;
    *ok = 0;
    if (c[0] == 0x55 || c[0] == 0xc3) /* push %rbp (entry) / ret (after pop %rbp) */
        slot = sp;
    else if (c[0] == 0x48 && c[1] == 0x89 && c[2] == 0xe5) /* mov %rsp,%rbp: rbp pushed */
        slot = sp + 8;
    else if (c[0] == 0x4c && c[1] == 0x8d && (c[2] == 0x94 || c[2] == 0x54) && c[3] == 0x24)
        slot = sp; /* lea -N(%rsp),%r10: OCaml's stack check, before the prologue */
    else if (c[0] == 0x4d && c[1] == 0x3b && c[2] == 0x56 && c[3] == 0x28)
        slot = sp; /* cmp 0x28(%r14),%r10 */
    else if (back && c[-4] == 0x4d && c[-3] == 0x3b && c[-2] == 0x56 && c[-1] == 0x28 &&
             (c[0] == 0x72 || (c[0] == 0x0f && c[1] == 0x82)))
        slot = sp; /* jb after the stack check */
    else if ((c[0] == 0xff && c[1] == 0x25) || (c[0] == 0xf2 && c[1] == 0xff && c[2] == 0x25))
        slot = sp; /* jmp *GOT(%rip): a PLT entry (or -fno-plt tail call) */
    else if (c[0] == 0xf3 && c[1] == 0x0f && c[2] == 0x1e && c[3] == 0xfa)
        slot = sp; /* endbr64 at a function's (or PLT entry's) start */
    else if (back && c[-1] == 0x5d &&
             (c[0] == 0xe9 || c[0] == 0xeb || c[0] == 0xff || (c[0] == 0x41 && c[1] == 0xff)))
        slot = sp; /* tail call: pop %rbp; jmp */
    else
        return 0;
    if (find_range(r, n, slot, 8, -1) < 0)
        return 0;
    *ok = 1;
    *ra_slot = slot;
    return *(const uintptr_t *)slot;
}

/* OCaml's out-of-line stack check: at a function's entry, before its
 * frame exists, `push $framesize; call caml_call_realloc_stack; pop %r10;
 * jmp back`. The compiler's rows there describe the frame as allocated
 * (the CFA too high by its size: the walk read a word of the caller's
 * frame as the return address, an [unknown] frame under the function).
 * 1 if ra (a return address, not yet known to be mapped) is that pop: the
 * row for the call starts at the call (after the push) and the next at
 * ra + 2 (after the pop), 8 lower; then the code bytes, read checked,
 * are those instructions. Else 0. */
static int realloc_stub_at(struct flamme_cfi_cache *cfi, uintptr_t ra,
                           const struct flamme_cfi_row *row)
{
    struct flamme_cfi_row next;
    unsigned char c[12];
    if (row->cfa_reg != FLAMME_CFA_RSP || row->pc != ra - 5 ||
        !flamme_cfi_lookup_cached_sigsafe(cfi, ra + 2, &next) || next.pc != ra + 2 ||
        next.cfa_reg != FLAMME_CFA_RSP || next.cfa_off != row->cfa_off - 8 ||
        flamme_safe_read_sigsafe(c, ra - 10, sizeof c) != 0)
        return 0;
    /* c[10] = ra[0] */
    return c[10] == 0x41 && c[11] == 0x5a && c[5] == 0xe8 && (c[3] == 0x6a || c[0] == 0x68);
}

/* The interrupted pc inside that stack check's own code: at its push
 * (nothing pushed yet), at the pop after the call returned (the frame size
 * still pushed) or at the jmp back. The rows there are the same wrong ones
 * (the frame as allocated): seen as `...;[unknown];Gcalloc.make` in place
 * of `...;Gcalloc.trees;Gcalloc.make`, the junk return address naming
 * nothing and rbp skipping the caller. Recognised as realloc_stub_at does,
 * by the rows around (the call's 8 above the push's and the jmp's) and
 * the code bytes (the first read directly, as the thread was executing
 * it; the rest checked). Returns the CFA's offset from rsp there (8, or 16
 * at the pop), or 0. */
static int stack_check_leaf(struct flamme_cfi_cache *cfi, uintptr_t pc,
                            const struct flamme_cfi_row *row)
{
    if (row->cfa_reg != FLAMME_CFA_RSP || row->cfa_off <= 8)
        return 0;
    if (realloc_stub_at(cfi, pc, row))
        return 16;
    const unsigned char *d = (const unsigned char *)pc;
    if (d[0] != 0x6a && d[0] != 0x68 && d[0] != 0xeb && d[0] != 0xe9)
        return 0;
    struct flamme_cfi_row o;
    unsigned char c[14];
    /* push $size: the call right after it, then pop %r10 */
    uintptr_t at = d[0] == 0x6a ? pc + 2 : d[0] == 0x68 ? pc + 5 : pc - 7;
    if (!flamme_cfi_lookup_cached_sigsafe(cfi, at, &o) || o.pc != at ||
        o.cfa_reg != FLAMME_CFA_RSP || o.cfa_off != row->cfa_off + 8)
        return 0;
    if (at > pc) {
        size_t k = at - pc;
        return flamme_safe_read_sigsafe(c, pc, k + 7) == 0 && c[k] == 0xe8 && c[k + 5] == 0x41 &&
                       c[k + 6] == 0x5a
                   ? 8
                   : 0;
    }
    /* jmp back: call, pop %r10 right before it */
    return flamme_safe_read_sigsafe(c, at, 7) == 0 && c[0] == 0xe8 && c[5] == 0x41 &&
                   c[6] == 0x5a
               ? 8
               : 0;
}

static int row_step(struct walk *w, struct flamme_cfi_row row, uintptr_t *pc, int leaf);

/* One step of the walk by call-frame information (leaf: w is the
 * interrupted frame). Returns 1 and moves w's registers to the caller's
 * frame (*pc = its return address), 0 when lookup_pc has no usable rule
 * (then frame pointers are used), -1 when the rule needs a register the
 * walk does not know or leads outside the readable stacks, or back to
 * younger frames of the same stack, -2 when caml_runstack's parent is
 * unknown in a frame-pointer runtime (frame pointers may go on). */
static int cfi_step(struct walk *w, uintptr_t lookup_pc, uintptr_t *pc, int leaf)
{
    struct flamme_cfi_row row;
    if (!flamme_cfi_lookup_cached_sigsafe(w->copy ? w->copy->cfi : NULL, lookup_pc, &row) ||
        row.cfa_reg == FLAMME_CFA_UNKNOWN)
        return 0;
    /* CFA = rsp + 0 puts the return address below the stack pointer: no
     * function is ever there. It is the OCaml runtime's row right after
     * the pop %rbp that ends a stack switch in frame-pointer builds
     * (caml_perform, caml_resume count the pop twice); the return address
     * is on top of the stack. Only the interrupted frame can be there. */
    if (leaf && row.cfa_reg == FLAMME_CFA_RSP && row.cfa_off == 0)
        row.cfa_off = 8;
    /* At a ret the return address is on top of the stack and every
     * callee-saved register is the caller's again, whatever the rows say:
     * OCaml's frame-pointer code has no row after its pop %rbp (rsp+16
     * until the ret), so a sample on the ret read the word above the
     * return address. The instruction's first byte is read directly: the
     * thread was executing it. */
    const unsigned char *insn = (const unsigned char *)lookup_pc;
    /* The same at a tail call's jmp right after the pop %rbp (rel32, rel8,
     * or ff /4 through a register, REX.B or not): OCaml 5.1's frame-pointer
     * code keeps rsp+16 there, and a sample on the jmp named a word of the
     * caller's frame as its caller (an [unknown] frame, not marked broken:
     * 0.25% of the samples of an exception-raising fiber loop, on match_with's
     * jmp to caml_runstack). Only where the row still counts the pushed rbp
     * and nothing else saved: a compiler's jmp into another epilogue's pops
     * after its own pop %rbp has rows that say so. The byte before is read
     * only within the page. */
    int others_same = 1;
    for (int i = 1; i < FLAMME_CFI_NSAVED; i++)
        others_same &= row.save[i] == FLAMME_SAVE_SAME;
    int tail = leaf && row.cfa_reg == FLAMME_CFA_RSP && row.cfa_off == 16 && others_same &&
               (lookup_pc & 0xfff) != 0 && insn[-1] == 0x5d &&
               (insn[0] == 0xe9 || insn[0] == 0xeb ||
                (insn[0] == 0xff && ((insn[1] >> 3) & 7) == 4) ||
                (insn[0] == 0x41 && insn[1] == 0xff && ((insn[2] >> 3) & 7) == 4));
    if (tail ||
        (leaf && (insn[0] == 0xc3 || insn[0] == 0xc2 || (insn[0] == 0xf3 && insn[1] == 0xc3)))) {
        row.cfa_reg = FLAMME_CFA_RSP;
        row.dwreg = R_RSP;
        row.cfa_off = 8;
        for (int i = 0; i < FLAMME_CFI_NSAVED; i++)
            row.save[i] = FLAMME_SAVE_SAME;
    }
    int stub_off = leaf ? stack_check_leaf(w->copy ? w->copy->cfi : NULL, lookup_pc, &row)
                   : realloc_stub_at(w->copy ? w->copy->cfi : NULL, lookup_pc + 1, &row) ? 16
                                                                                        : 0;
    if (stub_off) {
        /* The caller's return address is at rsp, or above the pushed frame
         * size; nothing else is saved yet. */
        row.cfa_off = stub_off;
        for (int i = 0; i < FLAMME_CFI_NSAVED; i++)
            row.save[i] = FLAMME_SAVE_SAME;
    }
    return row_step(w, row, pc, leaf);
}

/* cfi_step's move by the row in force (returns as cfi_step does). */
static int row_step(struct walk *w, struct flamme_cfi_row row, uintptr_t *pc, int leaf)
{
    int from = w->cur, window = w->window, guessed_rbp = 0;
    if (row.dwreg > 15 || !(w->g.valid & BIT(row.dwreg)))
        return -1;
    uintptr_t sp = w->g.r[R_RSP], base = w->g.r[row.dwreg], cfa;
    int deref = row.cfa_reg == FLAMME_CFA_DEREF_RSP || row.cfa_reg == FLAMME_CFA_DEREF_RBP ||
                row.cfa_reg == FLAMME_CFA_DEREF_REG;
    if (deref) {
        /* The runtime's stack switches keep the other stack's pointer in
         * memory: a c_stack_link, a fiber's handler, a stack_info's saved sp. */
        uintptr_t v, at = base + (uintptr_t)(intptr_t)row.cfa_off;
        if (any_word(w, at, &v) != 0)
            return -1;
        /* caml_runstack's row reads the parent from the handler of the
         * stack the walk is on; a callback from C running on that stack
         * has taken it away (0 there), and the chain's next range is the
         * parent it keeps (runtime_hooks/ocaml_rt.c, stashed_parent). */
        if (row.nderef == 2 && v == 0 && w->cur >= w->first_ocaml && w->cur < w->nranges &&
            at == flamme_ocaml_parent_slot_sigsafe(&w->ranges[w->cur])) {
            v = w->cur + 1 < w->nranges ? w->ranges[w->cur + 1].lo : w->more;
            /* Not found (the callback is between taking the parent away
             * and registering it): with frame pointers, caml_runstack's
             * frame still links to its caller's. */
            if (!v && flamme_ocaml_has_frame_pointers_sigsafe() == 1)
                return -2;
        }
        if (row.nderef == 2 && any_word(w, v + row.mid_add, &v) != 0)
            return -1;
        cfa = v + (uintptr_t)(intptr_t)row.cfa_add;
    } else {
        cfa = base + (uintptr_t)(intptr_t)row.cfa_off;
    }
    uintptr_t ra;
    int r;
    if (stack_word(w, cfa - 8, &ra, &r) != 0)
        return -1;
    if (cfa <= sp) {
        /* Towards younger frames: only onto another stack (the CFA of a
         * stack switch, or of an OCaml frame whose rbx holds its stack
         * pointer while it calls C), and a bounded number of times. */
        int rs = find_range(w->ranges, w->nranges, sp, 8, -1);
        if (row.cfa_reg == FLAMME_CFA_RSP || rs == r || ++w->switches > MAX_SWITCHES)
            return -1;
    }
    if (r >= 0 && r != w->cur && cfa <= w->seen[r])
        return -1;
    /* rbp pointing at the word under the return address is this frame's
     * own frame pointer, never its caller's: hand-written code pushes rbp
     * and points it there without saying so in its CFI (the OCaml runtime's
     * ENTER_FUNCTION in frame-pointer builds); the caller's rbp is that word. */
    if (row.save[0] == FLAMME_SAVE_SAME && (w->g.valid & BIT(R_RBP)) &&
        w->g.r[R_RBP] == cfa - 16) {
        row.save[0] = -16;
        guessed_rbp = 1;
    }
    /* What a memo may replay (agent/memo.h): a step the slot alone decides,
     * within one stack, restoring at most rbp from CFA - 16. */
    int others = 0;
    for (int i = 1; i < FLAMME_CFI_NSAVED; i++)
        others |= row.save[i] != FLAMME_SAVE_SAME;
    int rbp16 = row.save[0] == -16, rbp_kept = row.save[0] == FLAMME_SAVE_SAME;
    w->step = FLAMME_STEP_OTHER;
    if (!leaf && !others && r >= 0 && r == from && window == w->window && cfa > sp &&
        (rbp16 || rbp_kept)) {
        if (row.cfa_reg == FLAMME_CFA_RSP)
            w->step = guessed_rbp || rbp_kept ? FLAMME_STEP_RSP : FLAMME_STEP_RSP_RBP;
        else if (row.cfa_reg == FLAMME_CFA_RBP && row.cfa_off == 16 && rbp16)
            w->step = FLAMME_STEP_RBP;
    }
    uint32_t valid = (w->g.valid & KEPT_MASK) | BIT(R_RSP);
    for (int i = 0; i < FLAMME_CFI_NSAVED; i++) {
        int reg = saved_dw[i];
        uintptr_t v;
        if (row.save[i] == FLAMME_SAVE_SAME)
            continue;
        if (row.save[i] != FLAMME_SAVE_LOST &&
            stack_word(w, cfa + (uintptr_t)(intptr_t)row.save[i], &v, NULL) == 0) {
            w->g.r[reg] = v;
            valid |= BIT(reg);
        } else {
            valid &= ~BIT(reg);
        }
    }
    w->g.r[R_RSP] = cfa;
    w->g.valid = valid;
    w->cur = r;
    if (r >= 0 && cfa > w->seen[r])
        w->seen[r] = cfa;
    w->ra_at = r >= 0 ? cfa - 8 : 0;
    *pc = ra;
    return 1;
}

/* The step out of a frame interrupted where the runtime's assembly takes
 * an exception out of an OCaml stack, whose rows do not hold there
 * (runtime_hooks/ocaml_rt.h): at the bottom of a fiber
 * (flamme_ocaml_fiber_bottom_sigsafe) and further on in caml_runstack
 * (flamme_ocaml_runstack_parent_sigsafe), to caml_runstack's caller on the
 * parent stack as caml_runstack's own rows would from the normal return;
 * in caml_start_program's handler and the code after it
 * (flamme_ocaml_callback_exit_sigsafe), on from its switch to the C
 * stack. *ra: a frame of caml_runstack to put first (0: none). Returns 1
 * with w moved and *pc the caller's return address, or 0 (w unchanged)
 * when the frame is not such a one or the caller's frame cannot be read. */
static int exception_exit_step(struct walk *w, uintptr_t *pc, uintptr_t *ra)
{
    uintptr_t sp = w->g.r[R_RSP], slot, caller;
    int mid, add, reg, rbp_at;
    int r = find_range(w->ranges, w->nranges, sp, 8, -1);
    struct flamme_cfi_row row = {.cfa_reg = FLAMME_CFA_DEREF_RSP, .dwreg = R_RSP};
    if (r >= w->first_ocaml && r < w->nranges &&
        flamme_ocaml_fiber_bottom_sigsafe(&w->ranges[r], sp, *pc, &slot, &mid, &add, &rbp_at,
                                          ra)) {
        row.cfa_off = (int32_t)(slot - sp);
        row.nderef = 2;
        row.mid_add = (uint8_t)mid;
        row.cfa_add = add;
    } else if (flamme_ocaml_runstack_parent_sigsafe(*pc, &reg, &mid, &add, &rbp_at)) {
        /* Further on, the parent is named current and the fiber is no
         * longer one of the known stacks: r10 holds the parent. */
        row.cfa_reg = FLAMME_CFA_DEREF_REG;
        row.dwreg = (uint8_t)reg;
        row.cfa_off = mid;
        row.nderef = 1;
        row.cfa_add = add;
        *ra = 0;
    } else if (flamme_ocaml_callback_exit_sigsafe(*pc, sp, w->g.r[10], !!(w->g.valid & BIT(10)),
                                                  &slot, &caller)) {
        /* caml_start_program going back to C: on from the pc right after
         * its switch to the C stack, with rsp what it switches to. */
        uintptr_t csp;
        int rc;
        if (stack_word(w, slot, &csp, NULL) != 0 ||
            (rc = find_range(w->ranges, w->nranges, csp, 8, -1)) < 0 || rc >= w->first_ocaml)
            return 0;
        struct walk before = *w;
        w->g.r[R_RSP] = csp;
        w->cur = rc;
        *ra = 0;
        uintptr_t resume = caller;
        if (cfi_step(w, resume, &caller, 0) <= 0 || caller < 4096) {
            *w = before;
            return 0;
        }
        *pc = caller;
        return 1;
    } else {
        return 0;
    }
    for (int i = 0; i < FLAMME_CFI_NSAVED; i++)
        row.save[i] = FLAMME_SAVE_SAME;
    if (rbp_at)
        row.save[0] = rbp_at;
    struct walk before = *w;
    w->cur = r;
    if (row_step(w, row, &caller, 0) <= 0 || caller < 4096) {
        *w = before;
        return 0;
    }
    *pc = caller;
    return 1;
}

/* Relaxed: written once, before any handler runs, with the one value a
 * process has (a later install writes it again); nothing else is ordered
 * by it. */
static _Atomic uintptr_t sigreturn_pc;

void flamme_walk_note_sigreturn(int sig)
{
    struct {
        void *handler;
        unsigned long flags;
        void *restorer;
        uint64_t mask;
    } k; /* the kernel's struct sigaction (x86-64) */
    static const unsigned char code[] = {0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05};
    if (syscall(SYS_rt_sigaction, sig, NULL, &k, sizeof k.mask) == 0 &&
        (k.flags & 0x04000000) /* SA_RESTORER */ && k.restorer &&
        memcmp(k.restorer, code, sizeof code) == 0)
        atomic_store_explicit(&sigreturn_pc, (uintptr_t)k.restorer, memory_order_relaxed);
}

uintptr_t flamme_walk_sigreturn(void)
{
    return atomic_load_explicit(&sigreturn_pc, memory_order_relaxed);
}

/* Bytes of the trampoline (the code above): mov $15,%rax; syscall. */
#define SIGRETURN_LEN 9

/* One step through the kernel's signal frame, from libc's trampoline (pc
 * at it, or inside it for the interrupted frame itself). The kernel pushed
 * the trampoline's address and then the interrupted context above it
 * (struct rt_sigframe: that return address, then a ucontext_t), so at the
 * trampoline rsp is the ucontext's address. Every register comes back from
 * its gregs; *pc becomes the interrupted instruction. Returns 1, or -1
 * when the frame cannot be read or would lead back down a stack. */
static int sigframe_step(struct walk *w, uintptr_t *pc)
{
    static const int8_t greg_of_dw[16] = FLAMME_GREG_OF_DW;
    uintptr_t uc = w->g.r[R_RSP];
    uintptr_t gregs = uc + offsetof(ucontext_t, uc_mcontext.gregs);
    struct flamme_walk_regs g;
    uintptr_t rip;
    int r;
    for (int i = 0; i < 16; i++)
        if (stack_word(w, gregs + 8 * (uintptr_t)greg_of_dw[i], &g.r[i], NULL) != 0)
            return -1;
    if (stack_word(w, gregs + 8 * (uintptr_t)REG_RIP, &rip, NULL) != 0 || rip < 4096)
        return -1;
    uintptr_t sp = g.r[R_RSP];
    /* The interrupted stack pointer is above the frame the kernel pushed
     * on the same stack (an alternate signal stack is another range). */
    r = find_range(w->ranges, w->nranges, sp, 8, -1);
    if (r >= 0 && r == find_range(w->ranges, w->nranges, uc, 8, -1) && sp <= uc)
        return -1;
    if (r >= 0 && r != w->cur && (sp <= w->seen[r] || ++w->switches > MAX_SWITCHES))
        return -1;
    if (r >= 0 && sp > w->seen[r])
        w->seen[r] = sp;
    g.valid = 0xffff;
    w->g = g;
    w->cur = r;
    w->ra_at = 0; /* from the kernel's frame, never replayed */
    w->step = FLAMME_STEP_OTHER;
    *pc = rip;
    return 1;
}

/* One step by frame pointer. Returns 1 and moves to the caller (*pc), 0
 * at a clean end (zero frame pointer or return address), -1 when broken. */
static int fp_step(struct walk *w, uintptr_t *pc)
{
    if (!(w->g.valid & BIT(R_RBP)))
        return -1;
    uintptr_t fp = w->g.r[R_RBP];
    if (fp == 0)
        return 0; /* clean end: clone/_start zero rbp */
    if (fp & 7)
        return -1;
    int window = w->window;
    int r = locate(w, fp, 16);
    uintptr_t next, ret;
    if (r >= 0) {
        next = ((const uintptr_t *)fp)[0];
        ret = ((const uintptr_t *)fp)[1];
    } else {
        /* Outside every known stack: go on only through a checked copy,
         * and only towards older frames within it. */
        int r1;
        if (stack_word(w, fp, &next, &r1) != 0 || stack_word(w, fp + 8, &ret, &r1) != 0)
            return -1;
        if (next != 0 && next <= fp && find_range(w->ranges, w->nranges, next, 16, -1) < 0)
            return -1;
    }
    if (ret == 0)
        return 0;
    *pc = ret;
    w->ra_at = r >= 0 ? fp + 8 : 0;
    /* Within one stack the chain must move towards older frames (higher
     * addresses); crossing to another stack (fiber -> parent, OCaml -> C)
     * may go either way, but only a bounded number of times. */
    if (r >= 0 && next != 0 && next <= fp &&
        find_range(w->ranges, w->nranges, next, 16, r) == r)
        return 2; /* this frame stands, the chain after it is broken */
    w->step = r >= 0 && r == w->cur && window == w->window ? FLAMME_STEP_FP : FLAMME_STEP_OTHER;
    if (r >= 0 && r != w->cur) {
        if (++w->switches > MAX_SWITCHES || fp + 16 <= w->seen[r])
            return 2;
        w->cur = r;
    }
    if (r >= 0 && fp + 16 > w->seen[r])
        w->seen[r] = fp + 16;
    w->g.r[R_RSP] = fp + 16;
    w->g.r[R_RBP] = next;
    w->g.valid = BIT(R_RSP) | BIT(R_RBP);
    return 1;
}

/* frames[n] = pc, where it was read and by which step into the trace (t
 * may be NULL). */
static inline void put_frame(struct flamme_walk_trace *t, uint64_t *frames, uint32_t *n,
                             uintptr_t pc, uintptr_t ra_at, uint8_t step)
{
    if (t && *n < t->cap) {
        t->ra_at[*n] = ra_at;
        if (t->step)
            t->step[*n] = step;
    }
    frames[(*n)++] = pc;
}

/* After the walk read frame *pc from slot w->ra_at: where the memo has that
 * frame in that slot, replays the memo's older frames into frames (up to
 * max) as long as their steps allow and their slots still hold them
 * (agent/memo.h), moving w and *pc along as the steps would. The walk goes
 * on from the last frame put, by its rows. */
static void replay_memo(struct walk *w, struct flamme_walk_trace *t, uint64_t *frames,
                        uint32_t *n, uint32_t max, uintptr_t *pc)
{
    const struct flamme_memo *m = t->memo;
    int r = w->cur;
    int32_t k = flamme_memo_find_sigsafe(m, &t->cursor, w->ra_at, *pc, w->ranges, r);
    if (k < 0)
        return;
    uintptr_t lo = w->ranges[r].lo, hi = w->ranges[r].hi;
    uint32_t j = (uint32_t)k, first = t->run_k < 0, at = *n - 1;
    for (; j > 0 && *n < max; j--) {
        uint8_t step = m->step[j - 1];
        uintptr_t s = m->slot[j - 1];
        if (step == FLAMME_STEP_OTHER || s <= m->slot[j] || s + 8 > hi || s - 8 < lo || (s & 7))
            break;
        /* rbp at the word under the slot: a frame-pointer step goes to the
         * memo's slot only then, and an rsp step restores rbp only then. */
        int own_rbp = (w->g.valid & BIT(R_RBP)) && w->g.r[R_RBP] == s - 8;
        if ((step == FLAMME_STEP_FP || step == FLAMME_STEP_RBP) && !own_rbp)
            break;
        if (*(const uintptr_t *)s != m->frame[j - 1])
            break;
        if (step == FLAMME_STEP_FP)
            w->g.valid = BIT(R_RSP) | BIT(R_RBP);
        else
            w->g.valid = (w->g.valid & KEPT_MASK) | BIT(R_RSP);
        if (step != FLAMME_STEP_RSP || own_rbp) {
            w->g.r[R_RBP] = *(const uintptr_t *)(s - 8);
            w->g.valid |= BIT(R_RBP);
        }
        w->g.r[R_RSP] = s + 8;
        w->ra_at = s;
        w->step = step;
        *pc = m->frame[j - 1];
        put_frame(t, frames, n, *pc, s, step);
        t->replayed++;
    }
    /* The walk is at memo[j] now: whatever it meets further is older, in
     * any stack. */
    for (int q = 0; q < FLAMME_MEMO_RANGES; q++)
        if (t->cursor.next[q] > j)
            t->cursor.next[q] = j;
    if (first) {
        t->run_k = k;
        t->run_at = at;
        t->run_len = (uint32_t)k - j;
    }
}

static uint32_t walk(struct walk *w, uintptr_t pc, uint64_t *frames, uint32_t max,
                     uint32_t *flags, int leaf, struct flamme_walk_trace *t)
{
    uint32_t n = 0;
    *flags = 0;
    if (max == 0)
        return 0;
    /* Frames walked by their rows at most (replayed ones are not counted). */
    uint32_t walk_max = t && t->max_walked ? t->max_walked : max;
    struct flamme_memo *memo = t && t->memo && t->memo->len ? t->memo : NULL;
    if (t) {
        t->replayed = 0;
        t->run_k = -1;
    }
    if (memo)
        flamme_memo_walk_start(memo, &t->cursor);
    put_frame(t, frames, &n, pc, 0, FLAMME_STEP_OTHER);
    uintptr_t sigret = flamme_walk_sigreturn();
    while (n < max && n - (t ? t->replayed : 0) < walk_max) {
        /* Returning into libc's signal trampoline (or interrupted in it):
         * the kernel's signal frame is above, and beyond it the code the
         * signal interrupted, its pc an instruction rather than a call's
         * return address. */
        if (sigret && pc - sigret < (leaf ? SIGRETURN_LEN : 1)) {
            if (sigframe_step(w, &pc) < 0)
                goto broken;
            /* Frames past the leaf are return addresses, named by the byte
             * before them (writer/intern.c): one past the instruction. */
            put_frame(t, frames, &n, pc + 1, 0, FLAMME_STEP_OTHER);
            leaf = 1;
            continue;
        }
        /* In OCaml code's inlined raise, past its move to the trap: on
         * from the handler it jumps to (its function's frame, or the
         * runtime's handler of a fiber or a callback), as if there. */
        uintptr_t trap, handler;
        if (leaf && w->first_ocaml < w->nranges &&
            flamme_ocaml_inline_raise_sigsafe(pc, w->g.r[R_RSP], &trap) &&
            stack_word(w, trap + 8, &handler, NULL) == 0 && handler >= 4096) {
            /* Named by the byte before, as a return address is. */
            put_frame(t, frames, &n, handler + 1, 0, FLAMME_STEP_OTHER);
            w->g.r[R_RSP] = trap + 16;
            w->g.valid &= ~BIT(11); /* r11 holds the handler's pc, not the caller's */
            pc = handler;
            continue;
        }
        /* Where an exception leaves a fiber or a callback's OCaml code,
         * the rows of the code in the way (the raise, the runtime's
         * handler for it) describe a stack pointer the thread no longer
         * has. */
        uintptr_t runstack_ra;
        if (leaf && exception_exit_step(w, &pc, &runstack_ra)) {
            if (runstack_ra) {
                put_frame(t, frames, &n, runstack_ra, 0, FLAMME_STEP_OTHER);
                if (n >= max)
                    break;
            }
            put_frame(t, frames, &n, pc, w->ra_at, FLAMME_STEP_OTHER);
            if (memo && w->ra_at && !w->window)
                replay_memo(w, t, frames, &n, max, &pc);
            leaf = 0;
            continue;
        }
        /* A return address points after its call: look up the call itself. */
        struct walk before;
        if (leaf)
            before = *w;
        uintptr_t at = pc;
        int c = cfi_step(w, leaf ? pc : pc - 1, &pc, leaf);
        if (leaf && (c < 0 || (c > 0 && (pc < 4096 ||
                                         find_range(w->ranges, w->nranges, pc, 1, -1) >= 0)))) {
            /* The interrupted function's rows fail, or lead to a "return
             * address" that is a stack address: the OCaml runtime's stack
             * switches in frame-pointer builds (caml_perform, caml_resume:
             * their rows do not follow the push and pop of rbp around the
             * switch). The leaf fix-up and rbp are the second chance. */
            *w = before;
            pc = at;
            c = 0;
        }
        if (c == -2)
            c = 0;
        if (c < 0)
            goto broken;
        if (c > 0) {
            if (pc == 0)
                return n; /* outermost frame (RA zero) */
            put_frame(t, frames, &n, pc, w->ra_at, leaf ? FLAMME_STEP_OTHER : w->step);
            /* caml_raise_exn's ret into caml_start_program's handler: the
             * thread goes to that instruction itself, whose frame is the
             * one exception_exit_step knows (named by the byte before, as
             * return addresses are: caml_start_program's own code). */
            if (leaf && flamme_ocaml_exn_entry_sigsafe(pc))
                continue;
            if (memo && w->ra_at && !w->window)
                replay_memo(w, t, frames, &n, max, &pc);
            leaf = 0;
            continue;
        }
        if (leaf) {
            /* Frame-pointer code interrupted where rbp does not describe the
             * current function yet (entry) or any more (just before ret). */
            int ok;
            uintptr_t slot = 0;
            uintptr_t caller = leaf_caller(pc, w->g.r[R_RSP], w->ranges, w->nranges, &ok, &slot);
            leaf = 0;
            if (ok && caller) {
                put_frame(t, frames, &n, caller, slot, FLAMME_STEP_OTHER);
                pc = caller;
                if (n >= max)
                    break;
                /* The caller's frame is known exactly (rsp just above the
                 * return address, callee-saved registers as they are): go
                 * on by its CFI when it has some (OCaml without frame
                 * pointers calling through a PLT entry), else by rbp. */
                w->g.r[R_RSP] = slot + 8;
                w->g.valid = (w->g.valid & KEPT_MASK) | BIT(R_RSP);
                w->cur = find_range(w->ranges, w->nranges, slot, 8, -1);
                continue;
            }
        }
        c = fp_step(w, &pc);
        if (c == 0)
            return n;
        if (c < 0)
            goto broken;
        put_frame(t, frames, &n, pc, w->ra_at, c == 2 ? FLAMME_STEP_OTHER : w->step);
        if (c == 2)
            goto broken;
        if (memo && w->ra_at && !w->window)
            replay_memo(w, t, frames, &n, max, &pc);
    }
    *flags |= FLAMME_SAMPLE_TRUNCATED;
    return n;
broken:
    *flags |= FLAMME_SAMPLE_BROKEN;
    return n;
}

uint32_t flamme_walk_traced_sigsafe(uintptr_t pc, const struct flamme_walk_regs *regs, int leaf,
                                    const struct flamme_range *ranges, int nranges,
                                    struct flamme_walk_copy *copy, uint64_t *frames, uint32_t max,
                                    uint32_t *flags, struct flamme_walk_trace *trace)
{
    if (nranges > MAX_RANGES)
        nranges = MAX_RANGES; /* (the handler gives at most as many) */
    struct walk w = {.g = *regs, .ranges = ranges, .nranges = nranges, .copy = copy, .cur = -1,
                     .step = FLAMME_STEP_OTHER};
    /* (w.more is set only with a copy: more_ranges reads w->copy->chain.)
     * Without a copy no range is taken for an OCaml stack's. */
    w.first_ocaml = copy && copy->chain ? copy->first_ocaml : nranges;
    if (copy && copy->more && nranges <= MAX_RANGES) {
        w.more = copy->more;
        w.more_direct = copy->more_direct;
    }
    if (!(w.g.valid & BIT(R_RSP))) {
        *flags = FLAMME_SAMPLE_BROKEN;
        if (max == 0)
            return 0;
        uint32_t n = 0;
        if (trace) {
            trace->replayed = 0;
            trace->run_k = -1;
        }
        put_frame(trace, frames, &n, pc, 0, FLAMME_STEP_OTHER);
        return n;
    }
    return walk(&w, pc, frames, max, flags, leaf, trace);
}

uint32_t flamme_walk_regs_sigsafe(uintptr_t pc, const struct flamme_walk_regs *regs, int leaf,
                                  const struct flamme_range *ranges, int nranges,
                                  struct flamme_walk_copy *copy, uint64_t *frames, uint32_t max,
                                  uint32_t *flags)
{
    return flamme_walk_traced_sigsafe(pc, regs, leaf, ranges, nranges, copy, frames, max, flags,
                                      NULL);
}

uint32_t flamme_walk_sigsafe(uintptr_t pc, uintptr_t sp, uintptr_t fp,
                             const struct flamme_range *ranges, int nranges,
                             struct flamme_walk_copy *copy, uint64_t *frames, uint32_t max,
                             uint32_t *flags)
{
    struct flamme_walk_regs g = {{0}, BIT(R_RSP) | BIT(R_RBP)};
    g.r[R_RSP] = sp;
    g.r[R_RBP] = fp;
    return flamme_walk_regs_sigsafe(pc, &g, 1, ranges, nranges, copy, frames, max, flags);
}
