/*
 * agent/blocking.c — the blocking calls the sample signal must not interrupt.
 *
 * select, poll, epoll_wait, nanosleep and their kin fail with EINTR when a
 * signal with a handler arrives while they wait, whatever SA_RESTART says,
 * and OCaml's Unix.select then raises; so do glibc's usleep and sleep (whose
 * internal nanosleep no interposer sees), pause, sigsuspend, sigtimedwait,
 * and reads on a socket with a receive timeout (SO_RCVTIMEO). In wall-clock
 * mode every waiting thread is signalled; in CPU mode a CPU timer can still
 * expire inside the call's kernel time. So these functions are interposed:
 * while profiling, the sample signal is held back for the duration of the
 * call. In wall mode the stack is taken on the way in, and the held-back
 * signal, delivered on the way out with the count of periods it stood for,
 * commits that stack (flamme_blocked_begin_nosig in agent/handler.c): the
 * waiting time is still profiled, at the caller of the blocking function.
 *
 * While not profiling a call costs no system call: the thread marks itself
 * as in an unheld call instead, and a start that would arm it meanwhile
 * leaves the arming to the writer once the call is over
 * (flamme_thread_defer_arm in agent/threads.c).
 * Who: any thread of the program, normal context (or a program's signal
 * handler: an inner call leaves the outer call's state alone).
 */
#include <dlfcn.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "agent/agent.h"
#include "agent/engine.h"
#include "agent/handler.h"
#include "agent/libc_next.h"
#include "agent/threads.h"

struct held {
    sigset_t old;
    struct flamme_slot *s; /* the caller's slot when it owns s->in_call, else NULL */
    int active;            /* the signal is held back (old is the mask to restore) */
    int snap;              /* this call took the wall-mode snapshot */
};

/* Holds the sample signal back for a blocking call made by the function
 * whose frame is `frame` (its caller is the program) when profiling; in wall
 * mode, snapshots the caller's stack with `callee` as the leaf. When not
 * profiling, only marks the thread as in an unheld call. */
static void hold(struct held *h, void *callee, void *frame)
{
    h->active = h->snap = 0;
    h->s = NULL;
    /* Pairs with the release store in the constructor (0 outside OCaml 5
     * programs and in fork children: nothing to hold back). */
    if (!atomic_load_explicit(&flamme_agent_loaded, memory_order_acquire))
        return;
    struct flamme_slot *s = flamme_thread_self_sigsafe();
    /* A thread without a slot (the writer) gets no signal of a per-thread
     * engine. */
    if (!s && flamme_engine != FLAMME_ENGINE_ITIMER)
        return;
    if (s && atomic_load_explicit(&s->in_call, memory_order_relaxed) == 0) {
        /* seq_cst store then seq_cst load, against the start's store of
         * flamme_agent_sampling then its CAS of in_call in the arming
         * (threads.c): either this call sees sampling on and holds the
         * signal, or the arming sees the call and defers. */
        atomic_store(&s->in_call, 1);
        h->s = s;
    }
    if (!atomic_load(&flamme_agent_sampling))
        return;
    sigset_t prof;
    sigemptyset(&prof);
    sigaddset(&prof, flamme_sample_sig);
    if (pthread_sigmask(SIG_BLOCK, &prof, &h->old) == 0) {
        h->active = 1;
        if (flamme_cfg.wall && !sigismember(&h->old, flamme_sample_sig)) {
            const uintptr_t *f = frame;
            h->snap = flamme_blocked_begin_nosig((uintptr_t)callee, f[1], (uintptr_t)(f + 2), f[0]);
        }
    }
    /* Held (or unable to hold): the thread may be armed from now on. */
    flamme_thread_call_end(h->s);
    h->s = NULL;
}

/* Lets the signal through again (a held-back one is handled right here),
 * then drops the snapshot this call took if no signal claimed it; or ends
 * an unheld call. Keeps errno. */
static void release(struct held *h)
{
    if (h->s)
        flamme_thread_call_end(h->s);
    if (!h->active)
        return;
    pthread_sigmask(SIG_SETMASK, &h->old, NULL);
    if (h->snap)
        flamme_blocked_end_nosig();
}

/* The signal mask a call that installs one for its wait (pselect, ppoll,
 * epoll_pwait, sigsuspend) uses: the caller's, with the sample signal held
 * back as well while h is active. */
static const sigset_t *held_mask(const struct held *h, const sigset_t *mask, sigset_t *buf)
{
    if (!h->active || !mask)
        return mask;
    *buf = *mask;
    sigaddset(buf, flamme_sample_sig);
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

/* Reads a socket with a receive timeout fails with EINTR rather than
 * restart (the kernel's sock_intr_errno): read, recv* and accept* hold the
 * signal back like the waits above. */

#define HELD_CALL(rtype, name, params, args)                                                 \
    typedef rtype(*name##_fn) params;                                                        \
    EXPORT rtype name params                                                                 \
    {                                                                                        \
        REAL(name##_fn, #name);                                                              \
        struct held h;                                                                       \
        hold(&h, (void *)real, __builtin_frame_address(0));                                  \
        rtype rc = real args;                                                                \
        release(&h);                                                                         \
        return rc;                                                                           \
    }

HELD_CALL(unsigned, sleep, (unsigned secs), (secs))
HELD_CALL(int, usleep, (useconds_t us), (us))
HELD_CALL(int, pause, (void), ())
HELD_CALL(int, sigtimedwait, (const sigset_t *set, siginfo_t *info, const struct timespec *t),
          (set, info, t))
HELD_CALL(int, sigwaitinfo, (const sigset_t *set, siginfo_t *info), (set, info))
HELD_CALL(ssize_t, read, (int fd, void *buf, size_t n), (fd, buf, n))
HELD_CALL(ssize_t, recv, (int fd, void *buf, size_t n, int flags), (fd, buf, n, flags))
HELD_CALL(ssize_t, recvfrom,
          (int fd, void *restrict buf, size_t n, int flags, __SOCKADDR_ARG a,
           socklen_t *restrict alen),
          (fd, buf, n, flags, a, alen))
HELD_CALL(ssize_t, recvmsg, (int fd, struct msghdr *m, int flags), (fd, m, flags))
HELD_CALL(int, accept, (int fd, __SOCKADDR_ARG a, socklen_t *restrict alen), (fd, a, alen))
HELD_CALL(int, accept4, (int fd, __SOCKADDR_ARG a, socklen_t *restrict alen, int flags),
          (fd, a, alen, flags))

typedef int (*sigsuspend_fn)(const sigset_t *);
EXPORT int sigsuspend(const sigset_t *mask)
{
    REAL(sigsuspend_fn, "sigsuspend");
    struct held h;
    sigset_t m;
    hold(&h, (void *)real, __builtin_frame_address(0));
    int rc = real(held_mask(&h, mask, &m));
    release(&h);
    return rc;
}

typedef int (*epoll_pwait2_fn)(int, struct epoll_event *, int, const struct timespec *,
                               const sigset_t *);
EXPORT int epoll_pwait2(int fd, struct epoll_event *ev, int max, const struct timespec *t,
                        const sigset_t *mask)
{
    REAL(epoll_pwait2_fn, "epoll_pwait2");
    struct held h;
    sigset_t m;
    hold(&h, (void *)real, __builtin_frame_address(0));
    mask = held_mask(&h, mask, &m);
    int rc = real(fd, ev, max, t, mask);
    release(&h);
    return rc;
}
