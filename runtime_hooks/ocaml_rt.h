/*
 * runtime_hooks/ocaml_rt.h — everything the agent knows about OCaml 5.1–5.3
 * runtime internals: how to find a thread's domain state, the layout of
 * caml_domain_state / stack_info / stack_handler, and the OCaml stack ranges
 * a frame-pointer walk may read. (Offsets checked against the 5.3.0 headers,
 * runtime/caml/domain_state.tbl and fiber.h of the compiler make deps builds.)
 *
 * Called by: agent/threads.c at thread registration (any thread, not a
 * handler) and agent/handler.c from the SIGPROF handler (_sigsafe functions).
 */
#ifndef FLAMME_RUNTIME_HOOKS_OCAML_RT_H
#define FLAMME_RUNTIME_HOOKS_OCAML_RT_H
#include <stdint.h>
#include <sys/uio.h>

struct flamme_range {
    uintptr_t lo, hi; /* [lo, hi) */
};

/* Stacks of an effect-handler chain a thread's samples remember, and how
 * many of them one system call checks. */
#define FLAMME_CHAIN_MAX 64
#define FLAMME_CHAIN_BATCH 16

/* The effect-handler chain a thread's last sample found. Interrupted in C,
 * a sample reads each stack descriptor of the chain with checked reads
 * (the runtime may be freeing one), two per stack; the stacks it expects
 * from this memory are checked together, with one system call, and only
 * where the chain changed is it read stack by stack. Handler-private, one
 * per thread (agent/threads.h); zeroed memory is an empty one. */
struct flamme_ocaml_chain {
    struct flamme_range r[2][FLAMME_CHAIN_MAX]; /* current stack first */
    int n[2];
    int w; /* the half the present sample writes; the other is the guess */
    struct iovec iov[2 * FLAMME_CHAIN_BATCH]; /* scratch */
    uintptr_t got[2 * FLAMME_CHAIN_BATCH];    /* scratch */
    /* A callback from C (caml_callback*) takes the parent away from the
     * stack it runs on for its duration, keeping it in a continuation
     * block among the local roots: the next roots block to look in, which
     * must lie in [sys_lo, sys_hi) and is read plainly in its live part
     * [live_lo, sys_hi) (above the interrupted C code or caml_start_program's
     * link). */
    uintptr_t roots, sys_lo, sys_hi, live_lo;
};

/* Asks the loader, once, everything the agent will need about the runtime:
 * whether the process contains an OCaml 5 native runtime (caml_state and
 * caml_start_program are visible to dlsym), whether it has frame pointers,
 * and where caml_state lives in thread-local storage. The loader is called
 * only here (the constructor): anywhere else it could wait on the lock a
 * dlopen holds while a library's constructor waits on us. Returns 1 if an
 * OCaml 5 runtime is present, else 0. Constructor only. */
int flamme_ocaml_resolve(void);

/* Returns 1 if the OCaml runtime in this process was built with frame
 * pointers (its caml_c_call starts with push %rbp; mov %rsp,%rbp), 0 if not
 * (a default opam switch), -1 without an OCaml runtime. Set by the
 * constructor, only read afterwards. async-signal-safe: yes. */
int flamme_ocaml_has_frame_pointers_sigsafe(void);

/* Address of the calling thread's `caml_state` TLS variable, or NULL when the
 * process has no OCaml runtime. No loader lock (see flamme_ocaml_resolve);
 * may allocate the block of a dynamically loaded runtime: any thread, never
 * from a handler. */
void **flamme_ocaml_state_slot(void);

/* Appends to out[*n] (up to max) the OCaml stack ranges of domain state ds as
 * seen from a thread whose system stack is [sys_lo, sys_hi), interrupted
 * with stack pointer sp: the current stack (or, while the runtime grows
 * it, the new one the C-stack link already names) and each parent stack
 * of the effect-handler chain, each range the
 * stack's whole block (its descriptor, the stack, its handler: the walk
 * reads all three). Rejects ds unless its c_stack lies in the thread's
 * system stack (so another systhread's or a terminating domain's state is
 * never trusted). With direct = 0 the runtime's stack descriptors are read
 * with fault-tolerant reads (system calls), so a stack freed in
 * caml_try_realloc_stack's window is skipped rather than dereferenced;
 * chain (the thread's, may be NULL) makes that one call for the stacks its
 * last sample found. direct = 1 reads them plainly, which the caller may
 * ask for only when the thread was interrupted on an OCaml stack (the
 * runtime frees stacks only while running C on the system stack). Sets
 * *domain to the domain id (or leaves it). When the chain goes on beyond
 * max stacks (handlers nested deeper), *more is the descriptor of the next
 * one (for flamme_ocaml_more_ranges_sigsafe), else 0. pc and rsi are the
 * interrupted thread's (0 when unknown): inside caml_perform, the stack it
 * is leaving, which rsi names, comes first (see performer_range in the
 * .c). Returns the number of ranges added (0 if ds is unusable).
 * async-signal-safe: yes. */
int flamme_ocaml_ranges_sigsafe(const void *ds, uintptr_t sys_lo, uintptr_t sys_hi, uintptr_t sp,
                                int direct, uintptr_t pc, uintptr_t rsi,
                                struct flamme_ocaml_chain *chain, struct flamme_range *out, int max,
                                int32_t *domain, uintptr_t *more);

/* 1 if the OCaml stacks of domain state ds (the calling thread's own
 * caml_state, not one it had before a blocking section) can be read plainly
 * although the thread, interrupted with stack pointer sp, runs C on its
 * system stack [sys_lo, sys_hi): it is inside a C call OCaml code made
 * straight, without the runtime's assembly (a [@@noalloc] external:
 * caml_modify, caml_string_equal, caml_hash, the atomics...). The return
 * address just below the newest C-stack link says which call that is.
 * The runtime frees a stack of the thread's chain only from C it entered
 * through its assembly (caml_call_realloc_stack, caml_c_call: thread and
 * domain ends; caml_runstack frees a fiber no longer in the chain), and a
 * noalloc call can neither reach those nor let another thread of the
 * domain run. Else 0: checked reads. async-signal-safe: yes. */
int flamme_ocaml_stable_sigsafe(const void *ds, uintptr_t sys_lo, uintptr_t sys_hi, uintptr_t sp);

/* The next stacks of an effect-handler chain, from the descriptor *more
 * (as flamme_ocaml_ranges_sigsafe left it) on, read plainly or not as
 * direct says (same rule, same chain memory): writes up to max ranges to
 * out, moves *more along (0 at the chain's end or at a descriptor that
 * does not look like one). Returns the number of ranges written.
 * async-signal-safe: yes. */
int flamme_ocaml_more_ranges_sigsafe(uintptr_t *more, int direct, struct flamme_ocaml_chain *chain,
                                     struct flamme_range *out, int max);

/* Where the handler of the OCaml stack r (as returned by
 * flamme_ocaml_ranges_sigsafe) keeps its parent: a walk whose rows read 0
 * there is on a stack a callback runs on, whose parent is the next range of
 * the chain. async-signal-safe: yes. */
uintptr_t flamme_ocaml_parent_slot_sigsafe(const struct flamme_range *r);

/* The caller of a frame interrupted at the bottom of the OCaml stack r (as
 * returned by flamme_ocaml_ranges_sigsafe), sp within the words
 * caml_runstack put under the fiber's handler: an exception leaving the
 * fiber's computation has popped every frame of the fiber, and the pc is in
 * the code raising it or in caml_runstack's handler for it, whose rows
 * describe a stack pointer 16 bytes lower (the normal return). The caller
 * is caml_runstack's: the parent descriptor is the word at *slot, its
 * saved stack pointer at *mid in it, the CFA *cfa_add above that, and the
 * caller's rbp at CFA + *rbp_at (0: rbp is not saved there). *ra is a
 * return address into caml_runstack to stand for its frame, 0 when pc is
 * in caml_runstack itself (or the address is not there). Returns 1, or 0
 * when the frame is not such a one or the stack has no parent.
 * async-signal-safe: yes. */
int flamme_ocaml_fiber_bottom_sigsafe(const struct flamme_range *r, uintptr_t sp, uintptr_t pc,
                                      uintptr_t *slot, int *mid, int *cfa_add, int *rbp_at,
                                      uintptr_t *ra);

/* The caller of a frame interrupted in caml_runstack after it took the
 * parent's descriptor into a register, on its way back from the fiber:
 * Caml_state names the parent current in the middle of that stretch, and
 * the rows there (the fiber's handler, read at the stack pointer) hold only
 * for the normal return, not for an exception's, 16 bytes higher. The CFA
 * is *cfa_add above the word at *off in the descriptor held by DWARF
 * register *dwreg, the caller's rbp at CFA + *rbp_at (0: not saved there).
 * Returns 1, or 0 when pc is not there. async-signal-safe: yes. */
int flamme_ocaml_runstack_parent_sigsafe(uintptr_t pc, int *dwreg, int *off, int *cfa_add,
                                         int *rbp_at);

/* A frame interrupted in the inlined raise of OCaml code (raise_notrace,
 * or raise built without -g) after it set rsp to the exception's trap: the
 * raising function's frame and those between are gone, and its rows do not
 * hold. *trap is where the trap was (the handler's pc at *trap + 8; rsp is
 * *trap + 16 at the handler). Returns 1, or 0 when pc is not there.
 * Reads the code bytes at and before pc (the thread was executing them).
 * async-signal-safe: yes. */
int flamme_ocaml_inline_raise_sigsafe(uintptr_t pc, uintptr_t sp, uintptr_t *trap);

/* A frame interrupted in caml_start_program on its way back to C after the
 * OCaml code it ran (a callback from C, or the program's main code) raised:
 * its exception handler, and the code it shares with the normal return up
 * to the switch to the C stack, where its rows (an expression read at the
 * stack pointer, or what holds after its ret) do not hold for the
 * exception's stack pointer, 16 bytes higher. Everywhere there the C stack
 * pointer to come back to is in one word: *slot (from sp or r10; r10_known:
 * the interrupted r10 is known), and *resume is the pc whose rows hold once
 * rsp is that pointer. Returns 1, or 0 when pc is not there.
 * async-signal-safe: yes. */
int flamme_ocaml_callback_exit_sigsafe(uintptr_t pc, uintptr_t sp, uintptr_t r10, int r10_known,
                                       uintptr_t *slot, uintptr_t *resume);

/* 1 if pc is the entry of caml_start_program's exception handler: a raise
 * (caml_raise_exn's ret) that goes there goes to that instruction, not
 * back to a call. async-signal-safe: yes. */
int flamme_ocaml_exn_entry_sigsafe(uintptr_t pc);

/* 1 if the OCaml stack r (as returned by flamme_ocaml_ranges_sigsafe) is
 * still a live stack: its descriptor, read fault-tolerantly, still ends at
 * r->hi. async-signal-safe: yes. */
int flamme_ocaml_range_live_sigsafe(const struct flamme_range *r);

/* Domain id of the calling thread's domain state, or -1 (no OCaml runtime,
 * or the thread does not hold a domain). Any thread, not a handler. */
int32_t flamme_ocaml_domain_of_current_thread(void);

/* Copies len bytes at addr into dst without faulting: returns 0, or -1 if
 * the memory is not readable (or cannot be checked: never a direct read).
 * Uses process_vm_readv; where a seccomp filter refuses it, a pipe (write
 * fails with EFAULT on unreadable memory). async-signal-safe: yes. */
int flamme_safe_read_sigsafe(void *dst, uintptr_t addr, unsigned long len);

/* Records the process id used by flamme_safe_read_sigsafe and checks that
 * process_vm_readv works here (else makes the pipe). Constructor. */
void flamme_safe_read_init(void);

/* Makes the pipe once process_vm_readv was refused (a filter installed
 * after the start). Writer thread, every sweep; cheap when nothing to do. */
void flamme_safe_read_prepare_fallback(void);

/* In a fork child: makes the fallback's lock usable again; with follow
 * (the child is profiled), reads name the child's pid and a fallback pipe
 * is made afresh. Returns 1 if the lock was free at the fork, else 0. */
int flamme_safe_read_atfork_child(int follow);

#endif
