/*
 * agent/blocking.c — the blocking calls a SIGPROF must not interrupt.
 *
 * select, poll, epoll_wait, nanosleep and their kin fail with EINTR when a
 * signal with a handler arrives while they wait, whatever SA_RESTART says,
 * and OCaml's Unix.select then raises. In wall-clock mode every waiting
 * thread is signalled; in CPU mode a CPU timer can still expire inside the
 * call's kernel time. So these functions are interposed: SIGPROF is held
 * back for the duration of the call. In wall mode the stack is taken on the
 * way in, and the held-back signal, delivered on the way out with the count
 * of periods it stood for, commits that stack (flamme_blocked_begin_nosig
 * in agent/handler.c): the waiting time is still profiled, at the caller of
 * the blocking function.
 * Who: any thread of the program, normal context.
 */
#include <dlfcn.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <time.h>

#include "agent/agent.h"
#include "agent/handler.h"
#include "agent/libc_next.h"

struct held {
    sigset_t old;
    int active;
};

/* Holds SIGPROF back for a blocking call made by the function whose frame
 * is `frame` (its caller is the program); in wall mode, snapshots the
 * caller's stack with `callee` as the leaf. */
static void hold(struct held *h, void *callee, void *frame)
{
    h->active = 0;
    /* Pairs with the release store in the constructor (0 outside OCaml 5
     * programs and in fork children: nothing to hold back). */
    if (!atomic_load_explicit(&flamme_agent_loaded, memory_order_acquire))
        return;
    sigset_t prof;
    sigemptyset(&prof);
    sigaddset(&prof, SIGPROF);
    if (pthread_sigmask(SIG_BLOCK, &prof, &h->old) != 0)
        return;
    h->active = 1;
    if (flamme_cfg.wall && !sigismember(&h->old, SIGPROF)) {
        const uintptr_t *f = frame;
        flamme_blocked_begin_nosig((uintptr_t)callee, f[1], (uintptr_t)(f + 2), f[0]);
    }
}

/* Lets SIGPROF through again (a held-back one is handled right here), then
 * drops a snapshot that no signal claimed. Keeps errno. */
static void release(struct held *h)
{
    if (!h->active)
        return;
    pthread_sigmask(SIG_SETMASK, &h->old, NULL);
    flamme_blocked_end_nosig();
}

/* The signal mask a p-variant (pselect, ppoll, epoll_pwait) installs for its
 * wait: the caller's, with SIGPROF held back as well while h is active. */
static const sigset_t *held_mask(const struct held *h, const sigset_t *mask, sigset_t *buf)
{
    if (!h->active || !mask)
        return mask;
    *buf = *mask;
    sigaddset(buf, SIGPROF);
    return buf;
}

/* The next definition of `name` (libc's), found by the constructor. */
#define REAL(type, name)                                                                     \
    static _Atomic(type) real_;                                                              \
    type real = atomic_load_explicit(&real_, memory_order_acquire);                          \
    if (!real) {                                                                             \
        real = (type)flamme_libc_next(name);                                                 \
        /* Pairs with the acquire load above; racing lookups store the same value. */       \
        atomic_store_explicit(&real_, real, memory_order_release);                           \
    }

#define EXPORT __attribute__((visibility("default")))

typedef int (*select_fn)(int, fd_set *, fd_set *, fd_set *, struct timeval *);
EXPORT int select(int n, fd_set *r, fd_set *w, fd_set *e, struct timeval *t)
{
    REAL(select_fn, "select");
    struct held h;
    hold(&h, (void *)real, __builtin_frame_address(0));
    int rc = real(n, r, w, e, t);
    release(&h);
    return rc;
}

typedef int (*pselect_fn)(int, fd_set *, fd_set *, fd_set *, const struct timespec *,
                          const sigset_t *);
EXPORT int pselect(int n, fd_set *r, fd_set *w, fd_set *e, const struct timespec *t,
                   const sigset_t *mask)
{
    REAL(pselect_fn, "pselect");
    struct held h;
    sigset_t m;
    hold(&h, (void *)real, __builtin_frame_address(0));
    mask = held_mask(&h, mask, &m);
    int rc = real(n, r, w, e, t, mask);
    release(&h);
    return rc;
}

typedef int (*poll_fn)(struct pollfd *, nfds_t, int);
EXPORT int poll(struct pollfd *fds, nfds_t n, int timeout)
{
    REAL(poll_fn, "poll");
    struct held h;
    hold(&h, (void *)real, __builtin_frame_address(0));
    int rc = real(fds, n, timeout);
    release(&h);
    return rc;
}

typedef int (*ppoll_fn)(struct pollfd *, nfds_t, const struct timespec *, const sigset_t *);
EXPORT int ppoll(struct pollfd *fds, nfds_t n, const struct timespec *t, const sigset_t *mask)
{
    REAL(ppoll_fn, "ppoll");
    struct held h;
    sigset_t m;
    hold(&h, (void *)real, __builtin_frame_address(0));
    mask = held_mask(&h, mask, &m);
    int rc = real(fds, n, t, mask);
    release(&h);
    return rc;
}

typedef int (*epoll_wait_fn)(int, struct epoll_event *, int, int);
EXPORT int epoll_wait(int fd, struct epoll_event *ev, int max, int timeout)
{
    REAL(epoll_wait_fn, "epoll_wait");
    struct held h;
    hold(&h, (void *)real, __builtin_frame_address(0));
    int rc = real(fd, ev, max, timeout);
    release(&h);
    return rc;
}

typedef int (*epoll_pwait_fn)(int, struct epoll_event *, int, int, const sigset_t *);
EXPORT int epoll_pwait(int fd, struct epoll_event *ev, int max, int timeout, const sigset_t *mask)
{
    REAL(epoll_pwait_fn, "epoll_pwait");
    struct held h;
    sigset_t m;
    hold(&h, (void *)real, __builtin_frame_address(0));
    mask = held_mask(&h, mask, &m);
    int rc = real(fd, ev, max, timeout, mask);
    release(&h);
    return rc;
}

typedef int (*nanosleep_fn)(const struct timespec *, struct timespec *);
EXPORT int nanosleep(const struct timespec *req, struct timespec *rem)
{
    REAL(nanosleep_fn, "nanosleep");
    struct held h;
    hold(&h, (void *)real, __builtin_frame_address(0));
    int rc = real(req, rem);
    release(&h);
    return rc;
}

typedef int (*clock_nanosleep_fn)(clockid_t, int, const struct timespec *, struct timespec *);
EXPORT int clock_nanosleep(clockid_t clk, int flags, const struct timespec *req,
                           struct timespec *rem)
{
    REAL(clock_nanosleep_fn, "clock_nanosleep");
    struct held h;
    hold(&h, (void *)real, __builtin_frame_address(0));
    int rc = real(clk, flags, req, rem);
    release(&h);
    return rc;
}
