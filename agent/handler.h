/*
 * agent/handler.h — the SIGPROF handler (the walker: agent/walk.h).
 * Installed by agent/agent.c at start-up; runs on the interrupted thread's
 * alternate signal stack (OCaml installs an 8 KiB one on every thread that
 * runs OCaml), so it keeps its own stack use small.
 */
#ifndef FLAMME_AGENT_HANDLER_H
#define FLAMME_AGENT_HANDLER_H
#include <stdint.h>

#include "agent/walk.h"
#include "runtime_hooks/ocaml_rt.h"

/* Installs the SIGPROF handler (SA_SIGINFO | SA_ONSTACK | SA_RESTART),
 * remembering any previous one to forward foreign SIGPROFs to.
 * Returns 0, or -1 (errno). Constructor only. */
int flamme_handler_install(void);

/* Median and 99th percentile of the handler's own run time in ns (20 ns
 * resolution) over the n samples since the last reset. Any thread. */
void flamme_handler_cost(uint64_t *p50, uint64_t *p99, uint64_t *n);
void flamme_handler_cost_reset(void);

/* Wall mode, around a blocking call (agent/blocking.c), with SIGPROF blocked
 * in the calling thread: begin walks the caller's stack (callee = the
 * blocking function's address, ret/sp/fp = the caller's return address,
 * stack and frame pointers) into the thread's ring without committing it;
 * a SIGPROF held back during the call then commits that stack, weighted by
 * the periods the call lasted, instead of taking a new sample. end drops
 * the snapshot if no signal came. begin returns 1 if a snapshot was taken.
 * Not async-signal-safe in name only: both run with SIGPROF blocked, in
 * normal context, and touch only the calling thread's slot and ring. */
int flamme_blocked_begin_nosig(uintptr_t callee, uintptr_t ret, uintptr_t sp, uintptr_t fp);
void flamme_blocked_end_nosig(void);

/* Ring words of one sample record before its frames. */
#define FLAMME_SAMPLE_HDR_WORDS 3

#endif
