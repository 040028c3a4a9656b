/*
 * agent/bigheap.h — the agent's blocks, mapped by the agent itself (see
 * bigheap.c for why: glibc's thresholds, and page faults). The allocation
 * functions themselves are reached through the linker's --wrap of malloc,
 * calloc, realloc and free in libflamme.so (mk/agent.mk); nothing calls
 * them by name.
 * async-signal-safe: no.
 */
#ifndef FLAMME_AGENT_BIGHEAP_H
#define FLAMME_AGENT_BIGHEAP_H

/* In a fork child: the lock may have been held by a thread that is gone.
 * Returns 1 if it was free at the fork, else 0. */
int flamme_bigheap_atfork_child(void);

#endif
