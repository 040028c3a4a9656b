/*
 * agent/engine.h — sampling engines: what makes SIGPROF arrive on a thread.
 *   perf    per-thread perf_event task-clock (cpu mode), period in ns: the
 *           asked rate even above the kernel tick (HZ=250 here)
 *   timer   per-thread timer_create on the thread's CPU clock (cpu mode) or
 *           CLOCK_MONOTONIC (wall mode); at most one expiry per tick. In cpu
 *           mode a second, one-shot CLOCK_MONOTONIC timer per thread takes
 *           the samples at due points of its CPU time instead of at ticks
 *           (the dither, engine.c; FLAMME_DITHER=0: at the expiry, its
 *           overruns counted into the sample's weight)
 *   itimer  process-wide setitimer(ITIMER_PROF) (portable, cpu mode only)
 * Every engine counts all of a thread's CPU time, user and kernel: where
 * perf events may not overflow in kernel mode, perf finds the kernel's
 * periods from its events' count.
 * Chosen at start (FLAMME_ENGINE, default auto: perf at any rate where its
 * events may sample the kernel; else timer up to 100 Hz, perf above when the
 * kernel allows events at all; with perf, auto moves a thread that
 * context-switches often to a timer).
 * Arm/disarm run in any thread (start, thread start and exit); the _sigsafe function
 * runs in the handler.
 */
#ifndef FLAMME_AGENT_ENGINE_H
#define FLAMME_AGENT_ENGINE_H
#include <signal.h>
#include <stddef.h>

struct flamme_slot;

enum flamme_engine { FLAMME_ENGINE_PERF = 1, FLAMME_ENGINE_TIMER, FLAMME_ENGINE_ITIMER };

/* The engine in use after flamme_engine_init. */
extern enum flamme_engine flamme_engine;

/* Picks the engine for flamme_cfg (probing perf_event_open on the calling
 * thread when asked for perf or auto). Returns 0, or -1 if no engine works
 * (message printed). Constructor only. */
int flamme_engine_init(void);

/* In a fork child that is profiled, before its start: forgets the
 * parent's event count, process timer and moved threads. */
void flamme_engine_atfork_child(void);

/* Name of the engine ("perf", "timer", "itimer"). */
const char *flamme_engine_name(void);

/* Starts sampling slot s's thread (s->tid) on that thread's own clock; any
 * thread (a start arms the threads that exist from the starting one). For
 * itimer the first call arms the process-wide timer. Returns 0 or -1 (errno). */
int flamme_engine_arm(struct flamme_slot *s);

/* Stops sampling s's thread; any thread. Idempotent. */
void flamme_engine_disarm(struct flamme_slot *s);

/* The periods of a sample the timer engine's dither put off and has not
 * taken yet (0: none), which the caller must place; clears them. The
 * calling thread is s's, with the sample signal blocked. */
unsigned flamme_engine_take_due(struct flamme_slot *s);

/* Whether flamme_engine_review has work: auto chose perf. */
int flamme_engine_reviews(void);

/* Least interval between two reviews of the threads (writer sweeps; a
 * newly armed thread's first reading is taken at the next sweep). */
#define FLAMME_REVIEW_MS 100

/* auto with perf: moves armed slot s's thread to a CPU timer for good when
 * it switched in more than FLAMME_MAX_SWITCH_RATE times per CPU-second
 * since the last review (at least FLAMME_REVIEW_MIN_CPU_MS of CPU ago): a
 * per-thread perf event restarts its hrtimer at each switch-in, a cost
 * such threads pay many times over (doc/design.md, "Engines").
 * baseline_only: only take the first reading of a newly armed thread. Any
 * thread but s's (the reading costs s nothing), under the registry's arm
 * lock; a failure leaves s on perf. */
void flamme_engine_review(struct flamme_slot *s, int baseline_only);

/* How many threads flamme_engine_review moved to a timer so far; writes
 * "<n> <tid>..." (the first 16 tids) to buf. Writer thread. */
unsigned flamme_engine_moved(char *buf, size_t size);

/* How the CPU timers of this run sampled, for INFO engine_timer
 * (doc/format.md): writes "dither <n>" (n: threads a review found
 * sleeping too often for a chain, sampled at expiries) or "tick"
 * (FLAMME_DITHER=0, or no tick resolution known) to buf. Returns 0 when no
 * thread had a CPU timer in CPU mode (nothing written). Writer thread. */
int flamme_engine_timer_info(char *buf, size_t size);

/* Whether the perf engine runs with events that cannot overflow in kernel
 * mode, finding the kernel's periods from their count instead. Any thread. */
int flamme_engine_kernel_counted(void);

/* Process-wide stop (itimer), after every slot was disarmed. */
void flamme_engine_stop(void);

/* *kernel when the engine cannot tell kernel periods from user ones. */
#define FLAMME_KERNEL_UNKNOWN (~0u)

/* Decides whether a sample signal delivered to the thread of slot s (NULL
 * if the thread has none) was sent by the engine for it. Sets *weight to
 * the number of periods the sample stands for (0: none, the periods were
 * counted by an earlier signal; take no sample) and *kernel to how many of
 * them the thread spent in the kernel (perf: each overflow's mode), or
 * FLAMME_KERNEL_UNKNOWN (the timers: their expiry is checked at a tick
 * that does not say where it fell). Either way the signal arrives when the
 * thread returns to user space: kernel periods land on the user stack that
 * entered the kernel. slept: the thread was asleep in a system call when
 * the signal came (it cut the call short, or was held back over it; not
 * a call the thread was preempted in).
 * async-signal-safe: yes. */
int flamme_engine_accept_sigsafe(struct flamme_slot *s, const siginfo_t *si, int slept,
                                 unsigned *weight,
                                 unsigned *kernel);

#endif
