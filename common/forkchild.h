/*
 * common/forkchild.h — what a fork child can tell of the agent's locks.
 *
 * Only the forking thread lives on in a fork child; a mutex another thread
 * held at the fork stays locked there for good, and what it guarded may
 * be half changed. The agent follows a fork (profiles the child) only
 * when every lock it relies on was free at that instant. Called by the
 * atfork child handlers of agent/, writer/ and runtime_hooks/ (the
 * forking thread, in the child, before fork returns). Not
 * async-signal-safe (nor is anything an atfork handler runs).
 */
#ifndef FLAMME_COMMON_FORKCHILD_H
#define FLAMME_COMMON_FORKCHILD_H
#include <pthread.h>
#include <time.h>

/* In a fork child: makes m usable again and returns 1 if it was free at
 * the fork, 0 if a thread that is gone held it (what it guards may be
 * inconsistent). */
static inline int flamme_mutex_reset_child(pthread_mutex_t *m)
{
    int was_free = pthread_mutex_trylock(m) == 0;
    if (was_free)
        pthread_mutex_unlock(m);
    else
        pthread_mutex_init(m, NULL);
    return was_free;
}

/* In a fork's prepare handler: takes m, waiting at most 2 s. Returns 1,
 * or 0 if it could not be had: held by the forking thread itself (a fork
 * from a signal handler that interrupted the agent) or that long by
 * another; the fork then goes on without following the child. */
static inline int flamme_mutex_lock_for_fork(pthread_mutex_t *m)
{
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += 2;
    return pthread_mutex_timedlock(m, &dl) == 0;
}

#endif
