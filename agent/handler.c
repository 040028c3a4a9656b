/*
 * agent/handler.c — the sampling-signal handler: one sample of the interrupted thread's
 * stack into its ring. Runs in signal context on the sampled thread only:
 * no malloc, no locks, no stdio; atomics are lock-free.
 */
#include "agent/handler.h"

#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/time.h>
#include <ucontext.h>

#include "agent/agent.h"
#include "agent/budget.h"
#include "agent/cfi.h"
#include "agent/engine.h"
#include "agent/sigaction.h"
#include "agent/threads.h"
#include "agent/walk.h"
#include "common/profile.h"
#include "runtime_hooks/gc_hooks.h"
#include "common/ring.h"
#include "writer/writer.h"

#define MAX_RANGES 16
/* OCaml stacks read before a walk (checked reads when the thread was
 * interrupted in C: one system call per 16 stacks its last sample found,
 * two per other stack); a longer effect-handler chain is read as the walk
 * reaches it (agent/walk.c), so a shortened walk pays only for the stacks
 * it crosses. */
#define FIRST_OCAML_RANGES 8

int flamme_sample_sig = SIGPROF;

/* What the program had on the signals we took, to forward foreign signals
 * to: the real-time one (rt_sig, 0 until installed) and SIGPROF (itimer). */
static int rt_sig;
static struct sigaction prev_rt, prev_prof;
static int prof_installed;

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

/* Hands a signal that is not ours (the program's own SIGPROF while the
 * itimer engine runs, a stray sigqueue) to whoever had the signal before us;
 * a default disposition would kill the program, so in that case it is
 * dropped. */
static void forward(int sig, siginfo_t *si, void *uc)
{
    const struct sigaction *prev = sig == SIGPROF ? &prev_prof : &prev_rt;
    if (prev->sa_flags & SA_SIGINFO) {
        if (prev->sa_sigaction)
            prev->sa_sigaction(sig, si, uc);
    } else if (prev->sa_handler != SIG_DFL && prev->sa_handler != SIG_IGN && prev->sa_handler) {
        prev->sa_handler(sig);
    }
}

/* The memory a walk of slot s's thread may read: its system stack and the
 * OCaml stacks of its domain (or, when another systhread owns the domain
 * state, the ones this thread had last, if still live). sp is the thread's
 * stack pointer; pc and rsi its interrupted pc and rsi (0 outside a
 * signal: see flamme_ocaml_ranges_sigsafe). Fills ranges (MAX_RANGES),
 * *domain and *nocaml (1: no OCaml stack known), and in copy where the
 * effect-handler chain goes on beyond the ranges (struct flamme_walk_copy's
 * more). Returns the number of ranges. */
static int collect_ranges(struct flamme_slot *s, uintptr_t sp, uintptr_t pc, uintptr_t rsi,
                          struct flamme_range *ranges, int32_t *domain_out, int *nocaml_out,
                          struct flamme_walk_copy *copy)
{
    int nr = 0;
    if (s->stack_hi > s->stack_lo) {
        ranges[nr].lo = s->stack_lo;
        ranges[nr].hi = s->stack_hi;
        nr++;
    }
    int32_t domain = -1;
    int nocaml = 1;
    copy->first_ocaml = nr;
    if (s->caml_state_slot) {
        const void *ds = *s->caml_state_slot;
        /* In a blocking section caml_state is NULL; the last state this thread
         * used still describes its OCaml stack if its c_stack test passes. */
        int own = ds != NULL;
        if (ds)
            s->last_ds = ds;
        else
            ds = s->last_ds;
        /* Interrupted on an OCaml stack (not the system stack), or in a C
         * call OCaml made straight: the stack descriptors are live, no need
         * for the costly checked reads. */
        int on_sys = sp >= s->stack_lo && sp < s->stack_hi;
        int direct = !on_sys || (own && flamme_ocaml_stable_sigsafe(ds, s->stack_lo, s->stack_hi, sp));
        uintptr_t more;
        int k = flamme_ocaml_ranges_sigsafe(ds, s->stack_lo, s->stack_hi, sp, direct, pc, rsi,
                                            &s->chain, ranges + nr, FIRST_OCAML_RANGES, &domain,
                                            &more);
        copy->chain = &s->chain;
        copy->more = more;
        copy->more_direct = direct;
        if (k > 0) {
            /* Remember this thread's OCaml stacks and domain for the samples
             * taken while another systhread owns the domain state. */
            for (int i = 0; i < k && i < FLAMME_SLOT_RANGES; i++)
                s->ocaml_ranges[i] = ranges[nr + i];
            s->n_ocaml_ranges = k < FLAMME_SLOT_RANGES ? k : FLAMME_SLOT_RANGES;
            s->last_domain = domain;
        } else if (s->n_ocaml_ranges > 0 && on_sys) {
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
    flamme_ring_sample_put(rec, n, flags, time, weight, domain);
    flamme_ring_commit_sigsafe(s->ring, n + FLAMME_SAMPLE_HDR_WORDS);
    /* Deep stacks at high rates fill a ring faster than the periodic sweep. */
    uint64_t cap = s->ring->mask + 1;
    uint64_t used = atomic_load_explicit(&s->ring->head, memory_order_relaxed) -
                    atomic_load_explicit(&s->ring->tail, memory_order_relaxed);
    if (used * 2 > cap && (used - n - FLAMME_SAMPLE_HDR_WORDS) * 2 <= cap)
        flamme_writer_wake_sigsafe();
    else
        flamme_writer_activity_sigsafe();
    atomic_fetch_add_explicit(&s->taken, 1, memory_order_relaxed);
}

/* Whether pc is on a `syscall` instruction: one the kernel rewound it to,
 * to restart the call after this handler (SA_RESTART). Only bytes within
 * pc's page are read, which is mapped since the thread executes it. */
static int at_syscall_sigsafe(uintptr_t pc)
{
    const unsigned char *c = (const unsigned char *)pc;
    return c[0] == 0x0f && (pc & 0xfff) != 0xfff && c[1] == 0x05;
}

/* Whether pc is right after a `syscall` instruction (same page only). */
static int past_syscall_sigsafe(uintptr_t pc)
{
    const unsigned char *c = (const unsigned char *)pc;
    return (pc & 0xfff) >= 2 && c[-2] == 0x0f && c[-1] == 0x05;
}

/* Whether pc is right after a `syscall` instruction or on one the kernel
 * rewound to: the signal came as the thread left a system call. */
static int after_syscall_sigsafe(uintptr_t pc)
{
    return at_syscall_sigsafe(pc) || past_syscall_sigsafe(pc);
}

/* Whether this signal cut short a system call the thread was asleep in:
 * the kernel then rewound the pc onto the `syscall` to restart the call
 * after this handler (SA_RESTART), or made the call return -EINTR. A call
 * the thread was preempted in (a busy machine) completes first, the signal
 * waiting with it, and leaves the pc after the `syscall` with the call's
 * own result: that thread waited for a CPU and is not asleep. */
static int cut_sleep_sigsafe(void *ucv)
{
    const ucontext_t *uc = ucv;
    uintptr_t pc = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
    return at_syscall_sigsafe(pc) ||
           (past_syscall_sigsafe(pc) && uc->uc_mcontext.gregs[REG_RAX] == -EINTR);
}

/* The kernel's part of a sample of weight periods taken at pc, from what
 * the engine said (kernel, maybe FLAMME_KERNEL_UNKNOWN); adds
 * FLAMME_SAMPLE_SYSCALL to *flags in wall mode. Leaving a system call: in
 * wall mode the thread was blocked there; in cpu mode, for an engine that
 * cannot tell kernel periods, the tick that fired fell in the call (one in
 * user space would have stopped the thread right there, hardly ever just
 * after a `syscall`). The periods the handler's own time took off were
 * user time. */
static unsigned kernel_periods_sigsafe(uintptr_t pc, unsigned weight, unsigned kernel,
                                       uint32_t *flags)
{
    if (flamme_cfg.wall) {
        if (after_syscall_sigsafe(pc))
            *flags |= FLAMME_SAMPLE_SYSCALL;
        return 0;
    }
    if (kernel == FLAMME_KERNEL_UNKNOWN)
        return after_syscall_sigsafe(pc) ? weight : 0;
    return kernel > weight ? weight : kernel;
}

/* Commits the sample at rec (n frames, weight periods of which kernel were
 * the kernel's): the kernel periods as their own sample flagged KERNEL,
 * with the same frames (the user stack that entered the kernel), copied
 * into a second record when the signal stands for both kinds. */
static void commit_split(struct flamme_slot *s, uint64_t *rec, uint32_t n, uint32_t flags,
                         uint64_t time, unsigned weight, unsigned kernel, int32_t domain)
{
    if (kernel == 0 || kernel >= weight) {
        commit_sample(s, rec, n, flags | (kernel ? FLAMME_SAMPLE_KERNEL : 0), time, weight,
                      domain);
        return;
    }
    commit_sample(s, rec, n, flags, time, weight - kernel, domain);
    /* Space the writer released may be reused, the committed record too:
     * memmove. */
    uint64_t *rec2 = flamme_ring_reserve_sigsafe(s->ring, (uint64_t)n + FLAMME_SAMPLE_HDR_WORDS);
    if (!rec2) {
        atomic_fetch_add_explicit(&s->lost, 1, memory_order_relaxed);
        return;
    }
    memmove(rec2 + FLAMME_SAMPLE_HDR_WORDS, rec + FLAMME_SAMPLE_HDR_WORDS, n * sizeof *rec);
    commit_sample(s, rec2, n, flags | FLAMME_SAMPLE_KERNEL, time, kernel, domain);
}

/* Stack a sample needs below flamme_sigprof's frame: a walk takes ~1,600
 * bytes (walk_sample_sigsafe and the walker, `-fstack-usage`), a pc alone
 * ~600 (the doorbell's fstat included); with margins. */
#define HANDLER_STACK_NEED 2560
#define CRAMPED_STACK_NEED 1024

/* Samples pc_sample_sigsafe took (relaxed: a count, read after sampling). */
static _Atomic uint64_t pc_only;

uint64_t flamme_handler_pc_only(void)
{
    return atomic_load_explicit(&pc_only, memory_order_relaxed);
}

static void walk_sample_sigsafe(struct flamme_slot *s, void *ucv, unsigned weight,
                                unsigned kernel);
static void held_sample_sigsafe(struct flamme_slot *s, void *ucv, uintptr_t callee,
                                unsigned weight, unsigned kernel);
static int held_call_live_sigsafe(struct flamme_slot *s, const void *ucv);
/* glibc's pthread_sigmask is ~150 bytes, its system call inside; the
 * interposer, hold or release and pthread_sigmask take ~200 bytes of
 * stack below the interposer's caller. Both bounds with room. */
#define PTHREAD_SIGMASK_BYTES 512
#define HELD_CALL_DEPTH 4096
static void pc_sample_sigsafe(struct flamme_slot *s, void *ucv, unsigned weight, unsigned kernel);
static void leaf_sample_sigsafe(struct flamme_slot *s, void *ucv, unsigned weight,
                                unsigned kernel, int cramped);

/* Room on the alternate signal stack below `here` (an address in the
 * handler's frame), or SIZE_MAX when the handler runs on another stack.
 * A signal that interrupts a handler already on the alternate stack (the
 * program's own SIGPROF handler, say) is pushed below that handler's frame
 * on the same stack: OCaml's is 8 KiB (SIGSTKSZ; 5.5's, sysconf's size,
 * 13.5 KiB here, leaves room for a walk, which then steps through the
 * program's handler's signal frame: agent/walk.c) and the kernel's frame
 * with AVX-512 state ~3.4 KiB, so two frames leave ~1.3 KiB, and a walk
 * there wrote below the stack, over malloc's header of the block OCaml
 * frees at exit ("munmap_chunk(): invalid pointer": 1-3% of tests/signal
 * ownprof runs at 499 Hz, every tests/signal/nested.ml run). */
static size_t altstack_room_sigsafe(const ucontext_t *uc, uintptr_t here)
{
    uintptr_t lo = (uintptr_t)uc->uc_stack.ss_sp;
    if ((uc->uc_stack.ss_flags & SS_DISABLE) || here < lo || here - lo >= uc->uc_stack.ss_size)
        return SIZE_MAX;
    return here - lo;
}

/* The agent's executable segment [lo, hi) (flamme_handler_note_self);
 * empty until noted, and when linked into the program. Written before
 * any handler runs. */
static uintptr_t self_lo, self_hi;

#ifndef FLAMME_LINKED
/* dl_iterate_phdr's callback: the executable PT_LOAD holding data (an
 * address of our code). */
static int find_self(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    uintptr_t at = (uintptr_t)data;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X) && at >= lo && at - lo < ph->p_memsz) {
            self_lo = lo;
            self_hi = lo + ph->p_memsz;
            return 1;
        }
    }
    return 0;
}
#endif

void flamme_handler_note_self(void)
{
#ifndef FLAMME_LINKED
    dl_iterate_phdr(find_self, (void *)(uintptr_t)flamme_handler_note_self);
#endif
}

/* Whether s's thread was asleep in a system call when this signal came:
 * the signal cut the call short, or was held back over a blocking call
 * and let in at its end (agent/blocking.c; the pc is then in
 * pthread_sigmask, after its own `syscall`). */
static int slept_sigsafe(struct flamme_slot *s, void *ucv)
{
    return cut_sleep_sigsafe(ucv) || (s && s->held_callee && held_call_live_sigsafe(s, ucv));
}

static void flamme_sigprof(int sig, siginfo_t *si, void *ucv)
{
    int saved_errno = errno;
    struct flamme_slot *s = flamme_thread_self_sigsafe();
    unsigned weight, kernel;
    if (sig != flamme_sample_sig ||
        !flamme_engine_accept_sigsafe(s, si, slept_sigsafe(s, ucv), &weight, &kernel)) {
        if (!s || !s->unblocked)
            forward(sig, si, ucv);
        else
            s->sample_sigs++;
        errno = saved_errno;
        return;
    }
    if (s)
        s->sample_sigs++;
    /* Pairs with the release store at exit: once sampling stops, rings are
     * no longer fed. */
    if (!atomic_load_explicit(&flamme_agent_sampling, memory_order_acquire) || !s->ring ||
        weight == 0) {
        errno = saved_errno;
        return;
    }
    /* The thread is arming its own engine (agent/threads.c): the period is
     * the program's CPU time, but the stack flamme's; it goes to the
     * thread's next sample. */
    if (s->self_arming) {
        s->arming_carry += weight;
        errno = saved_errno;
        return;
    }
    /* The thread does the agent's work (agent/dl.c): flamme's time. */
    if (s->in_agent) {
        errno = saved_errno;
        return;
    }
    unsigned carried = s->arming_carry;
    if (carried) {
        weight += carried;
        s->arming_carry = 0;
    }
    /* The thread was writing an allocation into the ring (agent/alloc.c):
     * the period was flamme's own time, and the ring is not ours now. */
    if (atomic_load_explicit(&s->ring_busy, memory_order_relaxed)) {
        atomic_fetch_add_explicit(&s->ring_busy_skipped, 1, memory_order_relaxed);
        errno = saved_errno;
        return;
    }
    /* Delivered inside an interposed blocking call, nearly always as the
     * interposer lets the signal in again: this signal (with its overruns)
     * stands for the call's time (the wait, in wall mode; its kernel time,
     * in CPU mode), and the stack is the call's under its caller, not
     * libc's pthread_sigmask under the interposer. */
    uintptr_t held = s->held_callee;
    atomic_signal_fence(memory_order_acquire); /* pairs with mark_call's release fences */
    if (held && !held_call_live_sigsafe(s, ucv))
        held = 0;
    if (held) {
        if (altstack_room_sigsafe(ucv, (uintptr_t)__builtin_frame_address(0)) >= HANDLER_STACK_NEED)
            held_sample_sigsafe(s, ucv, held, weight, kernel);
        else
            s->arming_carry += weight;
        errno = saved_errno;
        return;
    }
    /* Interrupted in the agent's own code (its start's and stop's ends, an
     * interposer's own instructions): flamme's time, as in_agent. After
     * the blocked call's sample, whose signal is let in by the interposer
     * itself. */
    uintptr_t ipc = (uintptr_t)((ucontext_t *)ucv)->uc_mcontext.gregs[REG_RIP];
    if (ipc >= self_lo && ipc < self_hi) {
        s->arming_carry += carried; /* the program's, for its next sample */
        errno = saved_errno;
        return;
    }
    /* The walk's stack is the alternate signal stack's (see
     * altstack_room_sigsafe): with too little of it left, only the pc. */
    size_t room = altstack_room_sigsafe(ucv, (uintptr_t)__builtin_frame_address(0));
    if (room >= HANDLER_STACK_NEED)
        walk_sample_sigsafe(s, ucv, weight, kernel);
    else if (room >= CRAMPED_STACK_NEED)
        pc_sample_sigsafe(s, ucv, weight, kernel);
    else
        s->arming_carry += weight;
    errno = saved_errno;
}

/* Walks the interrupted stack into a sample of weight periods (kernel of
 * them in the kernel): the handler's work, kept out of flamme_sigprof's
 * frame so that its ~700 bytes of locals are only taken once
 * altstack_room_sigsafe said they fit. */
static __attribute__((noinline)) void walk_sample_sigsafe(struct flamme_slot *s, void *ucv,
                                                          unsigned weight, unsigned kernel)
{
    /* Periods that were the handler's own time are no sample; a budget
     * overdrawn by deep walks shortens this one (agent/budget.h). */
    uint32_t max = (uint32_t)flamme_cfg.depth;
    /* Pairs with the writer's fetch_add (host_charge_budget). */
    uint64_t writer_ns = atomic_exchange_explicit(&s->writer_debt_ns, 0, memory_order_relaxed);
    if (s->memo.frame && !s->memo.len)
        flamme_budget_unseeded_sigsafe();
    weight = flamme_budget_admit_sigsafe(weight, 1000000000u / (unsigned)flamme_cfg.hz, writer_ns,
                                         &max);
    if (!weight)
        return;
    if (max == FLAMME_BUDGET_LEAF_DEPTH) {
        /* Even short walks overdraw the budget: the pc alone, no stack
         * read (reading the stacks was most of their cost). */
        uint64_t wall0 = flamme_now_sigsafe();
        leaf_sample_sigsafe(s, ucv, weight, kernel, 0);
        flamme_budget_leaf_only_sigsafe(wall0, weight);
        return;
    }
    struct flamme_budget_clock bc;
    flamme_budget_start_sigsafe(&bc);
    uint64_t t0 = bc.wall0;
    ucontext_t *uc = ucv;
    uintptr_t pc = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
    uintptr_t sp = (uintptr_t)uc->uc_mcontext.gregs[REG_RSP];
    /* Every register, by DWARF number: the unwind rows may compute the CFA
     * from any of them in the interrupted frame. */
    static const int8_t greg_of_dw[16] = FLAMME_GREG_OF_DW;
    struct flamme_walk_regs regs;
    for (int i = 0; i < 16; i++)
        regs.r[i] = (uintptr_t)uc->uc_mcontext.gregs[greg_of_dw[i]];
    regs.valid = 0xffff;

    struct flamme_range ranges[MAX_RANGES];
    int32_t domain;
    int nocaml;
    /* Checked copies (a system call each) where the known stacks end: mostly
     * when this thread's OCaml stacks are unknown, but also while the
     * runtime grows a stack, between rewriting the frame pointers for the
     * new stack and pointing the C-stack links at it (from then on the
     * ranges start at the new stack: flamme_ocaml_ranges_sigsafe). */
    struct flamme_walk_copy copy = {.buf = s->scratch, .words = FLAMME_SCRATCH_WORDS, .budget = 16,
                                    .cfi = s->cfi_cache};
    int nr = collect_ranges(s, sp, pc, regs.r[FLAMME_DW_RSI], ranges, &domain, &nocaml, &copy);
    uint32_t sflags = 0;
    if (nocaml)
        sflags |= FLAMME_SAMPLE_NO_OCAML;
    kernel = kernel_periods_sigsafe(pc, weight, kernel, &sflags);

    /* The frames the walk shares with the thread's last whole stack are
     * replayed from its memo (agent/memo.h), not walked: room for them too,
     * up to the depth asked for, while the budget's limit counts the frames
     * walked. */
    struct flamme_memo *memo = s->memo.frame ? &s->memo : NULL;
    uint32_t room = max;
    if (memo && memo->len)
        room = (uint64_t)max + memo->len < (uint32_t)flamme_cfg.depth ? max + memo->len
                                                                      : (uint32_t)flamme_cfg.depth;
    uint64_t *rec = flamme_ring_reserve_sigsafe(s->ring, (uint64_t)room + FLAMME_SAMPLE_HDR_WORDS);
    if (!rec) {
        atomic_fetch_add_explicit(&s->lost, 1, memory_order_relaxed);
        flamme_writer_wake_sigsafe();
        return;
    }
    uint32_t wflags;
    struct flamme_walk_trace tr = {.max_walked = max};
    if (memo) {
        tr.ra_at = memo->trace;
        tr.step = memo->trace_step;
        tr.cap = FLAMME_MEMO_FRAMES;
        tr.memo = memo;
    }
    uint64_t *frames = rec + FLAMME_SAMPLE_HDR_WORDS;
    uint32_t n = flamme_walk_traced_sigsafe(pc, &regs, 1, ranges, nr, &copy, frames, room, &wflags,
                                            &tr);
    uint32_t walked = n - tr.replayed;
    if (tr.replayed)
        flamme_budget_replayed_sigsafe();
    /* A stack a short walk takes whole does not replace a deeper one: it
     * needs no memo, and the deeper stack comes back (a program between
     * its deep calls: ~70 samples of a 120-deep recursion stayed short,
     * each walking the recursion again, after one sample at its top). */
    if (memo && !(wflags & (FLAMME_SAMPLE_TRUNCATED | FLAMME_SAMPLE_BROKEN)) &&
        n <= FLAMME_MEMO_FRAMES &&
        (n > FLAMME_BUDGET_SHORT_DEPTH || memo->len <= FLAMME_BUDGET_SHORT_DEPTH)) {
        if (tr.run_k >= 0)
            flamme_memo_update_sigsafe(memo, frames, memo->trace, memo->trace_step, n,
                                       (uint32_t)tr.run_k, tr.run_at, tr.run_len);
        else
            flamme_memo_set_sigsafe(memo, frames, memo->trace, memo->trace_step, n);
    }
    sflags |= wflags;
    sflags |= flamme_gc_flags_sigsafe();
    if (s->dither_ok && s->last_frames) {
        s->last_n = n <= FLAMME_LAST_FRAMES ? n : 0;
        memcpy(s->last_frames, frames, s->last_n * sizeof *frames);
        s->last_flags = sflags;
    }
    commit_split(s, rec, n, sflags, t0, weight, kernel, domain);
    uint64_t b =
        flamme_budget_charge_sigsafe(&bc, walked, (wflags & FLAMME_SAMPLE_TRUNCATED) != 0) /
        COST_BUCKET_NS;
    atomic_fetch_add_explicit(&cost_hist[b < COST_BUCKETS ? b : COST_BUCKETS - 1], 1,
                              memory_order_relaxed);
}

/* A sample of the interrupted pc alone, marked truncated: the handler
 * interrupted another one on the alternate stack and has no room for a
 * walk (cramped: counted as such), or the budget allows no walk. Its
 * weight stays with the function that was running. */
static void leaf_sample_sigsafe(struct flamme_slot *s, void *ucv, unsigned weight,
                                unsigned kernel, int cramped)
{
    const ucontext_t *uc = ucv;
    uintptr_t pc = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
    uint64_t *rec = flamme_ring_reserve_sigsafe(s->ring, 1 + FLAMME_SAMPLE_HDR_WORDS);
    if (!rec) {
        atomic_fetch_add_explicit(&s->lost, 1, memory_order_relaxed);
        return;
    }
    rec[FLAMME_SAMPLE_HDR_WORDS] = pc;
    uint32_t flags = FLAMME_SAMPLE_TRUNCATED;
    kernel = kernel_periods_sigsafe(pc, weight, kernel, &flags);
    if (cramped)
        atomic_fetch_add_explicit(&pc_only, 1, memory_order_relaxed);
    else
        flags |= flamme_gc_flags_sigsafe(); /* as a walked sample's */
    commit_split(s, rec, 1, flags, flamme_now_sigsafe(), weight, kernel, s->last_domain);
}

static __attribute__((noinline)) void pc_sample_sigsafe(struct flamme_slot *s, void *ucv,
                                                        unsigned weight, unsigned kernel)
{
    leaf_sample_sigsafe(s, ucv, weight, kernel, 1);
}


void flamme_handler_flush_nosig(struct flamme_slot *s, unsigned weight)
{
    /* Pairs with the release store in flamme_agent_start/stop. */
    if (!weight || !s->ring || !atomic_load_explicit(&flamme_agent_sampling, memory_order_acquire))
        return;
    const uint64_t *frames = s->last_frames;
    uint32_t n = s->last_n, flags = s->last_flags;
    uint64_t start = s->start_routine;
    if (!start && s->is_main)
        start = (uint64_t)getauxval(AT_ENTRY); /* the main thread's root: _start */
    if (!n && start) {
        /* No stack of the thread's own yet (its one signal came while it
         * armed its engine, say, and it ended before the next; 2 runs in
         * 40 of tests/fidelity churn on a loaded machine; or a main thread
         * that hardly runs after the agent's start, whose first sample
         * came in it: 4 runs in 123 of churn beside a busy process): the
         * routine it was started with, marked truncated, rather than a
         * loss. */
        frames = &start;
        n = 1;
        flags = FLAMME_SAMPLE_TRUNCATED;
    }
    uint64_t *rec = n ? flamme_ring_reserve_sigsafe(s->ring, n + FLAMME_SAMPLE_HDR_WORDS) : NULL;
    if (!rec) {
        atomic_fetch_add_explicit(&s->lost, 1, memory_order_relaxed);
        return;
    }
    memcpy(rec + FLAMME_SAMPLE_HDR_WORDS, frames, n * sizeof *rec);
    commit_sample(s, rec, n, flags, flamme_now_sigsafe(), weight, s->last_domain);
}

/* Walks the stack of the thread of slot s from a caller's return address
 * ret, stack pointer sp (after the return) and frame pointer fp into
 * frames[0..max); sets *domain, *nocaml and *flags. Returns the frame
 * count. On the thread itself: in its handler (held_sample_sigsafe) or in
 * normal context holding its ring (flamme_walk_caller_nosig). */
static uint32_t walk_from_caller_sigsafe(struct flamme_slot *s, uintptr_t ret, uintptr_t sp,
                                         uintptr_t fp, uint64_t *frames, uint32_t max,
                                         int32_t *domain, int *nocaml, uint32_t *flags)
{
    struct flamme_range ranges[MAX_RANGES];
    struct flamme_walk_copy copy = {.buf = s->scratch, .words = FLAMME_SCRATCH_WORDS, .budget = 16,
                                    .cfi = s->cfi_cache};
    int nr = collect_ranges(s, sp, 0, 0, ranges, domain, nocaml, &copy);
    struct flamme_walk_regs regs = {{0}, FLAMME_WALK_REG(FLAMME_DW_RSP) | FLAMME_WALK_REG(FLAMME_DW_RBP)};
    regs.r[FLAMME_DW_RSP] = sp;
    regs.r[FLAMME_DW_RBP] = fp;
    return flamme_walk_regs_sigsafe(ret, &regs, 0, ranges, nr, &copy, frames, max, flags);
}

uint32_t flamme_walk_caller_nosig(struct flamme_slot *s, uintptr_t ret, uintptr_t sp, uintptr_t fp,
                                  uint64_t *frames, uint32_t max, int32_t *domain, uint32_t *flags)
{
    int nocaml;
    return walk_from_caller_sigsafe(s, ret, sp, fp, frames, max, domain, &nocaml, flags);
}

/* Whether the call named in s->held_* is the one the signal came in: the
 * signal interrupted the interposer's own code or libc's pthread_sigmask
 * (where a held-back signal is let in), a little below the interposer's
 * frame. A stack pointer above that frame means the thread left the call
 * without its release (a longjmp out of a signal handler): the name is
 * stale and cleared, so that no later sample is taken as the call's. */
static int held_call_live_sigsafe(struct flamme_slot *s, const void *ucv)
{
    const ucontext_t *uc = ucv;
    uintptr_t pc = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
    uintptr_t sp = (uintptr_t)uc->uc_mcontext.gregs[REG_RSP];
    if (sp >= s->held_sp) {
        s->held_callee = 0;
        return 0;
    }
    int in_mask = pc - (uintptr_t)pthread_sigmask < PTHREAD_SIGMASK_BYTES;
    return s->held_sp - sp <= HELD_CALL_DEPTH && (in_mask || (pc >= self_lo && pc < self_hi));
}

/* The sample of a signal delivered while the thread is in an interposed
 * blocking call (s->held_*, agent/blocking.c): callee as the leaf, then
 * the interposer's caller's stack, walked from the interposer's frame; its
 * weight admitted as walk_sample_sigsafe's is. A full ring loses it
 * (counted). */
static __attribute__((noinline)) void held_sample_sigsafe(struct flamme_slot *s, void *ucv,
                                                          uintptr_t callee, unsigned weight,
                                                          unsigned kernel)
{
    uint32_t max = (uint32_t)flamme_cfg.depth;
    /* Pairs with the writer's fetch_add (host_charge_budget). */
    uint64_t writer_ns = atomic_exchange_explicit(&s->writer_debt_ns, 0, memory_order_relaxed);
    weight = flamme_budget_admit_sigsafe(weight, 1000000000u / (unsigned)flamme_cfg.hz, writer_ns,
                                         &max);
    if (!weight)
        return;
    if (max < 2)
        max = 2;
    uint64_t *rec = flamme_ring_reserve_sigsafe(s->ring, (uint64_t)max + FLAMME_SAMPLE_HDR_WORDS);
    if (!rec) {
        atomic_fetch_add_explicit(&s->lost, 1, memory_order_relaxed);
        flamme_writer_wake_sigsafe();
        return;
    }
    int32_t domain;
    int nocaml;
    uint64_t *frames = rec + FLAMME_SAMPLE_HDR_WORDS;
    uint32_t wflags = 0;
    frames[0] = callee;
    uint32_t n = 1 + walk_from_caller_sigsafe(s, s->held_ret, s->held_sp, s->held_fp, frames + 1,
                                              max - 1, &domain, &nocaml, &wflags);
    uint32_t sflags = wflags | (nocaml ? FLAMME_SAMPLE_NO_OCAML : 0) | flamme_gc_flags_sigsafe();
    if (flamme_cfg.wall)
        sflags |= FLAMME_SAMPLE_SYSCALL; /* the thread waited in the call */
    const ucontext_t *uc = ucv;
    kernel = kernel_periods_sigsafe((uintptr_t)uc->uc_mcontext.gregs[REG_RIP], weight, kernel,
                                    &sflags);
    commit_split(s, rec, n, sflags, flamme_now_sigsafe(), weight, kernel, domain);
}

/* Whether the program leaves sig alone: default disposition, and not
 * blocked in the calling thread (a program that blocks a signal to take it
 * with sigwaitinfo or a signalfd owns it just the same). */
static int signal_free(int sig)
{
    struct sigaction cur;
    sigset_t mask;
    if (sigaction(sig, NULL, &cur) != 0 || pthread_sigmask(SIG_BLOCK, NULL, &mask) != 0)
        return 0;
    return !(cur.sa_flags & SA_SIGINFO) && cur.sa_handler == SIG_DFL && !sigismember(&mask, sig);
}

/* The first free real-time signal from SIGRTMAX-3 downwards (programs and
 * libraries that use real-time signals tend to take SIGRTMIN+n or SIGRTMAX),
 * or -1 if none is. */
static int pick_rt_signal(void)
{
    for (int sig = SIGRTMAX - 3; sig >= SIGRTMIN + 2; sig--)
        if (signal_free(sig))
            return sig;
    return -1;
}

int flamme_signal_choose(int itimer)
{
    int sig = itimer ? SIGPROF : (rt_sig ? rt_sig : pick_rt_signal());
    if (sig > 0)
        flamme_sample_sig = sig;
    return sig > 0 ? 0 : -1;
}

int flamme_handler_install(int itimer)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = flamme_sigprof;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
    /* One handler runs at a time on a thread: each of our signals masks the
     * other (the ring has one producer). The program's own asynchronous
     * signals wait too, a few microseconds: its handler, on the same
     * alternate stack below ours, found no room for its kernel frame while
     * a walk ran (OCaml's 8 KiB: ~3.4 KiB a frame and ~1.5 KiB of walk),
     * and the kernel killed the program with SIGSEGV (tests/signal/nested.ml
     * with OCaml 5.1, 2 of 30 runs). Faults stay deliverable: blocking them
     * turns one into a kill. */
    sigfillset(&sa.sa_mask);
    static const int sync_sigs[] = { SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP, SIGSYS, SIGABRT };
    for (size_t i = 0; i < sizeof sync_sigs / sizeof sync_sigs[0]; i++)
        sigdelset(&sa.sa_mask, sync_sigs[i]);
    if (itimer) {
        flamme_sample_sig = SIGPROF;
        if (prof_installed)
            return 0;
        if (sigaction(SIGPROF, &sa, &prev_prof) != 0)
            return -1;
        prof_installed = 1;
        flamme_walk_note_sigreturn(SIGPROF);
        flamme_sigaction_block(SIGPROF);
        return 0;
    }
    if (rt_sig) {
        flamme_sample_sig = rt_sig;
        return 0;
    }
    /* Chosen when the agent loaded; the program may have taken it since. */
    if (!signal_free(flamme_sample_sig) || flamme_sample_sig == SIGPROF) {
        int sig = pick_rt_signal();
        if (sig < 0) {
            errno = EBUSY;
            return -1;
        }
        flamme_sample_sig = sig;
    }
    sigaddset(&sa.sa_mask, flamme_sample_sig);
    if (sigaction(flamme_sample_sig, &sa, &prev_rt) != 0)
        return -1;
    rt_sig = flamme_sample_sig;
    flamme_walk_note_sigreturn(rt_sig);
    flamme_sigaction_block(rt_sig);
    return 0;
}

int flamme_handler_still_ours(void)
{
    struct sigaction cur;
    return sigaction(flamme_sample_sig, NULL, &cur) == 0 && (cur.sa_flags & SA_SIGINFO) &&
           cur.sa_sigaction == flamme_sigprof;
}

int flamme_handler_prof_taken(void)
{
    struct itimerval it;
    struct sigaction cur;
    if (getitimer(ITIMER_PROF, &it) != 0 || timerisset(&it.it_value))
        return 1;
    if (sigaction(SIGPROF, NULL, &cur) != 0)
        return 1;
    if (cur.sa_flags & SA_SIGINFO)
        return cur.sa_sigaction != flamme_sigprof;
    return cur.sa_handler != SIG_DFL;
}
