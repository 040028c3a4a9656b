/*
 * agent/control.c — the control channel `flamme attach PID` talks to: a
 * program whose agent is dormant (FLAMME_AUTOSTART=0 under LD_PRELOAD, or
 * the linked OCaml library before Flamme.start) can be profiled from outside
 * while it runs.
 *
 * The channel is a Unix stream socket in the abstract namespace, named
 * "flamme-agent-<pid>" (no file to leave behind, gone with the process),
 * served by one thread that sleeps in poll until someone connects. Every
 * connection's peer is checked with SO_PEERCRED: only the program's own
 * user (its effective uid) and root are served; others get one error line.
 * Protocol (one line each way, text):
 *   client: "start HZ OUTPUT\n" (OUTPUT an absolute path)
 *   agent:  "ok OUTPUT\n" or "error REASON\n"
 *   client: "stop\n" (or closes the connection: the profile is stopped too)
 *   agent:  "ok SAMPLES THREADS LOST OUTPUT\n" or "error REASON\n"
 * One session at a time: a second client gets "error already attached".
 * Who: the constructor (flamme_control_init), then the control thread only.
 */
#include "agent/control.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "agent/agent.h"
#include "agent/api.h"
#include "common/fds.h"
#include "common/lineio.h"

int flamme_pthread_create_unprofiled(pthread_t *t, const pthread_attr_t *a, void *(*fn)(void *),
                                     void *arg);

static int listen_fd = -1;
static struct flamme_fd_id listen_id, session_id; /* what the numbers were when made */

/* Writes the line s to fd (best effort: the client may be gone). */
static void say(int fd, const char *s)
{
    size_t n = strlen(s);
    while (n) {
        ssize_t w = send(fd, s, n, MSG_NOSIGNAL);
        if (w <= 0)
            return;
        s += w;
        n -= (size_t)w;
    }
}

/* 1 if the peer of fd is our own user or root. */
static int peer_allowed(int fd)
{
    struct ucred cr;
    socklen_t len = sizeof cr;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0)
        return 0;
    return cr.uid == 0 || cr.uid == geteuid();
}

/* Serves the start request on c; returns 1 if a profile now runs for this
 * session (its stop is then the caller's), 0 if the session is over. */
static int session_start(int c)
{
    char line[4200], err[512];
    if (flamme_read_line(c, line, sizeof line, 10000) < 0)
        return 0;
    int hz = 0, off = 0;
    if (sscanf(line, "start %d %n", &hz, &off) != 1 || off == 0 || line[off] != '/' || hz < 0 ||
        hz > 10000) {
        say(c, "error bad request (want: start HZ /ABSOLUTE/OUTPUT)\n");
        return 0;
    }
    struct flamme_start_opts o = {line + off, hz, -1, 0};
    /* A start looks for a sample signal the starting thread does not block;
     * this thread blocks every signal so that none meant for the program
     * lands here. Real-time signals still at their default action are
     * unblocked for the start: one of those arriving here ends the process
     * exactly as anywhere else. */
    sigset_t keep, m;
    pthread_sigmask(SIG_BLOCK, NULL, &keep);
    m = keep;
    for (int sig = SIGRTMIN; sig <= SIGRTMAX; sig++) {
        struct sigaction cur;
        if (sigaction(sig, NULL, &cur) == 0 && !(cur.sa_flags & SA_SIGINFO) &&
            cur.sa_handler == SIG_DFL)
            sigdelset(&m, sig);
    }
    pthread_sigmask(SIG_SETMASK, &m, NULL);
    int rc = flamme_agent_start(&o, err, sizeof err);
    pthread_sigmask(SIG_SETMASK, &keep, NULL);
    if (rc != 0) {
        char msg[600];
        snprintf(msg, sizeof msg, "error %s\n", err);
        say(c, msg);
        return 0;
    }
    char msg[4200];
    snprintf(msg, sizeof msg, "ok %s\n", line + off);
    say(c, msg);
    return 1;
}

/* Ends the session's profile (the client said stop, or went away). */
static void session_stop(int c)
{
    struct flamme_totals t;
    char err[512], msg[4400];
    if (flamme_agent_stop(&t, err, sizeof err) != 0)
        snprintf(msg, sizeof msg, "error %s\n", err);
    else
        snprintf(msg, sizeof msg, "ok %llu %u %llu %s\n", (unsigned long long)t.samples,
                 t.threads, (unsigned long long)t.lost, t.output);
    say(c, msg);
}

static void *control_main(void *arg)
{
    (void)arg;
    int session = -1;
    for (;;) {
        /* A program that closes every descriptor (or reuses the number)
         * takes the channel away: the thread ends rather than touch what
         * is now the program's. A session's profile is then stopped. */
        if (session >= 0 && !flamme_fd_same_sigsafe(session, &session_id)) {
            struct flamme_totals t;
            char err[256];
            flamme_agent_stop(&t, err, sizeof err);
            session = -1;
        }
        if (!flamme_fd_same_sigsafe(listen_fd, &listen_id))
            return NULL;
        struct pollfd p[2] = {{listen_fd, POLLIN, 0}, {session, POLLIN, 0}};
        if (poll(p, session >= 0 ? 2 : 1, -1) < 0) {
            if (errno == EINTR)
                continue;
            return NULL;
        }
        if (session >= 0 && (p[1].revents & (POLLIN | POLLHUP | POLLERR)) &&
            flamme_fd_same_sigsafe(session, &session_id)) {
            char line[64];
            ssize_t r = flamme_read_line(session, line, sizeof line, 1000);
            if (r < 0 || strcmp(line, "stop") == 0) {
                session_stop(session); /* EOF too: nobody is left to stop it */
                close(session);
                session = -1;
            }
        }
        if ((p[0].revents & POLLIN) && flamme_fd_same_sigsafe(listen_fd, &listen_id)) {
            struct flamme_fd_id cid;
            flamme_fd_window_enter(); /* common/fds.h */
            int c = flamme_fd_high(accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC), &cid);
            flamme_fd_window_leave();
            if (c < 0)
                continue;
            if (!peer_allowed(c))
                say(c, "error not allowed: only the program's own user or root may attach\n");
            else if (session >= 0)
                say(c, "error already attached: another flamme attach is profiling this program\n");
            else if (session_start(c)) {
                session = c;
                session_id = cid;
                continue;
            }
            close(c);
        }
    }
}

void flamme_control_init(void)
{
    flamme_fd_window_enter(); /* until moved high: common/fds.h */
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        flamme_fd_window_leave();
        return;
    }
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    char name[64];
    snprintf(name, sizeof name, FLAMME_CONTROL_NAME_FMT, (int)getpid());
    size_t n = strlen(name);
    memcpy(a.sun_path + 1, name, n); /* abstract: a leading NUL byte */
    socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
    if (bind(fd, (struct sockaddr *)&a, len) != 0 || listen(fd, 4) != 0) {
        close(fd);
        flamme_fd_window_leave();
        return;
    }
    listen_fd = flamme_fd_high(fd, &listen_id);
    flamme_fd_window_leave();
    if (listen_fd < 0)
        return;
    sigset_t all, old;
    sigfillset(&all);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t t;
    pthread_sigmask(SIG_SETMASK, &all, &old);
    if (flamme_pthread_create_unprofiled(&t, &attr, control_main, NULL) != 0) {
        close(listen_fd);
        listen_fd = -1;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
}

void flamme_control_atfork_child(void)
{
    /* The child has no control thread: its copy of the socket would only
     * keep the parent's name alive after the parent ends. */
    if (listen_fd >= 0)
        close(listen_fd);
    listen_fd = -1;
}
