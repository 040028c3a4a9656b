/*
 * agent/blocking.c — the blocking calls the sample signal must not interrupt.
 *
 * select, poll, epoll_wait, nanosleep and their kin fail with EINTR when a
 * signal with a handler arrives while they wait, whatever SA_RESTART says,
 * and OCaml's Unix.select then raises; so do glibc's usleep and sleep (whose
 * internal nanosleep no interposer sees), pause, sigsuspend, sigtimedwait,
 * and reads and writes on a socket with a timeout (SO_RCVTIMEO,
 * SO_SNDTIMEO: only those are held, see fd_may_time_out; the calls after
 * which a number may name another socket are interposed to forget it). In
 * wall-clock mode every waiting thread is signalled; in CPU mode a CPU
 * timer can still expire inside the call's kernel time. So these functions
 * are interposed: while profiling, the sample signal is held back for the
 * duration of the call. The held-back signal, delivered on the way out with the count of
 * periods it stood for, is sampled at the call under its caller (mark_call,
 * slot->held_*, held_sample_sigsafe in agent/handler.c): the waiting time
 * (wall mode) or the call's kernel time (CPU mode) is still profiled, at
 * the blocking function. Reads hold the signal back in CPU mode only where
 * it would cut them short (fd_may_time_out); in wall mode always, since a
 * thread blocked in a read would otherwise be woken and walked at every
 * period. Writes, sends and connects are held only where they would be cut
 * short, in both modes.
 *
 * While not profiling a call costs no system call: the thread marks itself
 * as in an unheld call instead, and a start that would arm it meanwhile
 * leaves the arming to the writer once the call is over
 * (flamme_thread_defer_arm in agent/threads.c).
 * Who: any thread of the program, normal context (or a program's signal
 * handler: an inner call leaves the outer call's state alone).
 */
/* Both open and open64 (openat, openat64) are defined below: under
 * _FILE_OFFSET_BITS=64 (dune's C flags) glibc's headers would rename open
 * to open64 and define it twice. On x86-64 they are one function. */
#undef _FILE_OFFSET_BITS
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
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
#include "common/fds.h"

struct held {
    sigset_t old;
    struct flamme_slot *s; /* the caller's slot when it owns s->in_call, else NULL */
    struct flamme_slot *marked; /* the slot whose held_* name this call, else NULL */
    uintptr_t prev[4];     /* the held_* (callee, ret, sp, fp) they replaced */
    int active;            /* the signal is held back (old is the mask to restore) */
};

/* Names the call (callee, called from the frame f) in s->held_*, keeping
 * what they named before in h (a call made by a signal handler while the
 * thread is in another): the thread's handler takes a signal delivered from
 * now on as the call's. callee is written last, and cleared first, so the
 * handler never reads a half-written call. */
static void mark_call(struct held *h, struct flamme_slot *s, uintptr_t callee, const uintptr_t *f)
{
    h->prev[0] = s->held_callee;
    h->prev[1] = s->held_ret;
    h->prev[2] = s->held_sp;
    h->prev[3] = s->held_fp;
    s->held_callee = 0;
    /* Pairs with the acquire fence in the handler (held_sample_sigsafe's
     * caller): the fields below are complete once held_callee is seen. */
    atomic_signal_fence(memory_order_release);
    s->held_ret = f[1];
    s->held_sp = (uintptr_t)(f + 2);
    s->held_fp = f[0];
    atomic_signal_fence(memory_order_release);
    s->held_callee = callee;
    h->marked = s;
}

/* Puts back what mark_call replaced. */
static void unmark_call(struct held *h)
{
    struct flamme_slot *s = h->marked;
    if (!s)
        return;
    s->held_callee = 0;
    atomic_signal_fence(memory_order_release); /* pairs as in mark_call */
    s->held_ret = h->prev[1];
    s->held_sp = h->prev[2];
    s->held_fp = h->prev[3];
    atomic_signal_fence(memory_order_release);
    s->held_callee = h->prev[0];
    h->marked = NULL;
}

/* Holds the sample signal back for a blocking call made by the function
 * whose frame is `frame` (its caller is the program) when profiling, the
 * call named in the thread's slot (mark_call). When not profiling, only
 * marks the thread as in an unheld call. */
static void hold(struct held *h, void *callee, void *frame)
{
    h->active = 0;
    h->s = h->marked = NULL;
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
    /* A signal let in by the mask changes below, the one held back during
     * the call above all, is the call's: its periods (the wait, in wall
     * mode; the call's kernel time, in CPU mode) are sampled at the call
     * under its caller, not at libc's pthread_sigmask. */
    if (s)
        mark_call(h, s, (uintptr_t)callee, frame);
    sigset_t prof;
    sigemptyset(&prof);
    sigaddset(&prof, flamme_sample_sig);
    if (pthread_sigmask(SIG_BLOCK, &prof, &h->old) == 0)
        h->active = 1;
    /* Held (or unable to hold): the thread may be armed from now on. */
    flamme_thread_call_end(h->s);
    h->s = NULL;
}

/* Lets the signal through again (a held-back one is handled right here,
 * as the call's); or ends an unheld call. Keeps errno. */
static void release(struct held *h)
{
    if (h->s)
        flamme_thread_call_end(h->s);
    if (h->active)
        pthread_sigmask(SIG_SETMASK, &h->old, NULL);
    unmark_call(h);
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

#define EXPORT __attribute__((visibility("default")))

/* A poll or select with a zero timeout never sleeps: a signal cuts it
 * short only if it comes in the call's few instructions of kernel time.
 * Such calls are forwarded without holding the signal back, which saves two
 * system calls each: an event loop that polls between its work (Eio's
 * ppoll, Lwt's select) makes one per round. One that fails with EINTR
 * while the thread's handler kept a sample signal (slot->sample_sigs moved)
 * is made again, held, as a call that started a moment later would have
 * been: the program sees what is ready, never the EINTR flamme caused.
 * (Its own signal in the same instant would go unseen as EINTR too; its
 * handler has run all the same.) */
static struct flamme_slot *nowait_begin(unsigned *before)
{
    /* Pairs with the release store in the constructor. */
    struct flamme_slot *s = atomic_load_explicit(&flamme_agent_loaded, memory_order_acquire)
                                ? flamme_thread_self_sigsafe()
                                : NULL;
    *before = s ? s->sample_sigs : 0;
    return s;
}

/* Whether the no-wait call that returned rc is to be made again (above). */
static int nowait_redo(const struct flamme_slot *s, unsigned before, int rc)
{
    return rc == -1 && errno == EINTR && s && s->sample_sigs != before;
}

/* The body of a no-wait call: returns from the interposer unless the call
 * is to be made again. */
#define NOWAIT_TRY(call)                                                                     \
    do {                                                                                     \
        unsigned before_;                                                                    \
        struct flamme_slot *s_ = nowait_begin(&before_);                                     \
        int rc_ = (call);                                                                    \
        if (!nowait_redo(s_, before_, rc_))                                                  \
            return rc_;                                                                      \
    } while (0)

typedef int (*select_fn)(int, fd_set *, fd_set *, fd_set *, struct timeval *);
EXPORT int select(int n, fd_set *r, fd_set *w, fd_set *e, struct timeval *t)
{
    FLAMME_LIBC_REAL(select_fn, "select");
    if (t && t->tv_sec == 0 && t->tv_usec == 0)
        NOWAIT_TRY(real(n, r, w, e, t));
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
    FLAMME_LIBC_REAL(pselect_fn, "pselect");
    if (t && t->tv_sec == 0 && t->tv_nsec == 0)
        NOWAIT_TRY(real(n, r, w, e, t, mask));
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
    FLAMME_LIBC_REAL(poll_fn, "poll");
    if (timeout == 0)
        NOWAIT_TRY(real(fds, n, timeout));
    struct held h;
    hold(&h, (void *)real, __builtin_frame_address(0));
    int rc = real(fds, n, timeout);
    release(&h);
    return rc;
}

typedef int (*ppoll_fn)(struct pollfd *, nfds_t, const struct timespec *, const sigset_t *);
EXPORT int ppoll(struct pollfd *fds, nfds_t n, const struct timespec *t, const sigset_t *mask)
{
    FLAMME_LIBC_REAL(ppoll_fn, "ppoll");
    if (t && t->tv_sec == 0 && t->tv_nsec == 0)
        NOWAIT_TRY(real(fds, n, t, mask));
    struct held h;
    sigset_t m;
    hold(&h, (void *)real, __builtin_frame_address(0));
    mask = held_mask(&h, mask, &m);
    int rc = real(fds, n, t, mask);
    release(&h);
    return rc;
}

/* EPOLL_NOWAIT_OK: an epoll wait with a zero timeout is forwarded as it
 * is. The kernel's ep_poll returns from such a call without looking at
 * pending signals (only a sleeping wait does): it never fails with EINTR,
 * and an event loop that polls between its work (libev, Lwt) is spared two
 * system calls each time. */
typedef int (*epoll_wait_fn)(int, struct epoll_event *, int, int);
EXPORT int epoll_wait(int fd, struct epoll_event *ev, int max, int timeout)
{
    FLAMME_LIBC_REAL(epoll_wait_fn, "epoll_wait");
    if (timeout == 0)
        return real(fd, ev, max, timeout); /* EPOLL_NOWAIT_OK */
    struct held h;
    hold(&h, (void *)real, __builtin_frame_address(0));
    int rc = real(fd, ev, max, timeout);
    release(&h);
    return rc;
}

typedef int (*epoll_pwait_fn)(int, struct epoll_event *, int, int, const sigset_t *);
EXPORT int epoll_pwait(int fd, struct epoll_event *ev, int max, int timeout, const sigset_t *mask)
{
    FLAMME_LIBC_REAL(epoll_pwait_fn, "epoll_pwait");
    if (timeout == 0)
        return real(fd, ev, max, timeout, mask); /* EPOLL_NOWAIT_OK */
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
    FLAMME_LIBC_REAL(nanosleep_fn, "nanosleep");
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
    FLAMME_LIBC_REAL(clock_nanosleep_fn, "clock_nanosleep");
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
        FLAMME_LIBC_REAL(name##_fn, #name);                                                              \
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

/* Reads and accepts fail with EINTR only on a socket with a receive
 * timeout, writes, sends and connects only on one with a send timeout: on
 * any other descriptor (a file, a pipe, a tty, a socket without one)
 * SA_RESTART restarts them. Holding the signal back costs two system calls
 * per call, which tripled the time of a short read (1.3 -> 4.0 us here) and
 * put it all on pthread_sigmask; so what each descriptor number is, as far
 * as timeouts go, is kept here, learnt from getsockopt at its first use
 * while profiling and forgotten whenever the number may name something
 * else: the program's close, socket, socketpair, accept, dup and setsockopt
 * calls (interposed below). Not seen: a number reused through
 * fcntl(F_DUPFD) or SCM_RIGHTS after a close the program made without
 * libc's close (stdio's fclose), and timeouts set by raw system calls.
 * Numbers past the table are held back always. */
enum { FD_UNKNOWN = 0, FD_KNOWN = 1, FD_RCV_TIMEO = 2, FD_SND_TIMEO = 4 };
#define FD_TRACKED 65536
/* Relaxed: each entry is one byte, and a call racing with the program's
 * own close of the same number has no order to keep. */
static _Atomic unsigned char fd_kind[FD_TRACKED];

/* Forgets what fd was (it may name something else from now on). */
static void fd_forget(int fd)
{
    if (fd >= 0 && fd < FD_TRACKED)
        atomic_store_explicit(&fd_kind[fd], FD_UNKNOWN, memory_order_relaxed);
}

/* What fd's timeouts are: FD_KNOWN with the timeout bits, or FD_UNKNOWN
 * where getsockopt cannot tell. Two getsockopt calls at most (one for
 * what is not a socket), errno kept, the agent's time (a sample meanwhile
 * is dropped). */
static unsigned char fd_learn(int fd)
{
    int e = errno;
    unsigned char k = FD_UNKNOWN;
    struct timeval tv;
    socklen_t len = sizeof tv;
    flamme_thread_agent_enter();
    if (getsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, &len) == 0) {
        k = FD_KNOWN | ((tv.tv_sec || tv.tv_usec) ? FD_RCV_TIMEO : 0);
        len = sizeof tv;
        if (getsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, &len) != 0)
            k = FD_UNKNOWN;
        else if (tv.tv_sec || tv.tv_usec)
            k |= FD_SND_TIMEO;
    } else if (errno == ENOTSOCK) {
        k = FD_KNOWN;
    }
    flamme_thread_agent_leave();
    errno = e;
    return k;
}

/* Whether a call of fd that waits in direction dir (FD_RCV_TIMEO: reads,
 * recvs, accepts; FD_SND_TIMEO: writes, sends, connects) needs the signal
 * held back: 0 only for a number known to have no timeout that way. While
 * profiling an unknown number is learnt (fd_learn); while not, it is left
 * unknown (no system call of the agent's own then). Wall mode holds every
 * read back: its signals come whether the thread runs or not, and would
 * wake a thread blocked in a read at every period, to walk its stack again
 * (50 threads blocked in reads at 99 Hz: 0.7 s of CPU in 3 s instead of
 * 0.15); writes seldom wait, and are held there only as in CPU mode. */
static int fd_may_time_out(int fd, unsigned char dir)
{
    if (fd < 0)
        return 0; /* the call fails with EBADF */
    if (dir == FD_RCV_TIMEO && flamme_cfg.wall)
        return 1;
    if (fd >= FD_TRACKED)
        return 1;
    unsigned char k = atomic_load_explicit(&fd_kind[fd], memory_order_relaxed);
    if (k == FD_UNKNOWN) {
        if (!atomic_load_explicit(&flamme_agent_sampling, memory_order_relaxed))
            return 1;
        k = fd_learn(fd);
        if (k == FD_UNKNOWN)
            return 1;
        atomic_store_explicit(&fd_kind[fd], k, memory_order_relaxed);
    }
    return (k & dir) != 0;
}

/* A call of fd that a signal cuts short only where fd has a timeout in
 * direction dir: held as above there, else forwarded as it is. */
#define FD_CALL(dir, rtype, name, params, args)                                              \
    typedef rtype(*name##_fn) params;                                                        \
    EXPORT rtype name params                                                                 \
    {                                                                                        \
        FLAMME_LIBC_REAL(name##_fn, #name);                                                              \
        if (!fd_may_time_out(fd, dir))                                                       \
            return real args;                                                                \
        struct held h;                                                                       \
        hold(&h, (void *)real, __builtin_frame_address(0));                                  \
        rtype rc = real args;                                                                \
        release(&h);                                                                         \
        return rc;                                                                           \
    }

FD_CALL(FD_RCV_TIMEO, ssize_t, read, (int fd, void *buf, size_t n), (fd, buf, n))
FD_CALL(FD_RCV_TIMEO, ssize_t, recv, (int fd, void *buf, size_t n, int flags), (fd, buf, n, flags))
FD_CALL(FD_RCV_TIMEO, ssize_t, recvfrom,
        (int fd, void *restrict buf, size_t n, int flags, __SOCKADDR_ARG a,
         socklen_t *restrict alen),
        (fd, buf, n, flags, a, alen))
FD_CALL(FD_RCV_TIMEO, ssize_t, recvmsg, (int fd, struct msghdr *m, int flags), (fd, m, flags))
FD_CALL(FD_SND_TIMEO, ssize_t, write, (int fd, const void *buf, size_t n), (fd, buf, n))
FD_CALL(FD_SND_TIMEO, ssize_t, writev, (int fd, const struct iovec *iov, int n), (fd, iov, n))
FD_CALL(FD_SND_TIMEO, ssize_t, send, (int fd, const void *buf, size_t n, int flags),
        (fd, buf, n, flags))
FD_CALL(FD_SND_TIMEO, ssize_t, sendto,
        (int fd, const void *buf, size_t n, int flags, __CONST_SOCKADDR_ARG a, socklen_t alen),
        (fd, buf, n, flags, a, alen))
FD_CALL(FD_SND_TIMEO, ssize_t, sendmsg, (int fd, const struct msghdr *m, int flags),
        (fd, m, flags))
FD_CALL(FD_SND_TIMEO, int, connect, (int fd, __CONST_SOCKADDR_ARG a, socklen_t len), (fd, a, len))

/* accept and accept4 also wait as reads do; the socket they return starts
 * with the listening socket's timeout, and a number of its own to learn. */
typedef int (*accept_fn)(int, __SOCKADDR_ARG, socklen_t *restrict);
EXPORT int accept(int fd, __SOCKADDR_ARG a, socklen_t *restrict alen)
{
    FLAMME_LIBC_REAL(accept_fn, "accept");
    int rc;
    if (!fd_may_time_out(fd, FD_RCV_TIMEO)) {
        rc = real(fd, a, alen);
    } else {
        struct held h;
        hold(&h, (void *)real, __builtin_frame_address(0));
        rc = real(fd, a, alen);
        release(&h);
    }
    fd_forget(rc);
    return rc;
}

typedef int (*accept4_fn)(int, __SOCKADDR_ARG, socklen_t *restrict, int);
EXPORT int accept4(int fd, __SOCKADDR_ARG a, socklen_t *restrict alen, int flags)
{
    FLAMME_LIBC_REAL(accept4_fn, "accept4");
    int rc;
    if (!fd_may_time_out(fd, FD_RCV_TIMEO)) {
        rc = real(fd, a, alen, flags);
    } else {
        struct held h;
        hold(&h, (void *)real, __builtin_frame_address(0));
        rc = real(fd, a, alen, flags);
        release(&h);
    }
    fd_forget(rc);
    return rc;
}

/* What open and pipe return is never a socket (open refuses a socket's
 * path): known to restart from the start, so a program that opens, reads
 * and closes many files makes no getsockopt for them. */
static void fd_restarts(int fd)
{
    if (fd >= 0 && fd < FD_TRACKED)
        atomic_store_explicit(&fd_kind[fd], FD_KNOWN, memory_order_relaxed);
}

/* open's mode argument, there only when the flags create a file. */
#define OPEN_MODE(flags, mode)                                                               \
    do {                                                                                     \
        if (((flags) & O_CREAT) || ((flags) & O_TMPFILE) == O_TMPFILE) {                     \
            va_list ap_;                                                                     \
            va_start(ap_, flags);                                                            \
            mode = va_arg(ap_, int);                                                         \
            va_end(ap_);                                                                     \
        }                                                                                    \
    } while (0)

#define OPEN_CALL(name)                                                                      \
    typedef int (*name##_fn)(const char *, int, ...);                                        \
    EXPORT int name(const char *path, int flags, ...)                                        \
    {                                                                                        \
        FLAMME_LIBC_REAL(name##_fn, #name);                                                              \
        int mode = 0;                                                                        \
        OPEN_MODE(flags, mode);                                                              \
        unsigned gen_ = flamme_fd_open_wait(); /* common/fds.h */                            \
        int rc = flamme_fd_open_settle(real(path, flags, mode), gen_);                       \
        fd_restarts(rc);                                                                     \
        return rc;                                                                           \
    }
OPEN_CALL(open)
OPEN_CALL(open64)

#define OPENAT_CALL(name)                                                                    \
    typedef int (*name##_fn)(int, const char *, int, ...);                                   \
    EXPORT int name(int dir, const char *path, int flags, ...)                               \
    {                                                                                        \
        FLAMME_LIBC_REAL(name##_fn, #name);                                                              \
        int mode = 0;                                                                        \
        OPEN_MODE(flags, mode);                                                              \
        unsigned gen_ = flamme_fd_open_wait(); /* common/fds.h */                            \
        int rc = flamme_fd_open_settle(real(dir, path, flags, mode), gen_);                  \
        fd_restarts(rc);                                                                     \
        return rc;                                                                           \
    }
OPENAT_CALL(openat)
OPENAT_CALL(openat64)

typedef int (*pipe_fn)(int[2]);
EXPORT int pipe(int fds[2])
{
    FLAMME_LIBC_REAL(pipe_fn, "pipe");
    (void)flamme_fd_open_wait();
    int rc = real(fds);
    if (rc == 0) {
        fd_restarts(fds[0]);
        fd_restarts(fds[1]);
    }
    return rc;
}

typedef int (*pipe2_fn)(int[2], int);
EXPORT int pipe2(int fds[2], int flags)
{
    FLAMME_LIBC_REAL(pipe2_fn, "pipe2");
    (void)flamme_fd_open_wait();
    int rc = real(fds, flags);
    if (rc == 0) {
        fd_restarts(fds[0]);
        fd_restarts(fds[1]);
    }
    return rc;
}

/* The calls after which a number may name another file, or a socket
 * another timeout: forwarded, then the number forgotten. */
typedef int (*close_fn)(int);
EXPORT int close(int fd)
{
    FLAMME_LIBC_REAL(close_fn, "close");
    fd_forget(fd);
    /* Not inside the agent's making of a descriptor (common/fds.h). */
    flamme_fd_close_begin();
    int rc = real(fd);
    flamme_fd_close_end();
    return rc;
}

typedef int (*close_range_fn)(unsigned, unsigned, int);
EXPORT int close_range(unsigned first, unsigned last, int flags)
{
    FLAMME_LIBC_REAL(close_range_fn, "close_range");
    for (unsigned fd = first; fd <= last && fd < FD_TRACKED; fd++)
        fd_forget((int)fd);
    flamme_fd_close_begin();
    int rc = real(first, last, flags);
    flamme_fd_close_end();
    return rc;
}

typedef void (*closefrom_fn)(int);
EXPORT void closefrom(int lowfd)
{
    FLAMME_LIBC_REAL(closefrom_fn, "closefrom");
    for (int fd = lowfd < 0 ? 0 : lowfd; fd < FD_TRACKED; fd++)
        fd_forget(fd);
    flamme_fd_close_begin();
    real(lowfd);
    flamme_fd_close_end();
}

typedef int (*socket_fn)(int, int, int);
EXPORT int socket(int domain, int type, int proto)
{
    FLAMME_LIBC_REAL(socket_fn, "socket");
    (void)flamme_fd_open_wait();
    int rc = real(domain, type, proto);
    fd_forget(rc);
    return rc;
}

typedef int (*socketpair_fn)(int, int, int, int[2]);
EXPORT int socketpair(int domain, int type, int proto, int sv[2])
{
    FLAMME_LIBC_REAL(socketpair_fn, "socketpair");
    (void)flamme_fd_open_wait();
    int rc = real(domain, type, proto, sv);
    if (rc == 0) {
        fd_forget(sv[0]);
        fd_forget(sv[1]);
    }
    return rc;
}

typedef int (*dup_fn)(int);
EXPORT int dup(int fd)
{
    FLAMME_LIBC_REAL(dup_fn, "dup");
    (void)flamme_fd_open_wait();
    int rc = real(fd);
    fd_forget(rc);
    return rc;
}

typedef int (*dup2_fn)(int, int);
EXPORT int dup2(int fd, int to)
{
    FLAMME_LIBC_REAL(dup2_fn, "dup2");
    flamme_fd_close_begin(); /* to is closed first */
    int rc = real(fd, to);
    flamme_fd_close_end();
    fd_forget(to);
    return rc;
}

typedef int (*dup3_fn)(int, int, int);
EXPORT int dup3(int fd, int to, int flags)
{
    FLAMME_LIBC_REAL(dup3_fn, "dup3");
    flamme_fd_close_begin();
    int rc = real(fd, to, flags);
    flamme_fd_close_end();
    fd_forget(to);
    return rc;
}

typedef int (*setsockopt_fn)(int, int, int, const void *, socklen_t);
EXPORT int setsockopt(int fd, int level, int opt, const void *val, socklen_t len)
{
    FLAMME_LIBC_REAL(setsockopt_fn, "setsockopt");
    int rc = real(fd, level, opt, val, len);
    fd_forget(fd);
    return rc;
}

typedef int (*sigsuspend_fn)(const sigset_t *);
EXPORT int sigsuspend(const sigset_t *mask)
{
    FLAMME_LIBC_REAL(sigsuspend_fn, "sigsuspend");
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
    FLAMME_LIBC_REAL(epoll_pwait2_fn, "epoll_pwait2");
    if (t && t->tv_sec == 0 && t->tv_nsec == 0)
        return real(fd, ev, max, t, mask); /* EPOLL_NOWAIT_OK */
    struct held h;
    sigset_t m;
    hold(&h, (void *)real, __builtin_frame_address(0));
    mask = held_mask(&h, mask, &m);
    int rc = real(fd, ev, max, t, mask);
    release(&h);
    return rc;
}
