/*
 * writer/cfi_synth.c — unwind rows derived from the code of functions that
 * have no FDE (see writer/cfi_synth.h).
 *
 * Owns: the x86-64 subset decoder and the walk over a function's paths.
 * Called by writer/cfi_build.c while it builds a module's rows (writer
 * thread or agent start-up, under its build lock); allocates; never a
 * signal handler.
 *
 * The subset is what compilers and hand-written stubs put in small
 * functions: moves, arithmetic, compares and tests, lea, shifts, pushes and
 * pops, calls, jumps and conditional jumps, ret, leave, a few SSE moves,
 * endbr64 and nops, with their prefixes (REX, operand size, segment,
 * lock, rep). Each instruction's length is decoded exactly (ModRM, SIB,
 * displacement, immediate). What is tracked: rsp's distance from the CFA,
 * rbp as a frame pointer (mov %rsp,%rbp; leave), and where rbp, rbx and
 * r12-r15 were pushed. A write to one of those registers that was not
 * saved first, a write to rsp other than add/sub of a constant, leave and
 * lea from a known frame pointer, an instruction outside the subset, a
 * ret or tail jump with anything left on the stack, or two paths meeting
 * with different states: the function gets no rows.
 */
#include "writer/cfi_synth.h"

#include <elf.h>
#include <stdlib.h>
#include <string.h>

#define SYNTH_MAX_CODE 16384   /* longer functions are left alone */
#define SYNTH_MAX_RSP (1 << 16) /* a frame larger than this is not believed */
#define SYNTH_PATHS 512        /* pending branch targets at most */

/* What is known at an instruction, before it runs. */
struct st {
    int32_t rsp_off;   /* CFA - rsp */
    int32_t frame_off; /* CFA - rbp when rbp is a frame pointer, else 0 */
    int8_t save[FLAMME_CFI_NSAVED]; /* FLAMME_CFI_SAVED_DWREGS order: 0, or slot at CFA + 8 * save */
    int16_t pad;       /* always 0: states are compared whole */
};

enum { NEXT, CALL, STOP, LEAVES, JUMP, BRANCH };

/* Index among the tracked callee-saved registers (FLAMME_CFI_SAVED_DWREGS:
 * rbp rbx r12-r15) of the x86 register r (encoding 0-15), or -1. */
static int saved_of(int r)
{
    switch (r) {
    case 5: return 0;
    case 3: return 1;
    case 12: case 13: case 14: case 15: return r - 10;
    default: return -1;
    }
}

/* The instruction wrote register r (-1: none). rsp is never written
 * unnoticed; a callee-saved register only after it was pushed (a caller's
 * value the walk would need is gone otherwise). Returns 0, or -1. */
static int wrote(struct st *s, int r)
{
    if (r < 0)
        return 0;
    if (r == 4)
        return -1;
    int i = saved_of(r);
    if (i >= 0 && s->save[i] == 0)
        return -1;
    if (r == 5)
        s->frame_off = 0;
    return 0;
}

static int push(struct st *s, int r)
{
    s->rsp_off += 8;
    if (s->rsp_off > SYNTH_MAX_RSP)
        return -1;
    int i = saved_of(r);
    if (i >= 0 && s->save[i] == 0) {
        if (s->rsp_off > 127 * 8)
            return -1;
        s->save[i] = (int8_t)(-s->rsp_off / 8);
    }
    return 0;
}

static int pop(struct st *s, int r)
{
    if (r == 4 || s->rsp_off < 16)
        return -1;
    int i = saved_of(r);
    if (i >= 0) {
        if (s->rsp_off % 8 != 0 || s->save[i] != -s->rsp_off / 8)
            return -1; /* not the value it saved: the caller's is lost */
        s->save[i] = 0;
        if (r == 5)
            s->frame_off = 0;
    }
    s->rsp_off -= 8;
    return 0;
}

/* rsp += delta (a constant). */
static int move_rsp(struct st *s, int64_t delta)
{
    int64_t o = (int64_t)s->rsp_off - delta;
    if (o < 8 || o > SYNTH_MAX_RSP)
        return -1;
    s->rsp_off = (int32_t)o;
    return 0;
}

/* Nothing left on the stack but the return address, every register as
 * the caller left it: a ret or a tail call may leave from here. */
static int clean(const struct st *s)
{
    static const int8_t none[FLAMME_CFI_NSAVED];
    return s->rsp_off == 8 && memcmp(s->save, none, sizeof none) == 0;
}

static int64_t sx(const uint8_t *p, int n)
{
    switch (n) {
    case 1: return (int8_t)p[0];
    case 2: return (int16_t)(p[0] | p[1] << 8);
    default: return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                              (uint32_t)p[3] << 24);
    }
}

/* A decoded ModRM operand: mod, reg and rm fields (REX bits added), the
 * displacement of a base+disp form without SIB, and the offset after it. */
struct modrm {
    int mod, reg, rm; /* rm: the register when mod == 3, else its base field */
    int64_t disp;
    int sib;
    size_t end;
};

static int read_modrm(const uint8_t *c, size_t avail, size_t at, int rex, struct modrm *m)
{
    if (at >= avail)
        return -1;
    uint8_t b = c[at++];
    m->mod = b >> 6;
    m->reg = ((b >> 3) & 7) | (rex & 4 ? 8 : 0);
    m->rm = (b & 7) | (rex & 1 ? 8 : 0);
    m->sib = 0;
    m->disp = 0;
    if (m->mod != 3 && (b & 7) == 4) {
        if (at >= avail)
            return -1;
        m->sib = 1;
        if (m->mod == 0 && (c[at] & 7) == 5)
            at += 4;
        at++;
    } else if (m->mod == 0 && (b & 7) == 5) {
        at += 4; /* rip-relative */
    }
    size_t dn = m->mod == 1 ? 1 : m->mod == 2 ? 4 : 0;
    if (at + dn > avail)
        return -1;
    if (dn)
        m->disp = sx(c + at, (int)dn);
    m->end = at + dn;
    return 0;
}

/* Decodes the instruction at c (avail bytes readable) and applies it to
 * *s. Sets *len, *flow and, for jumps, *rel (the target's distance from
 * the instruction's end). Returns 0, or -1 when the instruction is outside
 * the subset or breaks what is tracked. */
static int step(const uint8_t *c, size_t avail, struct st *s, size_t *len, int *flow,
                int64_t *rel)
{
    size_t i = 0;
    int opsize = 0, rep = 0, rex = 0;
    for (;; i++) {
        if (i >= avail || i >= 4)
            return -1;
        uint8_t b = c[i];
        if (b == 0x66)
            opsize = 1;
        else if (b == 0xf2 || b == 0xf3)
            rep = b;
        else if (b != 0x2e && b != 0x3e && b != 0x64 && b != 0x65 && b != 0xf0)
            break;
    }
    if ((c[i] & 0xf0) == 0x40) {
        rex = c[i++];
        if (i >= avail)
            return -1;
    }
    int w = rex & 8, b3 = rex & 1 ? 8 : 0, immz = opsize ? 2 : 4;
    uint8_t op = c[i++];
    struct modrm m;
    size_t imm = 0;
    int wr = -1, wr2 = -1;
#define MODRM() do { if (read_modrm(c, avail, i, rex, &m) != 0) return -1; i = m.end; } while (0)
#define RMREG (m.mod == 3 ? m.rm : -1)
    *flow = NEXT;
    *rel = 0;
    if (op < 0x40 && (op & 7) < 6) {
        /* add or adc sbb and sub xor cmp: r/m,reg / reg,r/m / al|eax,imm */
        int k = op & 7, cmp = (op >> 3) == 7;
        if (k < 4) {
            MODRM();
            if (!cmp)
                wr = k < 2 ? RMREG : m.reg;
        } else {
            imm = k == 4 ? 1 : (size_t)immz;
        }
    } else if (op >= 0x50 && op <= 0x57) {
        if (opsize || push(s, (op & 7) | b3) != 0)
            return -1;
    } else if (op >= 0x58 && op <= 0x5f) {
        if (opsize || pop(s, (op & 7) | b3) != 0)
            return -1;
    } else if (op == 0x63) {
        MODRM();
        wr = m.reg;
    } else if (op == 0x68 || op == 0x6a) {
        imm = op == 0x68 ? 4 : 1;
        if (opsize || push(s, -1) != 0)
            return -1;
    } else if (op == 0x69 || op == 0x6b) {
        MODRM();
        imm = op == 0x69 ? (size_t)immz : 1;
        wr = m.reg;
    } else if (op >= 0x70 && op <= 0x7f) {
        imm = 1;
        *flow = BRANCH;
    } else if (op == 0x80 || op == 0x81 || op == 0x83) {
        MODRM();
        imm = op == 0x81 ? (size_t)immz : 1;
        int sub = (m.reg & 7) == 5, add = (m.reg & 7) == 0;
        if (m.mod == 3 && m.rm == 4) {
            if (!w || (!sub && !add) || i + imm > avail)
                return -1;
            int64_t v = sx(c + i, (int)imm);
            if (move_rsp(s, sub ? -v : v) != 0)
                return -1;
        } else if ((m.reg & 7) != 7) {
            wr = RMREG;
        }
    } else if (op == 0x84 || op == 0x85) {
        MODRM();
    } else if (op == 0x86 || op == 0x87) {
        MODRM();
        wr = m.reg;
        wr2 = RMREG;
    } else if (op == 0x88 || op == 0x89 || op == 0x8a || op == 0x8b) {
        MODRM();
        int dst = op <= 0x89 ? RMREG : m.reg, src = op <= 0x89 ? m.reg : RMREG;
        if (op & 1 && w && dst == 5 && src == 4) { /* mov %rsp,%rbp */
            if (s->save[0] == 0)
                return -1;
            s->frame_off = s->rsp_off;
        } else if (op & 1 && w && dst == 4 && src == 5) { /* mov %rbp,%rsp */
            if (s->frame_off == 0)
                return -1;
            s->rsp_off = s->frame_off;
        } else {
            wr = dst;
        }
    } else if (op == 0x8d) {
        MODRM();
        if (m.mod == 3)
            return -1;
        if (m.reg == 4) { /* lea disp(%rbp),%rsp: an epilogue */
            if (!w || m.sib || m.rm != 5 || m.mod == 0 || s->frame_off == 0)
                return -1;
            int64_t o = (int64_t)s->frame_off - m.disp;
            if (o < 8 || o > SYNTH_MAX_RSP)
                return -1;
            s->rsp_off = (int32_t)o;
        } else {
            wr = m.reg;
        }
    } else if (op == 0x90) {
        if (b3)
            wr = 8; /* xchg %r8,%rax */
    } else if (op >= 0x91 && op <= 0x97) {
        wr = (op & 7) | b3;
    } else if (op == 0x98 || op == 0x99) {
    } else if (op == 0xa8 || op == 0xa9) {
        imm = op == 0xa8 ? 1 : (size_t)immz;
    } else if (op >= 0xb0 && op <= 0xb7) {
        imm = 1;
        wr = (op & 7) | b3;
    } else if (op >= 0xb8 && op <= 0xbf) {
        imm = w ? 8 : (size_t)immz;
        wr = (op & 7) | b3;
    } else if (op == 0xc0 || op == 0xc1 || (op >= 0xd0 && op <= 0xd3)) {
        MODRM();
        imm = op <= 0xc1 ? 1 : 0;
        wr = RMREG;
    } else if (op == 0xc3) {
        *flow = LEAVES;
    } else if (op == 0xc6 || op == 0xc7) {
        MODRM();
        imm = op == 0xc6 ? 1 : (size_t)immz;
        wr = RMREG;
    } else if (op == 0xc9) { /* leave: mov %rbp,%rsp; pop %rbp */
        if (s->frame_off == 0)
            return -1;
        s->rsp_off = s->frame_off;
        if (pop(s, 5) != 0)
            return -1;
    } else if (op == 0xcc || op == 0xf4) {
        *flow = STOP; /* int3, hlt: never returns to what follows */
    } else if (op == 0xe8) {
        imm = 4;
        *flow = CALL;
    } else if (op == 0xe9 || op == 0xeb) {
        imm = op == 0xe9 ? 4 : 1;
        *flow = JUMP;
    } else if (op == 0xf6 || op == 0xf7) {
        MODRM();
        int r = m.reg & 7;
        if (r < 2)
            imm = op == 0xf6 ? 1 : (size_t)immz; /* test */
        else if (r < 4)
            wr = RMREG; /* not, neg; mul/div write rax and rdx */
    } else if (op == 0xfe || op == 0xff) {
        MODRM();
        int r = m.reg & 7;
        if (r < 2)
            wr = RMREG;
        else if (op == 0xff && r == 2)
            *flow = CALL;
        else if (op == 0xff && r == 4)
            *flow = LEAVES; /* an indirect jump: a tail call (or a table: not followed) */
        else if (op == 0xff && r == 6) {
            if (opsize || push(s, RMREG) != 0)
                return -1;
        } else
            return -1;
    } else if (op == 0x0f) {
        if (i >= avail)
            return -1;
        uint8_t o2 = c[i++];
        if (o2 == 0x05 || o2 == 0x31 || o2 == 0xa2) {
            /* syscall, rdtsc, cpuid: rax, rcx, rdx, r11 and rbx (cpuid) */
            if (o2 == 0xa2 && wrote(s, 3) != 0)
                return -1;
        } else if (o2 == 0x0b) {
            *flow = STOP; /* ud2 */
        } else if (o2 == 0x1e) {
            MODRM(); /* endbr64 (f3 0f 1e fa), not rdssp */
            if (rep != 0xf3 || m.mod != 3 || (m.rm & 7) < 2 || (m.rm & 7) > 3 || (m.reg & 7) != 7)
                return -1;
        } else if (o2 == 0x0d || o2 == 0x18 || o2 == 0x1f) {
            MODRM(); /* prefetch, nop */
        } else if (o2 == 0x10 || o2 == 0x11 || o2 == 0x28 || o2 == 0x29 || o2 == 0x2e ||
                   o2 == 0x2f || (o2 >= 0x54 && o2 <= 0x5f) || o2 == 0x6e || o2 == 0x6f ||
                   o2 == 0x7f || o2 == 0xd6 || o2 == 0xef) {
            MODRM(); /* SSE moves and arithmetic: xmm registers or memory */
        } else if (o2 == 0x7e) {
            MODRM();
            if (rep != 0xf3)
                wr = RMREG; /* movd/movq xmm to a general register */
        } else if (o2 == 0x2c || o2 == 0x2d || (o2 >= 0x40 && o2 <= 0x4f) || o2 == 0xaf ||
                   o2 == 0xb6 || o2 == 0xb7 || o2 == 0xbe || o2 == 0xbf || o2 == 0xbc ||
                   o2 == 0xbd || (o2 == 0xb8 && rep == 0xf3)) {
            MODRM(); /* cvt to integer, cmov, imul, movzx/sx, bsf/bsr, popcnt */
            wr = m.reg;
        } else if (o2 >= 0x80 && o2 <= 0x8f) {
            imm = 4;
            *flow = BRANCH;
        } else if (o2 >= 0x90 && o2 <= 0x9f) {
            MODRM();
            wr = RMREG;
        } else if (o2 == 0xa3 || o2 == 0xab || o2 == 0xb3 || o2 == 0xbb || o2 == 0xa5 ||
                   o2 == 0xad) {
            MODRM(); /* bt, bts/btr/btc, shld/shrd by cl */
            wr = o2 == 0xa3 ? -1 : RMREG;
        } else if (o2 == 0xa4 || o2 == 0xac || o2 == 0xba) {
            MODRM();
            imm = 1;
            wr = o2 == 0xba && (m.reg & 7) == 4 ? -1 : RMREG;
        } else if (o2 == 0xb0 || o2 == 0xb1 || o2 == 0xc0 || o2 == 0xc1) {
            MODRM(); /* cmpxchg, xadd */
            wr = RMREG;
            wr2 = o2 >= 0xc0 ? m.reg : -1;
        } else if (o2 >= 0xc8 && o2 <= 0xcf) {
            wr = (o2 & 7) | b3; /* bswap */
        } else if (o2 == 0x38) {
            if (i >= avail || (c[i] != 0xf0 && c[i] != 0xf1))
                return -1;
            i++;
            MODRM(); /* crc32, movbe */
            wr = m.reg;
        } else {
            return -1;
        }
    } else {
        return -1;
    }
#undef MODRM
#undef RMREG
    if (i + imm > avail)
        return -1;
    if (*flow == BRANCH || *flow == JUMP)
        *rel = sx(c + i, (int)imm); /* a call's target is another function's business */
    *len = i + imm;
    return wrote(s, wr) != 0 || wrote(s, wr2) != 0 ? -1 : 0;
}

struct path {
    size_t off;
    struct st s;
};

long flamme_cfi_synth_function(const uint8_t *code, size_t len, uint64_t entry,
                               flamme_synth_emit_fn emit, void *ctx)
{
    if (len == 0 || len > SYNTH_MAX_CODE)
        return 0;
    struct st *at = malloc(len * sizeof *at);
    uint8_t *mark = calloc(len, 1); /* 0 not reached, 1 an instruction's start, 2 inside one */
    struct path *todo = malloc(SYNTH_PATHS * sizeof *todo);
    if (!at || !mark || !todo) {
        free(at);
        free(mark);
        free(todo);
        return -1;
    }
    int ok = 1, ntodo = 0;
    todo[ntodo++] = (struct path){ 0, { 8, 0, { 0 }, 0 } };
    while (ok && ntodo) {
        struct path p = todo[--ntodo];
        for (;;) {
            if (p.off >= len) {
                ok = 0; /* runs off the function's end */
                break;
            }
            if (mark[p.off] == 1) {
                ok = memcmp(&at[p.off], &p.s, sizeof p.s) == 0;
                break;
            }
            struct st before = p.s;
            size_t n;
            int flow;
            int64_t rel;
            if (mark[p.off] == 2 || step(code + p.off, len - p.off, &p.s, &n, &flow, &rel) != 0) {
                ok = 0;
                break;
            }
            for (size_t k = 1; k < n && ok; k++)
                ok = mark[p.off + k] == 0; /* one decoding of each byte */
            if (!ok)
                break;
            at[p.off] = before;
            mark[p.off] = 1;
            memset(mark + p.off + 1, 2, n - 1);
            size_t next = p.off + n;
            int64_t target = (int64_t)next + rel;
            int inside = target >= 0 && (uint64_t)target < len;
            if (flow == STOP)
                break;
            if (flow == LEAVES || ((flow == JUMP || flow == BRANCH) && !inside)) {
                /* ret or a tail call: nothing of this frame may be left */
                if (!clean(&p.s)) {
                    ok = 0;
                    break;
                }
                if (flow != BRANCH)
                    break;
            } else if (flow == JUMP) {
                p.off = (size_t)target;
                continue;
            } else if (flow == BRANCH) {
                if (ntodo == SYNTH_PATHS) {
                    ok = 0;
                    break;
                }
                todo[ntodo++] = (struct path){ (size_t)target, p.s };
            } else if (flow == CALL && next >= len) {
                break; /* a call that does not return (abort, __stack_chk_fail) ends it */
            }
            p.off = next;
        }
    }
    long rows = 0;
    if (ok) {
        /* A row where the state changes; bytes never reached (padding) and
         * the end have none. */
        struct flamme_synth_row last = { 0, -1, { 0 } };
        size_t end = len;
        while (end > 0 && mark[end - 1] == 0)
            end--;
        for (size_t o = 0; o <= end && rows >= 0; o++) {
            if (o < end && mark[o] == 2)
                continue;
            struct flamme_synth_row r = { entry + o, 0, { 0 } };
            if (o < end && mark[o] == 1) {
                r.rsp_off = at[o].rsp_off;
                memcpy(r.save, at[o].save, sizeof r.save);
            }
            if (r.rsp_off == last.rsp_off && memcmp(r.save, last.save, sizeof r.save) == 0)
                continue;
            last = r;
            rows = emit(ctx, &r) == 0 ? rows + 1 : -1;
        }
    }
    free(at);
    free(mark);
    free(todo);
    return rows;
}

/* ------------------------------------------------------------ symbols */

struct cand {
    uint64_t value, size;
    uint32_t shndx;
};

static int cand_cmp(const void *a, const void *b)
{
    const struct cand *x = a, *y = b;
    return x->value < y->value ? -1 : x->value > y->value;
}

/* Where the spans are, page by page: first[p] is the first span that
 * starts at or after page p of [lo, hi). A binary search per symbol over
 * the OCaml compiler's 20,000 spans, for its 40,000 function symbols (in
 * no particular order), cost 2 ms of cache misses. */
struct span_index {
    const uint64_t (*spans)[2];
    size_t n;
    uint64_t lo;
    uint32_t *first;
};

static int span_index_make(struct span_index *x, const uint64_t (*spans)[2], size_t n,
                           uint64_t lo, uint64_t hi)
{
    size_t pages = (size_t)((hi - lo + 4095) >> 12), j = 0;
    x->spans = spans;
    x->n = n;
    x->lo = lo;
    if (n > UINT32_MAX || !(x->first = malloc((pages + 1) * sizeof *x->first)))
        return -1;
    for (size_t p = 0; p <= pages; p++) {
        while (j < n && spans[j][0] < lo + ((uint64_t)p << 12))
            j++;
        x->first[p] = (uint32_t)j;
    }
    return 0;
}

/* Index of the first span starting after v (n when none); v in [lo, hi). */
static size_t span_after(const struct span_index *x, uint64_t v)
{
    size_t i = x->first[(v - x->lo) >> 12];
    while (i < x->n && x->spans[i][0] <= v)
        i++;
    return i;
}

/* What collect_cand gathers: the candidate functions of a module. */
struct cands {
    const struct flamme_elf *el;
    const struct span_index *idx;
    const uint64_t (*spans)[2];
    uint64_t lo, hi;
    struct cand *v;
    size_t n, cap;
};

/* flamme_elf_each_symbol's fn: keeps a function symbol in [lo, hi) of an
 * executable section that no FDE covers. Returns 0, or -1 when out of
 * memory. */
static int collect_cand(void *p, const Elf64_Sym *y)
{
    struct cands *c = p;
    const struct flamme_elf *el = c->el;
    uint64_t v = y->st_value;
    if (ELF64_ST_TYPE(y->st_info) != STT_FUNC || y->st_shndx == SHN_UNDEF ||
        y->st_shndx >= el->shnum || v < c->lo || v >= c->hi ||
        !(el->sh[y->st_shndx].sh_flags & SHF_EXECINSTR) ||
        el->sh[y->st_shndx].sh_type != SHT_PROGBITS)
        return 0;
    size_t s = span_after(c->idx, v);
    if (s > 0 && v < c->spans[s - 1][1])
        return 0; /* an FDE covers it */
    if (c->n == c->cap) {
        size_t nc = c->cap ? c->cap * 2 : 64;
        struct cand *nv = realloc(c->v, nc * sizeof *nv);
        if (!nv)
            return -1;
        c->v = nv;
        c->cap = nc;
    }
    c->v[c->n++] = (struct cand){ v, y->st_size, y->st_shndx };
    return 0;
}

/* Adds v, an entry point named by something other than a symbol, as a
 * candidate (collect_cand's checks; its size unknown) when an executable
 * section holds it. Returns 0, or -1 when out of memory. */
static int add_entry(struct cands *c, uint64_t v)
{
    const struct flamme_elf *el = c->el;
    for (size_t i = 0; i < el->shnum; i++) {
        const Elf64_Shdr *sh = &el->sh[i];
        if (sh->sh_type == SHT_PROGBITS && (sh->sh_flags & SHF_EXECINSTR) && v >= sh->sh_addr &&
            v - sh->sh_addr < sh->sh_size) {
            Elf64_Sym y = { 0 };
            y.st_info = ELF64_ST_INFO(STB_LOCAL, STT_FUNC);
            y.st_shndx = (uint16_t)i;
            y.st_value = v;
            return collect_cand(c, &y);
        }
    }
    return 0;
}

#define ENTRY_ARRAY_MAX 64 /* words of an .init_array or .fini_array read */

/* The entry points a stripped library still names: the functions in its
 * .init_array and .fini_array (gcc's frame_dummy and __do_global_dtors_aux,
 * which the loader runs, _dl_fini at exit), and its .init and .fini
 * sections (_init, _fini). None has an FDE, and without .symtab no symbol
 * names them: a sample there at exit was [broken] (libz's
 * __do_global_dtors_aux in a program run under flamme), or skipped its
 * caller. The arrays hold the addresses in the file too (x86-64 RELATIVE
 * relocations write their addend there). Returns 0, or -1 when out of
 * memory. */
static int add_entries(struct cands *c)
{
    const struct flamme_elf *el = c->el;
    for (size_t i = 0; i < el->shnum; i++) {
        const Elf64_Shdr *sh = &el->sh[i];
        if (sh->sh_type == SHT_INIT_ARRAY || sh->sh_type == SHT_FINI_ARRAY) {
            uint64_t w[ENTRY_ARRAY_MAX];
            size_t n = sh->sh_size / 8 < ENTRY_ARRAY_MAX ? (size_t)(sh->sh_size / 8)
                                                         : ENTRY_ARRAY_MAX;
            if (n == 0 || flamme_elf_read(el, sh->sh_offset, w, n * 8) != 0)
                continue;
            for (size_t k = 0; k < n; k++)
                if (add_entry(c, w[k]) != 0)
                    return -1;
        } else if (sh->sh_type == SHT_PROGBITS && (sh->sh_flags & SHF_EXECINSTR)) {
            const char *name = flamme_elf_section_name(el, sh);
            if ((!strcmp(name, ".init") || !strcmp(name, ".fini")) && add_entry(c, sh->sh_addr) != 0)
                return -1;
        }
    }
    return 0;
}

long flamme_cfi_synth_module(const struct flamme_elf *el, const uint64_t (*spans)[2],
                             size_t nspans, uint64_t lo, uint64_t hi, flamme_synth_emit_fn emit,
                             void *ctx)
{
    const Elf64_Shdr *tab = flamme_elf_symtab(el, SHT_SYMTAB);
    if (!tab)
        tab = flamme_elf_symtab(el, SHT_DYNSYM);
    struct span_index idx;
    if (hi <= lo || span_index_make(&idx, spans, nspans, lo, hi) != 0)
        return hi <= lo ? 0 : -1;
    struct cands c = { el, &idx, spans, lo, hi, NULL, 0, 0 };
    long rc = (tab && flamme_elf_each_symbol(el, tab, collect_cand, &c) != 0) ||
                      add_entries(&c) != 0
                  ? -1
                  : 0;
    struct cand *cand = c.v;
    size_t ncand = c.n;
    if (ncand > 1)
        qsort(cand, ncand, sizeof *cand, cand_cmp);
    uint8_t *code = rc == 0 && ncand ? malloc(SYNTH_MAX_CODE) : NULL;
    if (ncand && !code)
        rc = -1;
    for (size_t k = 0; k < ncand && rc >= 0; k++) {
        const struct cand *f = &cand[k];
        if (k > 0 && cand[k - 1].value == f->value)
            continue; /* an alias */
        const Elf64_Shdr *sec = &el->sh[f->shndx];
        uint64_t end = sec->sh_addr + sec->sh_size;
        size_t s = span_after(&idx, f->value);
        if (s < nspans && spans[s][0] < end)
            end = spans[s][0];
        size_t next = k + 1; /* the next function, past aliases of this one */
        while (next < ncand && cand[next].value == f->value)
            next++;
        if (next < ncand && cand[next].value < end)
            end = cand[next].value;
        if (f->size && f->value + f->size < end)
            end = f->value + f->size;
        if (end > hi)
            end = hi;
        if (f->value < sec->sh_addr || end <= f->value || end - f->value > SYNTH_MAX_CODE)
            continue;
        size_t len = (size_t)(end - f->value);
        if (flamme_elf_read(el, sec->sh_offset + (f->value - sec->sh_addr), code, len) != 0)
            continue;
        long got = flamme_cfi_synth_function(code, len, f->value, emit, ctx);
        rc = got < 0 ? -1 : rc + got;
    }
    free(code);
    free(cand);
    free(idx.first);
    return rc;
}
