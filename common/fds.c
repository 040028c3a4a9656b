/*
 * common/fds.c — high, checked descriptors (see fds.h).
 */
#include "common/fds.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/kcmp.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Agent threads in a window, and program closes in progress: each side
 * stores its count (seq_cst) then loads the other's, so that either the
 * close sees the window and waits, or the window sees the close and waits
 * for its end before making its descriptor. */
static atomic_int fd_windows, fd_closing;
/* Windows entered so far (flamme_fd_open_settle: one began during a call). */
static atomic_uint fd_window_gen;
/* This thread's windows: its own closes inside one do not wait. */
static __thread int fd_in_window;

/* How long a window waits for closes in progress: a close that a signal
 * handler interrupted, the handler itself closing and waiting for the
 * window, would otherwise never end. */
#define WINDOW_WAIT_NS 10000000L

void flamme_fd_window_enter(void)
{
    fd_in_window++;
    atomic_fetch_add(&fd_windows, 1);
    atomic_fetch_add(&fd_window_gen, 1);
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (atomic_load(&fd_closing) > 0) {
        clock_gettime(CLOCK_MONOTONIC, &t);
        if ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) > WINDOW_WAIT_NS)
            break;
        sched_yield();
    }
}

void flamme_fd_window_leave(void)
{
    /* Pairs with the loads in flamme_fd_close_begin. */
    atomic_fetch_sub_explicit(&fd_windows, 1, memory_order_release);
    fd_in_window--;
}

/* Waits until no agent thread is in a window. */
static void windows_wait(void)
{
    /* Pairs with the release in flamme_fd_window_leave. */
    while (atomic_load_explicit(&fd_windows, memory_order_acquire) > 0)
        sched_yield();
}

void flamme_fd_close_begin(void)
{
    if (fd_in_window)
        return;
    for (;;) {
        atomic_fetch_add(&fd_closing, 1);
        if (atomic_load(&fd_windows) == 0)
            return;
        atomic_fetch_sub(&fd_closing, 1);
        windows_wait();
    }
}

unsigned flamme_fd_open_wait(void)
{
    if (fd_in_window)
        return 0;
    /* The count is read before the wait: a window that begins between the
     * wait's last look and the read would otherwise be counted as over,
     * its descriptor still low when the call runs (tests/e2e stderr_file
     * got descriptor 3 for the program's first file in a CI run of
     * 2026-12-02, 5.1.0 fp, timer engine). A window that began and ended
     * before the call only costs the settle a look. */
    unsigned gen = atomic_load(&fd_window_gen);
    windows_wait();
    return gen;
}

int flamme_fd_open_settle(int fd, unsigned gen)
{
    if (fd < 0 || fd_in_window || atomic_load(&fd_window_gen) == gen)
        return fd;
    /* Then the agent's descriptors of those windows are high or closed. */
    windows_wait();
    int e = errno;
    int fdfl = fcntl(fd, F_GETFD);
    int low = fdfl < 0 ? -1 : fcntl(fd, (fdfl & FD_CLOEXEC) ? F_DUPFD_CLOEXEC : F_DUPFD, 0);
    /* Not through the interposed close: the program's number, not yet
     * returned to it. */
    if (low >= 0 && low < fd) {
        syscall(SYS_close, fd);
        fd = low;
    } else if (low >= 0) {
        syscall(SYS_close, low);
    }
    errno = e;
    return fd;
}

void flamme_fd_close_end(void)
{
    if (!fd_in_window)
        atomic_fetch_sub_explicit(&fd_closing, 1, memory_order_release);
}

void flamme_fd_window_atfork_child(void)
{
    atomic_store(&fd_windows, 0);
    atomic_store(&fd_closing, 0);
    fd_in_window = 0;
}

/* Lowest number the agent moves its descriptors to: 64 below the soft
 * limit (1024 on most systems: 960..1023), so a program opening files one
 * after the other meets them only after some 950 of its own. */
static int floor_fd(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY ||
        rl.rlim_cur > 1u << 20)
        return 1024;
    long lim = (long)rl.rlim_cur;
    return (int)(lim >= 256 ? lim - 64 : lim / 2);
}

/* 1 if descriptors a and b (of this process) share one open file
 * description, 0 if not; -1 when the kernel cannot tell (no kcmp: a seccomp
 * filter, a kernel without it). */
static int same_description(int a, int b)
{
    pid_t self = getpid();
    long r = syscall(SYS_kcmp, self, self, KCMP_FILE, a, b);
    return r < 0 ? -1 : r == 0;
}

static int same_file(const struct stat *a, const struct stat *b)
{
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

/* The low number is closed only if it is still ours: a program closing
 * everything may have closed it and opened its own file on it since. */
static void close_low(int fd, int hi, const struct stat *st)
{
    struct stat low;
    int same = same_description(fd, hi);
    if (same < 0)
        same = fstat(fd, &low) == 0 && same_file(&low, st);
    if (same)
        close(fd);
}

/* flamme_fd_high, and with path (the file fd was opened from, or NULL)
 * the check that the number moved was still ours when it was moved: a
 * program that closed it and opened its own file on it before the move
 * would otherwise have lost that file to the close of the low number (and
 * the agent would have used it as its own: torture closefds, a file the
 * program wrote to left empty, its writes landing in the next one).
 * Returns -2 then, having closed only the copy. */
static int move_high(int fd, const char *path, struct flamme_fd_id *id)
{
    if (fd < 0)
        return -1;
    struct stat st; /* what the returned number is, once known */
    int known = 0;
    int floor = floor_fd();
    if (fd < floor) {
        int hi = fcntl(fd, F_DUPFD_CLOEXEC, floor);
        if (hi >= 0) {
            known = fstat(hi, &st) == 0;
            struct stat want;
            if (path && known && stat(path, &want) == 0 && !same_file(&st, &want)) {
                close(hi);
                return -2;
            }
            if (known)
                close_low(fd, hi, &st);
            fd = hi;
        }
    }
    if (id) {
        if (!known)
            known = fstat(fd, &st) == 0;
        id->dev = known ? st.st_dev : 0;
        id->ino = known ? st.st_ino : 0;
    }
    return fd;
}

int flamme_fd_high(int fd, struct flamme_fd_id *id)
{
    return move_high(fd, NULL, id);
}

int flamme_fd_high_path(int fd, const char *path, int reopen_flags, struct flamme_fd_id *id)
{
    int hi = move_high(fd, path, id);
    return hi == -2 ? flamme_open_high(path, reopen_flags, id) : hi;
}

int flamme_fd_same_sigsafe(int fd, const struct flamme_fd_id *id)
{
    struct stat st;
    return fd >= 0 && fstat(fd, &st) == 0 && st.st_dev == id->dev && st.st_ino == id->ino;
}

/* A few tries: each lost one means the program just took the number. */
#define OPEN_TRIES 8

int flamme_open_high(const char *path, int flags, struct flamme_fd_id *id)
{
    for (int i = 0; i < OPEN_TRIES; i++) {
        /* In a window until moved high: the program's opens wait
         * (flamme_fd_open_wait) rather than get the next number. */
        flamme_fd_window_enter();
        int fd = open(path, flags | O_CLOEXEC);
        if (fd >= 0)
            fd = move_high(fd, path, id);
        int e = errno;
        flamme_fd_window_leave();
        errno = e;
        if (fd == -1)
            return -1;
        if (fd != -2)
            return fd;
    }
    errno = EAGAIN;
    return -1;
}

FILE *flamme_fopen_high(const char *path)
{
    int fd = flamme_open_high(path, O_RDONLY, NULL);
    return fd < 0 ? NULL : flamme_fdopen_or_close(fd, "re");
}

FILE *flamme_fdopen_or_close(int fd, const char *mode)
{
    FILE *f = fdopen(fd, mode);
    if (!f) {
        int e = errno;
        close(fd);
        errno = e;
    }
    return f;
}

void flamme_close_checked(int fd, const struct flamme_fd_id *id)
{
    int e = errno;
    if (flamme_fd_same_sigsafe(fd, id))
        close(fd);
    errno = e;
}
