/*
 * agent/agent.h — process-wide agent state shared by the agent's modules.
 * Written once by the start-up constructor (before any other thread of the
 * agent exists), then read-only except `flamme_agent_sampling`.
 */
#ifndef FLAMME_AGENT_AGENT_H
#define FLAMME_AGENT_AGENT_H
#include <stdatomic.h>
#include <sys/types.h>

#include "agent/config.h"

extern struct flamme_config flamme_cfg;
/* 1 while samples are taken: set (release) by the constructor after the
 * handler is installed, cleared at exit before timers are deleted; the
 * handler and pthread_create wrapper load it (acquire). */
extern _Atomic int flamme_agent_sampling;
/* 1 once the constructor found an OCaml 5 runtime (threads are then
 * registered); 0 in other processes and fork children. Release/acquire
 * like flamme_agent_sampling. */
extern _Atomic int flamme_agent_loaded;
/* pid of the process that owns the profile (a forked child differs). */
extern pid_t flamme_agent_pid;

/* A registered thread ended and `left` registered threads are still
 * running: once the main thread has called pthread_exit, the last one to
 * end completes the profile (the agent's writer thread would otherwise keep
 * the process alive). The exiting thread, normal context. */
void flamme_agent_thread_exited(int left);

/* Creates the profile file at path (common/outfile.h; with FLAMME_EXCL an
 * existing file makes it PATH.<pid>; a name an earlier image of this
 * process (before an exec) or an earlier process with this pid took is
 * numbered .2, .3, ... (before a final .flm without FLAMME_EXCL); the name
 * used is written back into path). Returns
 * the fd, or -1 with errno. Any thread but a signal handler. */
int flamme_agent_open_output(char *path, size_t cap);

/* Prints "flamme: <msg>" on stderr unless FLAMME_QUIET (errors: always). */
void flamme_agent_warn(int always, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
