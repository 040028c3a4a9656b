/*
 * agent/handler.h — the sampling-signal handler (the walker: agent/walk.h).
 * Installed by agent/agent.c at start-up; runs on the interrupted thread's
 * alternate signal stack (OCaml installs one on every thread that runs
 * OCaml: 8 KiB up to 5.4, sysconf(_SC_SIGSTKSZ) from 5.5), so it keeps its
 * own stack use small.
 */
#ifndef FLAMME_AGENT_HANDLER_H
#define FLAMME_AGENT_HANDLER_H
#include <stdint.h>

#include "agent/walk.h"
#include "runtime_hooks/ocaml_rt.h"

/* The signal the engines send to a thread to take a sample: a real-time
 * signal the program leaves alone (default disposition, not blocked), so the
 * program keeps SIGPROF and ITIMER_PROF to itself; SIGPROF only for the
 * itimer engine, which is ITIMER_PROF by nature. Set by
 * flamme_signal_choose, then by flamme_handler_install. */
extern int flamme_sample_sig;

/* Sets flamme_sample_sig when the agent loads, so that threads registered
 * before a start know which signal to unblock: SIGPROF if itimer, else the
 * first free real-time signal from SIGRTMAX-3 down. Returns 0, or -1 if no
 * real-time signal is free. Constructor only. */
int flamme_signal_choose(int itimer);

/* Notes where the agent's own code is (its library's executable segment),
 * so that a sample interrupting it is dropped as flamme's time: the
 * stretches of the start, the stop and the interposers the agent runs on
 * the program's threads with sampling on. Nothing when the agent is linked
 * into the program (its code is the executable's). Constructor only (a
 * loader call). */
void flamme_handler_note_self(void);

/* Installs the handler (SA_SIGINFO | SA_ONSTACK | SA_RESTART) on the signal
 * the engine needs, once per signal, remembering what was there to forward
 * foreign signals to. The real-time signal chosen at load is checked again
 * (the program may have taken it since; another free one is then taken).
 * Returns 0, or -1 (errno; EBUSY: no free real-time signal). Under the
 * start lock. */
int flamme_handler_install(int itimer);

/* Whether the handler is still installed on flamme_sample_sig (the program
 * may have replaced it after the start). Any thread. */
int flamme_handler_still_ours(void);

/* Whether the program uses SIGPROF (a handler that is not ours) or has
 * ITIMER_PROF running; the itimer engine then stays off. Not while the
 * itimer engine runs. Any thread. */
int flamme_handler_prof_taken(void);

/* Median and 99th percentile of the handler's own run time in ns (20 ns
 * resolution) over the n samples since the last reset. Any thread. */
void flamme_handler_cost(uint64_t *p50, uint64_t *p99, uint64_t *n);
void flamme_handler_cost_reset(void);

/* Samples of the interrupted pc alone since the agent loaded: the sample
 * signal came inside another handler on the alternate signal stack, with
 * no room left there for a walk. Any thread. */
uint64_t flamme_handler_pc_only(void);

/* The thread of slot s ends (or sampling stops) with a sample due that
 * the dithered timer engine did not take yet (weight periods, from
 * flamme_engine_take_due): commits them on the frames of the thread's last
 * sample, the nearest stack known; with none, on the thread's start
 * routine alone (the program's entry point for the main thread),
 * truncated. Lost (counted) only when the ring has no room. The periods
 * carried for a next sample (arming_carry) are dropped: doc/design.md. The
 * calling thread is s's, in normal context with the sample signal blocked.
 * Not async-signal-safe. */
struct flamme_slot;
void flamme_handler_flush_nosig(struct flamme_slot *s, unsigned weight);

/* Normal context, on the thread of slot s, which holds its ring against
 * its own handler (ring_busy: the walk uses the slot's scratch): walks the
 * caller's stack from its return address ret, stack pointer sp (after the
 * return) and frame pointer fp into frames[0..max). Sets *domain and
 * *flags (FLAMME_SAMPLE_TRUNCATED / BROKEN). Returns the frame count. */
struct flamme_slot;
uint32_t flamme_walk_caller_nosig(struct flamme_slot *s, uintptr_t ret, uintptr_t sp, uintptr_t fp,
                                  uint64_t *frames, uint32_t max, int32_t *domain, uint32_t *flags);

#endif
