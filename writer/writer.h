/*
 * writer/writer.h — the writer thread: drains every thread's ring, interns
 * frames and stacks, symbolizes each new address once, and streams the
 * profile file in compressed chunks (at most ~1 s of samples behind, so a
 * killed process keeps all but its last second).
 *
 * Who: started by the agent constructor, stopped by the agent's exit
 * handler. Runs as its own thread with every signal blocked. What it needs
 * of the agent comes through the host it is started with
 * (writer/writer_host.h); the agent calls the functions below.
 */
#ifndef FLAMME_WRITER_WRITER_H
#define FLAMME_WRITER_WRITER_H
#include <stdint.h>

#include "writer/writer_host.h"

/* Opens fd as the profile and starts the writer thread, which serves host
 * (copied) until flamme_writer_stop. cmdline (may be NULL) is stored as
 * INFO. Takes ownership of fd, also on failure. Returns 0, or -1 (a message
 * was printed through host->warn). */
int flamme_writer_start(const struct flamme_writer_host *host, int fd, const char *path,
                        const char *cmdline);

/* Allocation profiling started (rate, live tracking) or stopped (rate 0):
 * recorded as INFO alloc_rate / alloc_live, also in each later segment
 * that gets allocation records. Any thread, normal context. */
void flamme_writer_alloc_mode(double rate, int live);

/* The sampler named by INFO alloc_method ("heapfill"; "memprof" until
 * set): a string that lives as long as the process. Before the start. */
void flamme_writer_alloc_method(const char *method);

/* Final drain, END record, close; joins the thread. Fills the totals for the
 * summary. Returns 0, or -1 if the profile could not be written completely.
 * Call once, after sampling stopped. */
int flamme_writer_stop(uint64_t *samples, uint64_t *lost, uint32_t *threads);

/* Before an exec: stops the writer thread (after its final drain) and
 * completes the file (EXIT exec, END) without closing it, remembering its
 * size before END; the totals so far go to samples, lost and threads.
 * Returns 0, or -1 if the file could not be completed. Sampling must be
 * stopped. */
int flamme_writer_exec_checkpoint(uint64_t *samples, uint64_t *lost, uint32_t *threads);

/* The exec failed: cuts the file back to before END and restarts the writer
 * thread, so the profile goes on as one. Returns 0, or -1 (the file stays
 * as the checkpoint left it, complete). */
int flamme_writer_exec_resume(void);

/* After flamme_writer_wait_finished_sigsafe returned 1: whether the
 * profile holds no sample and counted no loss. async-signal-safe: yes. */
int flamme_writer_empty_sigsafe(void);

/* Fork, while the agent follows forks (agent/agent.c): the prepare
 * handler waits for the writer's sweep in progress and holds the next one
 * off until the parent handler, so the child copies the writer's tables
 * whole. The child handler makes the writer's locks usable again; with
 * follow (the fork was prepared, and the child is to be profiled) it
 * forgets the parent's writer (its thread is not in the child; the
 * child's copies of its descriptors are closed) so that
 * flamme_writer_start can begin the child's own profile. The forking
 * thread, normal context. */
void flamme_writer_fork_prepare(void);
void flamme_writer_fork_parent(void);
void flamme_writer_atfork_child(int follow);

/* Records how the process is ending (enum flamme_exit_how and its code),
 * written as the EXIT record when the profile is completed; a profile
 * stopped without it says FLAMME_EXIT_STOPPED. async-signal-safe: yes. */
void flamme_writer_set_end_sigsafe(int how, int code);

/* For a process about to die of a signal: asks the writer to drain what
 * the rings hold and complete the file now. async-signal-safe: yes. */
void flamme_writer_finish_sigsafe(void);

/* Waits up to timeout_ms for that; returns 1 once the file is complete.
 * async-signal-safe: yes. */
int flamme_writer_wait_finished_sigsafe(int timeout_ms);

/* 1 from flamme_writer_start until flamme_writer_stop has joined the
 * writer: DEAD slots are then the writer's to drain and recycle. */
int flamme_writer_active(void);

/* The program loaded or unloaded a library (agent/dl.c, normal context, any
 * thread): builds the unwind rows of new mappings now, in the caller's
 * thread, and has the writer re-read the mappings before its next drain. */
void flamme_writer_libraries_changed(void);

/* The program looks a symbol up (agent/dl.c's dlsym, normal context, any
 * thread): if the loader loaded anything since the last check — a library
 * opened by a bare name, which dlopen forwards untouched — does what
 * flamme_writer_libraries_changed does, before the program can call into
 * it. One dl_iterate_phdr otherwise. No-op while the writer is not running. */
void flamme_writer_loader_check(void);

/* Waits (at most timeout_ms) until the writer has drained every ring and
 * named every frame in it, with the mappings re-read: called before a
 * library is unloaded, so that its frames keep their names. Normal context,
 * not the writer thread. Returns 0, or -1 (timeout, writer not running). */
int flamme_writer_sync(int timeout_ms);

/* The path of the file being (or last) written: with a period
 * (host->period_ns), the current segment's. Read after
 * flamme_writer_stop, or by the writer thread. */
const char *flamme_writer_path(void);

/* Asks the writer to drain now (a ring is filling up).
 * async-signal-safe: yes. */
void flamme_writer_wake_sigsafe(void);

/* A record was just put in a ring: wakes the writer if its sweeps found
 * nothing lately and it now waits longer between them (so the program's
 * first samples after a pause are drained, and a library it loaded picked
 * up, as soon as while it ran); otherwise an atomic load and nothing.
 * async-signal-safe: yes. */
void flamme_writer_activity_sigsafe(void);

#endif
