/*
 * agent/walk.h — the stack walker: from an interrupted thread's registers to
 * the return addresses of its stack, by call-frame information where the
 * code has it (agent/cfi.h: OCaml without frame pointers, glibc, C
 * libraries, the OCaml runtime's stack switches) and by frame pointers
 * elsewhere. Called by the SIGPROF handler (agent/handler.c) and, in normal
 * context with SIGPROF blocked, around blocking calls; the unit tests call
 * it from ordinary code (tests/unit/test_walk.c holds it against libunwind).
 * async-signal-safe: yes (every function here).
 */
#ifndef FLAMME_AGENT_WALK_H
#define FLAMME_AGENT_WALK_H
#include <stdint.h>

#include "agent/memo.h"
#include "runtime_hooks/ocaml_rt.h"

/* Where the walk may copy stack memory it cannot vouch for. When a frame
 * (frame pointer, or CFA of a CFI row) leads outside the known ranges
 * (typically: a thread blocked in C while another systhread owns its domain
 * state, so its OCaml stack is not known), the walk copies up to a
 * page-split chunk there with a fault-tolerant read and goes on from the
 * copy, at most `budget` times. The same per-thread memory holds the
 * thread's memo of unwind-row lookups. */
struct flamme_walk_copy {
    uint64_t *buf;
    uint32_t words;
    int budget;
    struct flamme_cfi_cache *cfi; /* the thread's memo of unwind rows (agent/cfi.h), or NULL */
    /* An effect-handler chain longer than the ranges given: the next
     * stack's descriptor (flamme_ocaml_ranges_sigsafe's *more; 0: none),
     * whether it may be read plainly, and the index of the first OCaml
     * range (those before it, the system stack, are always kept; with a
     * chain only: ranges[first_ocaml..] are OCaml stacks in chain order,
     * each the parent of the one before). The walk
     * moves its window of OCaml ranges along the chain as it reaches the
     * end of it (agent/walk.c, more_ranges). */
    uintptr_t more;
    int more_direct;
    int first_ocaml;
    struct flamme_ocaml_chain *chain; /* the thread's (runtime_hooks/ocaml_rt.h), or NULL */
};

/* Where a walk read its return addresses: ra_at[i] is the stack address
 * frames[i] came from (0 for the leaf pc, and for a word read from a
 * checked copy rather than a known stack) and step[i] how the walk came to
 * it from frames[i - 1] (FLAMME_STEP_*, agent/memo.h), for i < cap. With a
 * memo (the thread's last whole stack), the frames it shares with this
 * stack are replayed from it where their steps allow (agent/memo.h). */
struct flamme_walk_trace {
    uintptr_t *ra_at; /* may be NULL (cap 0) */
    uint8_t *step;    /* may be NULL */
    uint32_t cap;
    struct flamme_memo *memo; /* may be NULL */
    uint32_t max_walked;      /* frames walked (not replayed) at most; 0: max */
    uint32_t replayed;        /* out: frames replayed from the memo */
    /* Out: the first frame the walk met in the memo, frames[run_at] =
     * memo->frame[run_k] (run_k -1: none), and the run_len frames replayed
     * right after it (memo->frame[run_k - 1] down to [run_k - run_len]). */
    int32_t run_k;
    uint32_t run_at, run_len;
    struct flamme_memo_cursor cursor; /* the walk's, set by the walk */
};

/* The registers a walk starts from, by DWARF number (rax rdx rcx rbx rsi
 * rdi rbp rsp r8..r15 = 0..15); bit i of valid says r[i] is known. rsp
 * (7) must be valid. */
struct flamme_walk_regs {
    uintptr_t r[16];
    uint32_t valid;
};

#define FLAMME_WALK_REG(i) (1u << (i))

/* The index in a ucontext_t's gregs of each register, by DWARF number
 * (x86-64, <sys/ucontext.h> with _GNU_SOURCE). */
#define FLAMME_GREG_OF_DW                                                                         \
    {REG_RAX, REG_RDX, REG_RCX, REG_RBX, REG_RSI, REG_RDI, REG_RBP, REG_RSP,                      \
     REG_R8,  REG_R9,  REG_R10, REG_R11, REG_R12, REG_R13, REG_R14, REG_R15}

/* libc's signal-return trampoline (glibc's __restore_rt), to which every
 * handler installed through libc returns: there the walk steps through the
 * kernel's signal frame into the context the signal interrupted, so a
 * sample inside the program's own signal handler reaches the code that
 * handler interrupted, as perf shows it. note_sigreturn takes it from the
 * restorer the kernel keeps for sig, whose handler libc's sigaction
 * installed, if its code is rt_sigreturn's (called by the sample handler's
 * installer, normal context); until then flamme_walk_sigreturn is 0 and
 * such frames end the walk as broken. */
void flamme_walk_note_sigreturn(int sig);
uintptr_t flamme_walk_sigreturn(void);

/* Walks the stack of the thread whose registers are *regs and whose pc is
 * pc into frames[0..max): frames[0] = pc, then return addresses, leaf
 * first (with a trace, at most trace->max_walked of them walked rather than
 * replayed). leaf = 1 when pc is an interrupted instruction, 0 when it is a
 * return address (a call site). Every direct memory read is checked against
 * ranges[0..nranges) (at most 16 are used); copy (may be NULL) allows
 * checked reads elsewhere.
 * Sets *flags to FLAMME_SAMPLE_TRUNCATED when max was reached,
 * FLAMME_SAMPLE_BROKEN when the chain left the known stacks or a rule
 * needed a register that is not known (a clean end is a zero frame pointer
 * or return address). Returns the frame count. */
uint32_t flamme_walk_regs_sigsafe(uintptr_t pc, const struct flamme_walk_regs *regs, int leaf,
                                  const struct flamme_range *ranges, int nranges,
                                  struct flamme_walk_copy *copy, uint64_t *frames, uint32_t max,
                                  uint32_t *flags);

/* The same, also filling *trace (may be NULL), and replaying from its memo. */
uint32_t flamme_walk_traced_sigsafe(uintptr_t pc, const struct flamme_walk_regs *regs, int leaf,
                                    const struct flamme_range *ranges, int nranges,
                                    struct flamme_walk_copy *copy, uint64_t *frames, uint32_t max,
                                    uint32_t *flags, struct flamme_walk_trace *trace);

/* The same from (pc, sp, fp) only: the other registers are unknown. */
uint32_t flamme_walk_sigsafe(uintptr_t pc, uintptr_t sp, uintptr_t fp,
                             const struct flamme_range *ranges, int nranges,
                             struct flamme_walk_copy *copy, uint64_t *frames, uint32_t max,
                             uint32_t *flags);

#endif
