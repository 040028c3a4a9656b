/*
 * agent/handler.c — SIGPROF handler: one sample of the interrupted thread's
 * stack into its ring. Runs in signal context on the sampled thread only:
 * no malloc, no locks, no stdio; atomics are lock-free.
 */
#include "agent/handler.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <ucontext.h>

#include "agent/agent.h"
#include "agent/cfi.h"
#include "agent/engine.h"
#include "agent/threads.h"
#include "common/profile.h"
#include "runtime_hooks/gc_hooks.h"
#include "writer/ring.h"
#include "writer/writer.h"

#define MAX_RANGES 16

static struct sigaction prev_action;

/* Handler cost histogram: bucket i counts samples that took [i*20, i*20+20)
 * ns, the last bucket everything slower. Relaxed increments: statistics
 * only, read after sampling stopped. */
#define COST_BUCKET_NS 20
#define COST_BUCKETS 1024
static _Atomic uint64_t cost_hist[COST_BUCKETS];

void flamme_handler_cost(uint64_t *p50, uint64_t *p99, uint64_t *n)
{
    uint64_t total = 0;
    for (int i = 0; i < COST_BUCKETS; i++)
        total += atomic_load_explicit(&cost_hist[i], memory_order_relaxed);
    *n = total;
    *p50 = *p99 = 0;
    uint64_t acc = 0;
    int got50 = 0;
    for (int i = 0; i < COST_BUCKETS && total; i++) {
        acc += atomic_load_explicit(&cost_hist[i], memory_order_relaxed);
        if (!got50 && acc * 2 >= total) {
            *p50 = (uint64_t)i * COST_BUCKET_NS + COST_BUCKET_NS / 2;
            got50 = 1;
        }
        if (acc * 100 >= total * 99) {
            *p99 = (uint64_t)i * COST_BUCKET_NS + COST_BUCKET_NS / 2;
            break;
        }
    }
}

void flamme_handler_cost_reset(void)
{
    for (int i = 0; i < COST_BUCKETS; i++)
        atomic_store_explicit(&cost_hist[i], 0, memory_order_relaxed);
}

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

/* When the sampled pc sits at a point where rbp does not yet (or no longer)
 * describe the current function's frame, returns the caller's return address
 * read from the stack pointer and sets *ok; otherwise *ok = 0. Recognises
 * OCaml's (and gcc's) frame-pointer code: the stack-overflow check before
 * the prologue, push %rbp, mov %rsp,%rbp, and ret or a tail-call jmp right
 * after pop %rbp; and PLT entries (jmp through the GOT, endbr64). Reads the code bytes around pc, which are mapped since the
 * thread was executing them (backwards only within pc's page). */
static uintptr_t leaf_caller(uintptr_t pc, uintptr_t sp, const struct flamme_range *r, int n,
                             int *ok)
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
    return *(const uintptr_t *)slot;
}

/* One step of the walk by call-frame information: code without frame
 * pointers (glibc, C libraries) says where its caller's return address and
 * rbp are relative to rsp or rbp. Returns 1 and updates the registers, 0
 * when pc has no usable rule (then frame pointers are used), -1 when the
 * rule points outside the known stacks. */
static int cfi_step(uintptr_t lookup_pc, uintptr_t *pc, uintptr_t *sp, uintptr_t *fp,
                    const struct flamme_range *ranges, int nranges)
{
    struct flamme_cfi_row row;
    if (!flamme_cfi_lookup_sigsafe(lookup_pc, &row) || row.cfa_reg == FLAMME_CFA_UNKNOWN)
        return 0;
    uintptr_t cfa;
    if (row.cfa_reg == FLAMME_CFA_DEREF_RSP || row.cfa_reg == FLAMME_CFA_DEREF_RBP) {
        /* The runtime's stack switches keep the other stack's pointer in
         * memory: a c_stack_link, a fiber's handler, a stack_info's saved sp.
         * Words outside the known stacks are read with a checked copy. */
        uintptr_t at = (row.cfa_reg == FLAMME_CFA_DEREF_RSP ? *sp : *fp) + (intptr_t)row.cfa_off;
        uintptr_t v;
        if (find_range(ranges, nranges, at, 8, -1) >= 0)
            v = *(const uintptr_t *)at;
        else if (flamme_safe_read_sigsafe(&v, at, sizeof v) != 0) /* e.g. a fiber's handler */
            return -1;
        if (row.nderef == 2 && flamme_safe_read_sigsafe(&v, v + row.mid_add, sizeof v) != 0)
            return -1;
        cfa = v + (uintptr_t)row.cfa_add;
        if (find_range(ranges, nranges, cfa - 8, 8, -1) < 0)
            return -1;
        *pc = *(const uintptr_t *)(cfa - 8);
        *sp = cfa;
        return 1;
    }
    cfa = (row.cfa_reg == FLAMME_CFA_RSP ? *sp : *fp) + (intptr_t)row.cfa_off;
    if (cfa <= *sp || find_range(ranges, nranges, cfa - 8, 8, -1) < 0)
        return -1;
    uintptr_t new_fp = *fp;
    if (row.rbp_off) {
        uintptr_t at = cfa + (intptr_t)row.rbp_off;
        if (find_range(ranges, nranges, at, 8, -1) < 0)
            return -1;
        new_fp = *(const uintptr_t *)at;
    }
    *pc = *(const uintptr_t *)(cfa - 8);
    *sp = cfa;
    *fp = new_fp;
    return 1;
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

/* The walk; leaf = 0 when pc is a return address (a call site) rather than
 * an interrupted instruction, so no leaf fix-up applies to it. */
static uint32_t walk(uintptr_t pc, uintptr_t sp, uintptr_t fp, const struct flamme_range *ranges,
                     int nranges, struct flamme_walk_copy *copy, uint64_t *frames, uint32_t max,
                     uint32_t *flags, int leaf)
{
    uintptr_t copy_base = 0; /* the copied chunk covers [copy_base, copy_base + copy_len) */
    uintptr_t copy_len = 0;
    uint32_t n = 0;
    *flags = 0;
    if (max == 0)
        return 0;
    frames[n++] = pc;
    int cur = -1, switches = 0;
    while (n < max) {
        /* A return address points after its call: look up the call itself. */
        int c = cfi_step(leaf ? pc : pc - 1, &pc, &sp, &fp, ranges, nranges);
        if (c < 0) {
            *flags |= FLAMME_SAMPLE_BROKEN;
            return n;
        }
        if (c > 0) {
            if (pc == 0)
                return n; /* outermost frame (RA zero) */
            frames[n++] = pc;
            leaf = 0;
            continue;
        }
        if (leaf) {
            /* Frame-pointer code interrupted where rbp does not describe the
             * current function yet (entry) or any more (just before ret). */
            int ok;
            uintptr_t caller = leaf_caller(pc, sp, ranges, nranges, &ok);
            leaf = 0;
            if (ok && caller) {
                frames[n++] = caller;
                pc = caller;
                if (n >= max)
                    break;
            }
        }
        if (fp == 0)
            return n; /* clean end: clone/_start zero rbp */
        int r = (fp & 7) ? -1 : find_range(ranges, nranges, fp, 16, cur);
        uintptr_t next, ret;
        if (r >= 0) {
            next = ((const uintptr_t *)fp)[0];
            ret = ((const uintptr_t *)fp)[1];
        } else {
            /* Outside every known stack: go on only through a checked copy,
             * and only towards older frames within it. */
            if ((fp & 7) || !copy)
                goto broken;
            if (fp < copy_base || fp + 16 > copy_base + copy_len) {
                if (copy->budget <= 0)
                    goto broken;
                copy->budget--;
                copy_base = fp;
                copy_len = (uintptr_t)copy_chunk(copy, fp) * 8;
                if (copy_len < 16)
                    goto broken;
            }
            next = copy->buf[(fp - copy_base) / 8];
            ret = copy->buf[(fp - copy_base) / 8 + 1];
            if (next != 0 && next <= fp && find_range(ranges, nranges, next, 16, -1) < 0)
                goto broken;
        }
        if (ret == 0)
            return n;
        frames[n++] = ret;
        /* Within one stack the chain must move towards older frames (higher
         * addresses); crossing to another stack (fiber -> parent, OCaml ->
         * C) may go either way, but only a bounded number of times. */
        if (r >= 0 && next != 0 && next <= fp && find_range(ranges, nranges, next, 16, r) == r) {
            *flags |= FLAMME_SAMPLE_BROKEN;
            return n;
        }
        if (r >= 0 && r != cur) {
            if (++switches > 4 * MAX_RANGES) {
                *flags |= FLAMME_SAMPLE_BROKEN;
                return n;
            }
            cur = r;
        }
        pc = ret;
        sp = fp + 16;
        fp = next;
    }
    *flags |= FLAMME_SAMPLE_TRUNCATED;
    return n;
broken:
    *flags |= FLAMME_SAMPLE_BROKEN;
    return n;
}

uint32_t flamme_walk_sigsafe(uintptr_t pc, uintptr_t sp, uintptr_t fp,
                             const struct flamme_range *ranges, int nranges,
                             struct flamme_walk_copy *copy, uint64_t *frames, uint32_t max,
                             uint32_t *flags)
{
    return walk(pc, sp, fp, ranges, nranges, copy, frames, max, flags, 1);
}

/* Hands a SIGPROF that is not ours (another profiler, setitimer, kill) to
 * whoever had the signal before us; a default disposition would kill the
 * program, so in that case it is dropped. */
static void forward(int sig, siginfo_t *si, void *uc)
{
    if (prev_action.sa_flags & SA_SIGINFO) {
        if (prev_action.sa_sigaction)
            prev_action.sa_sigaction(sig, si, uc);
    } else if (prev_action.sa_handler != SIG_DFL && prev_action.sa_handler != SIG_IGN &&
               prev_action.sa_handler) {
        prev_action.sa_handler(sig);
    }
}

/* The memory a walk of slot s's thread may read: its system stack and the
 * OCaml stacks of its domain (or, when another systhread owns the domain
 * state, the ones this thread had last, if still live). sp is the thread's
 * stack pointer. Fills ranges (MAX_RANGES), *domain and *nocaml (1: no OCaml
 * stack known). Returns the number of ranges. */
static int collect_ranges(struct flamme_slot *s, uintptr_t sp, struct flamme_range *ranges,
                          int32_t *domain_out, int *nocaml_out)
{
    int nr = 0;
    if (s->stack_hi > s->stack_lo) {
        ranges[nr].lo = s->stack_lo;
        ranges[nr].hi = s->stack_hi;
        nr++;
    }
    int32_t domain = -1;
    int nocaml = 1;
    if (s->caml_state_slot) {
        const void *ds = *s->caml_state_slot;
        /* In a blocking section caml_state is NULL; the last state this thread
         * used still describes its OCaml stack if its c_stack test passes. */
        if (ds)
            s->last_ds = ds;
        else
            ds = s->last_ds;
        /* Interrupted on an OCaml stack (not the system stack): the stack
         * descriptors are live, no need for the costly checked reads. */
        int direct = sp < s->stack_lo || sp >= s->stack_hi;
        int k = flamme_ocaml_ranges_sigsafe(ds, s->stack_lo, s->stack_hi, direct, ranges + nr,
                                            MAX_RANGES - nr, &domain);
        if (k > 0) {
            /* Remember this thread's OCaml stacks and domain for the samples
             * taken while another systhread owns the domain state. */
            for (int i = 0; i < k && i < FLAMME_SLOT_RANGES; i++)
                s->ocaml_ranges[i] = ranges[nr + i];
            s->n_ocaml_ranges = k < FLAMME_SLOT_RANGES ? k : FLAMME_SLOT_RANGES;
            s->last_domain = domain;
        } else if (s->n_ocaml_ranges > 0 && !direct) {
            /* Blocked (or in C) while another systhread of the domain runs
             * OCaml: the domain state describes that thread, not this one.
             * This thread's own stacks cannot change while it is outside
             * OCaml, so its last known ones still hold, provided each is still
             * a live stack (its descriptor still points at the same end). */
            for (int i = 0; i < s->n_ocaml_ranges && nr + k < MAX_RANGES; i++)
                if (flamme_ocaml_range_live_sigsafe(&s->ocaml_ranges[i]))
                    ranges[nr + k++] = s->ocaml_ranges[i];
        }
        if (domain < 0)
            domain = s->last_domain;
        nocaml = k == 0;
        nr += k;
    }
    *domain_out = domain;
    *nocaml_out = nocaml;
    return nr;
}

/* Commits a sample of n frames already in the ring (the reservation made
 * with flamme_ring_reserve_sigsafe at rec), rings the writer when the ring
 * passes half full, and counts it. */
static void commit_sample(struct flamme_slot *s, uint64_t *rec, uint32_t n, uint32_t flags,
                          uint64_t time, unsigned weight, int32_t domain)
{
    rec[0] = flamme_ring_header(n + FLAMME_SAMPLE_HDR_WORDS, FLAMME_RING_SAMPLE, flags);
    rec[1] = time;
    rec[2] = (uint64_t)weight | ((uint64_t)(uint32_t)domain << 32);
    flamme_ring_commit_sigsafe(s->ring, n + FLAMME_SAMPLE_HDR_WORDS);
    /* Deep stacks at high rates fill a ring faster than the periodic sweep. */
    uint64_t cap = s->ring->mask + 1;
    uint64_t used = atomic_load_explicit(&s->ring->head, memory_order_relaxed) -
                    atomic_load_explicit(&s->ring->tail, memory_order_relaxed);
    if (used * 2 > cap && (used - n - FLAMME_SAMPLE_HDR_WORDS) * 2 <= cap)
        flamme_writer_wake_sigsafe();
    atomic_fetch_add_explicit(&s->taken, 1, memory_order_relaxed);
}

static void flamme_sigprof(int sig, siginfo_t *si, void *ucv)
{
    int saved_errno = errno;
    struct flamme_slot *s = flamme_thread_self_sigsafe();
    unsigned weight;
    if (!flamme_engine_accept_sigsafe(s, si, &weight)) {
        if (!s || !s->unblocked)
            forward(sig, si, ucv);
        errno = saved_errno;
        return;
    }
    /* Pairs with the release store at exit: once sampling stops, rings are
     * no longer fed. */
    if (!atomic_load_explicit(&flamme_agent_sampling, memory_order_acquire)) {
        errno = saved_errno;
        return;
    }
    if (s->blocked_rec) {
        /* The thread was in a blocking call with SIGPROF held back: this
         * signal (with its overruns) stands for the time it waited there,
         * whose stack was taken on the way in. */
        uint64_t *rec = s->blocked_rec;
        s->blocked_rec = NULL;
        commit_sample(s, rec, s->blocked_n, s->blocked_flags, s->blocked_time, weight,
                      s->blocked_domain);
        errno = saved_errno;
        return;
    }
    uint64_t t0 = flamme_now_sigsafe();
    ucontext_t *uc = ucv;
    uintptr_t pc = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
    uintptr_t sp = (uintptr_t)uc->uc_mcontext.gregs[REG_RSP];
    uintptr_t fp = (uintptr_t)uc->uc_mcontext.gregs[REG_RBP];

    struct flamme_range ranges[MAX_RANGES];
    int32_t domain;
    int nocaml;
    int nr = collect_ranges(s, sp, ranges, &domain, &nocaml);
    uint32_t sflags = 0;
    if (nocaml)
        sflags |= FLAMME_SAMPLE_NO_OCAML;
    /* In a system call (blocked, in wall mode): pc is right after the
     * `syscall` instruction, or on it when the kernel rewound pc to restart
     * the call after this handler (SA_RESTART). Only bytes within pc's page
     * are read, which is mapped since the thread executes it. */
    if (flamme_cfg.wall) {
        const unsigned char *c = (const unsigned char *)pc;
        if ((c[0] == 0x0f && (pc & 0xfff) != 0xfff && c[1] == 0x05) ||
            ((pc & 0xfff) >= 2 && c[-2] == 0x0f && c[-1] == 0x05))
            sflags |= FLAMME_SAMPLE_SYSCALL;
    }

    uint64_t max = (uint64_t)flamme_cfg.depth;
    uint64_t *rec = flamme_ring_reserve_sigsafe(s->ring, max + FLAMME_SAMPLE_HDR_WORDS);
    if (!rec) {
        atomic_fetch_add_explicit(&s->lost, 1, memory_order_relaxed);
        flamme_writer_wake_sigsafe();
        errno = saved_errno;
        return;
    }
    uint32_t wflags;
    /* Checked copies (a system call each) where the known stacks end: mostly
     * when this thread's OCaml stacks are unknown, but also while the
     * runtime grows a stack (caml_try_realloc_stack has already pointed the
     * frame pointers at the new stack; current_stack still names the old). */
    struct flamme_walk_copy copy = {s->scratch, FLAMME_SCRATCH_WORDS, 16};
    uint32_t n = flamme_walk_sigsafe(pc, sp, fp, ranges, nr, &copy,
                                     rec + FLAMME_SAMPLE_HDR_WORDS, (uint32_t)max, &wflags);
    sflags |= wflags;
    sflags |= flamme_gc_flags_sigsafe();
    commit_sample(s, rec, n, sflags, t0, weight, domain);
    uint64_t b = (flamme_now_sigsafe() - t0) / COST_BUCKET_NS;
    atomic_fetch_add_explicit(&cost_hist[b < COST_BUCKETS ? b : COST_BUCKETS - 1], 1,
                              memory_order_relaxed);
    errno = saved_errno;
}


int flamme_blocked_begin_nosig(uintptr_t callee, uintptr_t ret, uintptr_t sp, uintptr_t fp)
{
    struct flamme_slot *s = flamme_thread_self_sigsafe();
    /* Pairs with the release store in flamme_agent_start/stop. */
    if (!s || s->blocked_rec || !s->ring ||
        !atomic_load_explicit(&flamme_agent_sampling, memory_order_acquire))
        return 0;
    uint64_t max = (uint64_t)flamme_cfg.depth;
    uint64_t *rec = flamme_ring_reserve_sigsafe(s->ring, max + FLAMME_SAMPLE_HDR_WORDS);
    if (!rec)
        return 0;
    struct flamme_range ranges[MAX_RANGES];
    int32_t domain;
    int nocaml;
    int nr = collect_ranges(s, sp, ranges, &domain, &nocaml);
    uint64_t *frames = rec + FLAMME_SAMPLE_HDR_WORDS;
    uint32_t wflags, n = 0;
    frames[n++] = callee;
    struct flamme_walk_copy copy = {s->scratch, FLAMME_SCRATCH_WORDS, 16};
    n += walk(ret, sp, fp, ranges, nr, &copy, frames + 1, (uint32_t)max - 1, &wflags, 0);
    s->blocked_flags = wflags | FLAMME_SAMPLE_SYSCALL | (nocaml ? FLAMME_SAMPLE_NO_OCAML : 0) |
                       flamme_gc_flags_sigsafe();
    s->blocked_n = n;
    s->blocked_domain = domain;
    s->blocked_time = flamme_now_sigsafe();
    s->blocked_rec = rec; /* last: the handler commits only a finished snapshot */
    return 1;
}

void flamme_blocked_end_nosig(void)
{
    struct flamme_slot *s = flamme_thread_self_sigsafe();
    if (s)
        s->blocked_rec = NULL; /* not committed: the ring space is reused */
}

int flamme_handler_install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = flamme_sigprof;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    return sigaction(SIGPROF, &sa, &prev_action);
}
