/*
 * runtime_hooks/gc_hooks.h — GC insight from the OCaml runtime's GC timing
 * hooks (caml_minor_gc_begin_hook, caml_major_slice_begin_hook, ... chained,
 * never clobbered): per-thread "in GC" state for the sample handler, and
 * per-domain minor-GC / major-slice durations for the profile.
 *
 * Who: flamme_gc_hooks_install from flamme_agent_start (any thread, once per
 * process); the hooks run on OCaml threads in normal context; the handler
 * calls flamme_gc_flags_sigsafe; the writer thread calls flamme_gc_drain.
 */
#ifndef FLAMME_RUNTIME_HOOKS_GC_HOOKS_H
#define FLAMME_RUNTIME_HOOKS_GC_HOOKS_H
#include <stdint.h>

#include "common/profile.h"

/* Looks up the runtime's hook variables (constructor only: the loader is
 * not called later, see flamme_ocaml_resolve). */
void flamme_gc_hooks_resolve(void);

/* In a fork child: makes the install lock usable again (its holder may
 * not exist there). With follow (the child is profiled), the parent's
 * events still buffered are dropped and the buffers of its other threads
 * freed. Returns 1 if the lock was free at the fork, else 0. */
int flamme_gc_hooks_atfork_child(int follow);

/* Chains the runtime's GC timing hooks found by flamme_gc_hooks_resolve
 * (idempotent). Returns 0, or -1 when
 * the runtime does not export them. */
int flamme_gc_hooks_install(void);

/* 1: the hooks take heap-fill allocation samples (doc/design.md). Set
 * before a start. */
extern _Atomic int flamme_gc_heapfill;

/* 1 when the running release's heap-fill counters are known (5.3-5.5),
 * 0 otherwise (5.1). After flamme_ocaml_check_runtime. Any thread. */
int flamme_gc_heapfill_supported(void);

/* FLAMME_SAMPLE_GC_* bits for the calling thread right now.
 * async-signal-safe: yes. */
uint32_t flamme_gc_flags_sigsafe(void);

/* Time (ns) and number of times the major-slice hooks were paused because
 * the runtime ran major slices faster than they could be followed at no
 * cost (see gc_hooks.c). Writer thread. */
void flamme_gc_major_paused(uint64_t *total_ns, uint64_t *n);

/* Writes the GC events recorded since the last call into the profile.
 * Also pauses and resumes the major-slice hooks by their rate. Writer
 * thread only. Returns 0 or -1 (write error). */
int flamme_gc_drain(flamme_pw *pw);

#endif
