/*
 * agent/threads.h — the thread registry: one slot per live thread of the
 * profiled process (main, domains, systhreads, runtime helpers, C threads),
 * holding its ring, its CPU-time timer and what the stack walker needs.
 *
 * Who: a thread registers itself (constructor for the main thread, the
 * pthread_create trampoline for others) and unregisters at exit. The
 * sampling-signal handler reads its own slot through a TLS pointer. The writer
 * thread scans all slots, drains rings and recycles DEAD slots.
 * Slot life: FREE -> CLAIMED (registering thread fills it) -> LIVE
 * -> DEAD (thread exited, ring may hold samples) -> FREE (writer drained it).
 */
#ifndef FLAMME_AGENT_THREADS_H
#define FLAMME_AGENT_THREADS_H
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "agent/cfi.h"
#include "agent/memo.h"
#include "common/clock.h"
#include "common/fds.h"
#include "runtime_hooks/ocaml_rt.h"
#include "common/ring.h"

#define FLAMME_MAX_THREADS 4096
#define FLAMME_SLOT_RANGES 8
#define FLAMME_SCRATCH_WORDS 512
/* Frames of a thread's last sample kept for its final one (see last_frames). */
#define FLAMME_LAST_FRAMES 256

enum { FLAMME_SLOT_FREE = 0, FLAMME_SLOT_CLAIMED, FLAMME_SLOT_LIVE, FLAMME_SLOT_DEAD };

struct flamme_slot {
    _Atomic int state;
    pid_t tid;
    int is_main;
    _Atomic int armed;         /* engine armed for this thread (engine.c) */
    int perf_fd;               /* perf engine: the thread's event, or -1 */
    struct flamme_fd_id perf_id; /* what perf_fd was when opened (common/fds.h) */
    int perf_fallback;         /* perf engine past its cap, or moved off perf by auto for its context
                                  switches (flamme_engine_review): this thread has a timer */
    void *perf_meta;           /* perf engine: the event's mapped buffer, or NULL */
    size_t perf_map_len;
    int perf_first;            /* perf engine, handler-private: the first overflow's delay in ns (a random
                                  part of a period) while the period is not set yet, else 0 */
    unsigned perf_used;        /* perf engine, handler-private: overflows counted since the last refresh */
    int64_t perf_mark;         /* perf engine, handler-private: thread CPU ns from which perf_given counts
                                  (the last refresh; at arming, one period before the first overflow) */
    uint64_t perf_given;       /* perf engine, handler-private: weight given since perf_mark */
    int64_t perf_grid;         /* perf engine with kernel overflows, handler-private: thread CPU ns
                                  where the overflow counted last would be, a period apart from the
                                  first (0: not known; perf_next_sigsafe) */
    unsigned perf_since;       /* ... and the overflows counted since the gap was last set */
    uint64_t perf_count;       /* perf engine without kernel sampling, handler-private: the event's
                                  count (the thread's CPU ns, kernel included) in the last sample record
                                  consumed, 0 before the first (engine.c, perf_consume) */
    int sig_blocked;           /* the sample signal blocked in the thread: no timer */
    int unblocked;             /* started with it blocked, unblocked by the agent */
    uintptr_t start_routine;   /* what pthread_create was asked to run (0 for main) */
    void **caml_state_slot;    /* this thread's `caml_state` TLS variable, or NULL */
    const void *last_ds;       /* handler-private: last non-NULL caml_state seen */
    struct flamme_range ocaml_ranges[FLAMME_SLOT_RANGES]; /* handler-private: last good OCaml stacks */
    struct flamme_ocaml_chain chain; /* handler-private: the effect-handler chain last found */
    int n_ocaml_ranges;
    int32_t last_domain;       /* handler-private: last domain id seen, or the creator's */
    uint64_t scratch[FLAMME_SCRATCH_WORDS]; /* handler-private: stack copied by checked reads */
    /* Handler-private: the walk's memo of unwind rows, mapped after the
     * stack memo (NULL until then: rows are looked up uncached). */
    struct flamme_cfi_cache *cfi_cache;
    /* Handler-private: the thread's last whole stack (agent/memo.h), which
     * its next walk may replay frames from; mapped with the ring at the
     * slot's first arming and kept for its next threads (memo.frame NULL
     * if that failed). */
    struct flamme_memo memo;
    /* The interposed call the thread is in while it holds the sample signal
     * back (agent/blocking.c), from before the signal is held until after
     * it is let in again: a signal delivered meanwhile (at the unmask, for
     * the periods the call took) is the call's, at held_callee under the
     * interposer's caller (held_ret, held_sp, held_fp), not libc's
     * pthread_sigmask under the interposer. held_callee 0: none. Written by
     * the thread itself, read by its handler (signal fences). */
    uintptr_t held_callee, held_ret, held_sp, held_fp;
    /* Sample signals the thread's handler kept (not the program's): a
     * count the thread compares across a call it did not hold the signal
     * back for (agent/blocking.c, NOWAIT_CALL). Handler-written, read by
     * the thread (volatile: a signal may move it between the reads). */
    volatile unsigned sample_sigs;
    /* Interposed blocking calls made while not profiling (agent/blocking.c):
     * 0 none, 1 the thread is in one without the signal held back, 2 and a
     * start deferred arming it (seq_cst, see flamme_thread_call_end). */
    _Atomic int in_call;
    _Atomic int arm_pending;   /* arming deferred by a call, for the writer to do */
    /* The thread itself writes its ring in normal context (agent/alloc.c):
     * its handler takes no sample meanwhile (relaxed + signal fences: the
     * handler runs on this thread only). */
    /* Set by the thread itself while it arms its own engine; its handler
     * then takes no sample (the stack would be flamme's arming code, the
     * first overflow falling in the ioctl that enables it) and keeps the
     * weight in arming_carry for the thread's next sample. */
    volatile sig_atomic_t self_arming;
    /* Above 0 while the thread itself does the agent's work with sampling
     * on (unwind rows for a library it just loaded, agent/dl.c; the end of
     * a start, after the threads are armed): its handler drops those
     * periods, flamme's own time, instead of sampling flamme's frames. A
     * depth (flamme_thread_agent_enter/leave), written by the thread only. */
    volatile sig_atomic_t in_agent;
    /* The writer's CPU time beyond its share of the budget, charged to this
     * thread's (writer: fetch_add; the handler takes it with an exchange
     * into its allowance, agent/budget.h). Relaxed: a count, nothing else
     * is published with it. */
    _Atomic uint64_t writer_debt_ns;
    /* Periods the handler did not sample (self_arming, or hardly any room
     * left on the alternate signal stack), added to the next sample.
     * Handler-private. */
    unsigned arming_carry;
    _Atomic int ring_busy;
    _Atomic uint64_t ring_busy_skipped; /* handler: samples skipped for it (statistics) */
    uintptr_t stack_lo, stack_hi; /* the thread's system stack */
    timer_t timer;
    /* Timer engine: the one-shot monotonic timer that moves each sample off
     * the tick (engine.c, "dither"), and its handler-private state. */
    timer_t dither_timer;
    int dither_ok;             /* dither_timer exists, made for thread dither_tid */
    pid_t dither_tid;
    int dither_state;          /* engine.c: DITHER_OFF, _RUN, _SLEEP */
    int switcher_seen;         /* a review found it sleeping too often once (writer only) */
    int dither_switcher;       /* the last review found the thread sleeping too often for a chain
                                  (atomic, relaxed: the writer sets it, the handler reads it) */
    int64_t dither_acct;       /* thread CPU ns where the period not yet sampled for begins (0: none yet) */
    int64_t dither_mark;       /* thread CPU ns of that period's mark, at a random point of it */
    int64_t dither_due;        /* thread CPU ns of the next due point */
    int64_t dither_cpu;        /* thread CPU ns when the dither timer was set */
    int64_t dither_delay;      /* ns it was set for */
    int64_t dither_first_cpu;  /* thread CPU ns the first sample is due at, set by a self-arming
                                  (0: none; release store at arming, acquire load in the handler) */
    uint64_t dither_rng;
    /* Timer engine with dither, handler-private: the last sample's frames
     * (FLAMME_LAST_FRAMES words, mapped with the memo), where a due sample
     * goes when the thread ends before it is taken (flamme_handler_flush_nosig). */
    uint64_t *last_frames;
    uint32_t last_n, last_flags;
    struct flamme_ring *ring;  /* mapped at the slot's first arming, kept for its next threads
                                * (release; the writer acquires) */
    _Atomic uint64_t lost;     /* handler: +1 per sample dropped (relaxed; writer reads deltas) */
    _Atomic uint64_t taken;    /* handler: +1 per sample written (relaxed, statistics) */
    uint64_t start_ns, end_ns; /* CLOCK_MONOTONIC */
    uint64_t writer_lost_seen; /* writer-private */
    int writer_announced;      /* writer-private: THREAD record emitted */
    int32_t writer_domain;     /* writer-private: domain id announced */
    /* Under arm_lock (flamme_engine_arm, flamme_engine_review): the
     * thread's CPU ns and switch-ins (schedstat) at the last review; cpu 0:
     * none yet. And its CPU ns and sleeps (voluntary switches) when they
     * were last read; sleep_cpu 0: not read. */
    uint64_t review_cpu_ns, review_switches;
    uint64_t review_sleep_cpu_ns, review_sleeps;
};

extern struct flamme_slot flamme_slots[FLAMME_MAX_THREADS];
/* Highest slot index ever claimed + 1 (release on claim; writer acquires). */
extern _Atomic int flamme_slots_hwm;

/* Registers the calling thread: claims a slot, records its stack bounds and
 * caml_state location, notes the domain of the thread that created it (a
 * systhread's domain until its own samples say), and (unless the sample
 * signal is blocked in it) arms the sampling engine if profiling is on; the
 * ring is mapped at the slot's first arming. Returns the slot, or NULL if the table
 * is full (the thread then runs unprofiled). Any thread. */
struct flamme_slot *flamme_thread_register(int is_main, uintptr_t start_routine,
                                           int32_t creator_domain);

/* Disarms and releases the calling thread's slot: the writer frees it once
 * drained or, when no profile is being written, the thread frees it itself
 * (slots are then never used up by threads that came and went). Safe to
 * call with NULL. */
void flamme_thread_unregister(struct flamme_slot *s);

/* The calling thread (the main thread, or one started through the
 * pthread_create wrapper) is ending: returns how many such threads are
 * still running. */
int flamme_threads_leave(void);

/* Takes a DEAD slot for recycling (DEAD -> CLAIMED). Returns 1 if the
 * caller now owns it (it then empties the ring and publishes FREE with
 * flamme_slot_release), 0 if someone else took it. Any thread. */
int flamme_slot_take_dead(struct flamme_slot *s);

/* Empties a taken slot's ring and memo (kept mapped for its next thread)
 * and makes the slot FREE. */
void flamme_slot_release(struct flamme_slot *s);

/* Frees every DEAD slot no writer will drain (after a writer stopped). */
void flamme_threads_recycle_dead(void);

/* Arms the sampling engine on every live thread that is not yet armed
 * (at start: threads that existed before). Any thread. */
void flamme_threads_arm_all(void);

/* Disarms every live thread (at stop: no more samples). Any thread. */
void flamme_threads_disarm_all(void);

/* Creates a thread of the agent's own (the writer, the table builder),
 * neither sampled nor counted, on a stack the agent maps (see threads.c:
 * its pthread_t is no former thread's); flamme_thread_join_own joins it
 * and unmaps the stack. Return 0 or an errno. Normal context. */
int flamme_thread_create_own(pthread_t *t, void *(*fn)(void *), void *arg);
int flamme_thread_join_own(pthread_t t);

/* A fork the agent follows (agent/agent.c): the prepare handler waits for
 * an arming or disarming in progress and holds the next off until the
 * parent handler (or the child's), so the child copies whole slots.
 * Returns 1, or 0 if the lock could not be had (common/forkchild.h). */
int flamme_threads_fork_prepare(void);
void flamme_threads_fork_parent(void);

/* In a fork child (the forking thread, before fork returns): the
 * registry's lock may have been held by a thread that does not exist
 * there (held: the forking thread's own, from the prepare handler); make
 * it usable again, forget every slot's engine and close the inherited
 * perf events. With follow, the child is to be profiled: every other
 * thread's slot is freed and the calling thread's starts over as the main
 * thread of a new process (no samples, no ring yet). Returns 1 if the
 * lock was free at the fork (or held), else 0. */
int flamme_threads_atfork_child(int held, int follow);
/* Ends the calling thread's unheld blocking call on slot s (NULL: none):
 * if a start deferred arming the thread meanwhile, hands that to the
 * writer. async-signal-safe: yes. */
void flamme_thread_call_end(struct flamme_slot *s);

/* Arms the live threads whose arming a blocking call deferred. Writer
 * thread, every sweep. */
void flamme_threads_arm_pending(void);

/* Lets the engine review the armed live threads (flamme_engine_review):
 * auto moves those that switch too often off perf. Writer thread, every
 * sweep; reviews at most every FLAMME_REVIEW_MS, and takes the first
 * reading of newly armed threads in between. */
void flamme_threads_review_engine(void);

/* The calling thread's slot, or NULL. async-signal-safe: yes. */
struct flamme_slot *flamme_thread_self_sigsafe(void);

/* The calling thread starts / stops doing the agent's work with sampling
 * on (in_agent): nestable; nothing for a thread without a slot. */
void flamme_thread_agent_enter(void);
void flamme_thread_agent_leave(void);

/* Places the calling thread's sample that the timer engine's dither put
 * off, if any (flamme_handler_flush_nosig). Normal context, any thread. */
void flamme_thread_flush_self(void);

/* flamme_now_sigsafe, the monotonic clock in ns: common/clock.h. */

/* flamme_cpu_ns_sigsafe, a CPU clock in ns: common/clock.h. */

#endif
