/* sleeps_stubs.c — C side of tests/signal/sleeps.ml: one blocking call per
 * case, the way C libraries make them (no retry on EINTR). Each case
 * returns "ok" or what went wrong. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <caml/alloc.h>
#include <caml/memory.h>
#include <caml/mlvalues.h>

static volatile sig_atomic_t alarmed;
static void on_alarm(int sig) { (void)sig; alarmed = 1; }

/* SIGALRM in 200 ms, caught by on_alarm. */
static void alarm_soon(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, NULL);
    alarmed = 0;
    struct itimerval it = {{0, 0}, {0, 200000}};
    setitimer(ITIMER_REAL, &it, NULL);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static char res[128];

/* rc/errno of a call that should have waited its full time (>= 0.19 s). */
static const char *verdict(long rc, int want_rc, int want_errno, int e, double t0)
{
    double dt = now() - t0;
    if (rc != want_rc || (want_rc == -1 && e != want_errno))
        snprintf(res, sizeof res, "returned %ld (%s) after %.3f s", rc, rc < 0 ? strerror(e) : "-", dt);
    else if (dt < 0.19)
        snprintf(res, sizeof res, "returned after %.3f s only", dt);
    else
        return "ok";
    return res;
}

__attribute__((noinline)) static const char *case_usleep(void)
{
    double t0 = now();
    int rc = usleep(200000);
    return verdict(rc, 0, 0, errno, t0);
}

__attribute__((noinline)) static const char *case_sleep(void)
{
    double t0 = now();
    unsigned left = sleep(1);
    return verdict((long)left, 0, 0, errno, t0);
}

__attribute__((noinline)) static const char *case_pause(void)
{
    double t0 = now();
    alarm_soon();
    int rc = pause();
    int e = errno;
    if (!alarmed)
        return verdict(rc, -2, 0, e, t0); /* woken by something else */
    return verdict(rc, -1, EINTR, e, t0);
}

__attribute__((noinline)) static const char *case_sigsuspend(void)
{
    sigset_t m;
    sigemptyset(&m);
    double t0 = now();
    alarm_soon();
    int rc = sigsuspend(&m);
    int e = errno;
    if (!alarmed)
        return verdict(rc, -2, 0, e, t0);
    return verdict(rc, -1, EINTR, e, t0);
}

__attribute__((noinline)) static const char *case_sigtimedwait(void)
{
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR2);
    pthread_sigmask(SIG_BLOCK, &set, &old);
    struct timespec t = {0, 200000000};
    double t0 = now();
    int rc = sigtimedwait(&set, NULL, &t);
    int e = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return verdict(rc, -1, EAGAIN, e, t0);
}

__attribute__((noinline)) static const char *case_epoll_pwait2(void)
{
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev;
    struct timespec t = {0, 200000000};
    double t0 = now();
    int rc = epoll_pwait2(ep, &ev, 1, &t, NULL);
    int e = errno;
    close(ep);
    return verdict(rc, 0, 0, e, t0);
}

/* A socket with a 200 ms receive timeout and nothing to read. */
static int timed_socket(int sv[2])
{
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
        return -1;
    struct timeval tv = {0, 200000};
    return setsockopt(sv[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
}

/* The verdict on a read of fd, which has nothing to read and a 200 ms
 * receive timeout; then closes fd and the other ends (-1: none). */
static const char *read_times_out(int fd, int other1, int other2)
{
    char b;
    double t0 = now();
    long rc = read(fd, &b, 1);
    int e = errno;
    close(fd);
    if (other1 >= 0)
        close(other1);
    if (other2 >= 0)
        close(other2);
    return verdict(rc, -1, EAGAIN, e, t0);
}

__attribute__((noinline)) static const char *case_rcvtimeo_read(void)
{
    int sv[2];
    if (timed_socket(sv) != 0)
        return "socketpair failed";
    return read_times_out(sv[0], sv[1], -1);
}

__attribute__((noinline)) static const char *case_rcvtimeo_recv(void)
{
    int sv[2];
    char b;
    if (timed_socket(sv) != 0)
        return "socketpair failed";
    double t0 = now();
    long rc = recv(sv[0], &b, 1, 0);
    int e = errno;
    close(sv[0]);
    close(sv[1]);
    return verdict(rc, -1, EAGAIN, e, t0);
}

/* The agent learns, at a descriptor's first read, whether it may time
 * out; these cases change that after it learnt. */

/* A socket read once with no timeout (a byte was there), then given one. */
__attribute__((noinline)) static const char *case_rcvtimeo_late(void)
{
    int sv[2];
    char b = 'x';
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
        return "socketpair failed";
    if (write(sv[1], &b, 1) != 1 || read(sv[0], &b, 1) != 1)
        return "first read failed";
    struct timeval tv = {0, 200000};
    if (setsockopt(sv[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) != 0)
        return "setsockopt failed";
    return read_times_out(sv[0], sv[1], -1);
}

/* A timed socket moved with dup2 onto a number a pipe had, read there. */
__attribute__((noinline)) static const char *case_rcvtimeo_dup(void)
{
    int sv[2], pp[2];
    char b = 'x';
    if (pipe(pp) != 0)
        return "pipe failed";
    if (write(pp[1], &b, 1) != 1 || read(pp[0], &b, 1) != 1)
        return "pipe read failed";
    if (timed_socket(sv) != 0)
        return "socketpair failed";
    if (dup2(sv[0], pp[0]) != pp[0])
        return "dup2 failed";
    close(sv[0]);
    return read_times_out(pp[0], pp[1], sv[1]);
}

/* accept on a listening socket with a receive timeout (the accepted socket
 * would inherit it), nobody connecting. */
__attribute__((noinline)) static const char *case_rcvtimeo_accept(void)
{
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (l < 0)
        return "socket failed";
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct timeval tv = {0, 200000};
    if (bind(l, (struct sockaddr *)&a, sizeof a) != 0 || listen(l, 1) != 0 ||
        setsockopt(l, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) != 0) {
        close(l);
        return "listen failed";
    }
    double t0 = now();
    long rc = accept(l, NULL, NULL);
    int e = errno;
    close(l);
    return verdict(rc, -1, EAGAIN, e, t0);
}

/* A socket with a 200 ms send timeout whose peer reads nothing, its
 * buffer filled; -1 if it could not be set up. */
static int full_timed_socket(int sv[2])
{
    char buf[4096];
    memset(buf, 'x', sizeof buf);
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
        return -1;
    struct timeval tv = {0, 200000};
    if (setsockopt(sv[0], SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) != 0)
        return -1;
    while (send(sv[0], buf, sizeof buf, MSG_DONTWAIT) > 0)
        ;
    return errno == EAGAIN ? 0 : -1;
}

/* write, then send, on a full socket with SO_SNDTIMEO: each waits 200 ms,
 * then fails with EAGAIN. */
__attribute__((noinline)) static const char *case_sndtimeo_write(void)
{
    int sv[2];
    char b = 'x';
    if (full_timed_socket(sv) != 0)
        return "could not fill a timed socket";
    double t0 = now();
    long rc = write(sv[0], &b, 1);
    int e = errno;
    close(sv[0]);
    close(sv[1]);
    return verdict(rc, -1, EAGAIN, e, t0);
}

__attribute__((noinline)) static const char *case_sndtimeo_send(void)
{
    int sv[2];
    char b = 'x';
    if (full_timed_socket(sv) != 0)
        return "could not fill a timed socket";
    double t0 = now();
    long rc = send(sv[0], &b, 1, 0);
    int e = errno;
    close(sv[0]);
    close(sv[1]);
    return verdict(rc, -1, EAGAIN, e, t0);
}

value sleeps_case(value name)
{
    CAMLparam1(name);
    const char *n = String_val(name), *r = "unknown case";
    if (!strcmp(n, "usleep")) r = case_usleep();
    else if (!strcmp(n, "sleep")) r = case_sleep();
    else if (!strcmp(n, "pause")) r = case_pause();
    else if (!strcmp(n, "sigsuspend")) r = case_sigsuspend();
    else if (!strcmp(n, "sigtimedwait")) r = case_sigtimedwait();
    else if (!strcmp(n, "epoll_pwait2")) r = case_epoll_pwait2();
    else if (!strcmp(n, "rcvtimeo_read")) r = case_rcvtimeo_read();
    else if (!strcmp(n, "rcvtimeo_recv")) r = case_rcvtimeo_recv();
    else if (!strcmp(n, "rcvtimeo_late")) r = case_rcvtimeo_late();
    else if (!strcmp(n, "rcvtimeo_dup")) r = case_rcvtimeo_dup();
    else if (!strcmp(n, "rcvtimeo_accept")) r = case_rcvtimeo_accept();
    else if (!strcmp(n, "sndtimeo_write")) r = case_sndtimeo_write();
    else if (!strcmp(n, "sndtimeo_send")) r = case_sndtimeo_send();
    CAMLreturn(caml_copy_string(r));
}
