/*
 * tools/attach.c — `flamme attach PID [--duration S] [-F HZ] [-o FILE]`:
 * profiles a running program whose agent is dormant (FLAMME_AUTOSTART=0
 * under LD_PRELOAD, or the flamme OCaml library before Flamme.start),
 * through the agent's control channel (agent/control.c: the protocol and
 * who may use it). The program writes the profile itself; this command
 * starts it, waits S seconds or for Ctrl-C, stops it and prints one line.
 */
#include "tools/cmds.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "agent/control.h"
#include "common/lineio.h"

#define ATTACH_ERR "flamme attach: "

static volatile sig_atomic_t interrupted;

static void on_int(int sig)
{
    (void)sig;
    interrupted = 1;
}

static void attach_usage(FILE *f)
{
    fprintf(f, "usage: flamme attach PID [--duration S] [-F HZ] [-o FILE]\n"
               "Profiles a running OCaml program started with the agent dormant\n"
               "(FLAMME_AUTOSTART=0 with LD_PRELOAD=libflamme.so, or linked with the flamme\n"
               "library) for S seconds, or until Ctrl-C. Only its own user or root may.\n"
               "  -F HZ          samples per CPU-second per thread (default: the program's)\n"
               "  -o FILE        profile path (default flamme.PID.flm), written by the program\n");
}

/* The program's name from /proc, for messages ("" if unknown). */
static void comm_of(int pid, char *out, size_t cap)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/comm", pid);
    FILE *f = fopen(path, "r");
    out[0] = 0;
    if (f) {
        if (fgets(out, (int)cap, f))
            out[strcspn(out, "\n")] = 0;
        fclose(f);
    }
}

int flamme_cmd_attach(int argc, char **argv)
{
    const char *pid_s = NULL, *out = NULL;
    double duration = 0;
    int hz = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int val = !strcmp(a, "--duration") || !strcmp(a, "-F") || !strcmp(a, "-o");
        if (val && i + 1 >= argc) {
            fprintf(stderr, ATTACH_ERR "%s needs a value\n", a);
            return 2;
        }
        char *end;
        if (!strcmp(a, "--duration")) {
            duration = strtod(argv[++i], &end);
            if (*end || !(duration > 0 && duration <= 31536000)) {
                fprintf(stderr, ATTACH_ERR "--duration wants seconds > 0: %s\n", argv[i]);
                return 2;
            }
        } else if (!strcmp(a, "-F")) {
            long v = strtol(argv[++i], &end, 10);
            if (*end || v < 1 || v > 10000) {
                fprintf(stderr, ATTACH_ERR "-F wants 1..10000: %s\n", argv[i]);
                return 2;
            }
            hz = (int)v;
        } else if (!strcmp(a, "-o"))
            out = argv[++i];
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            attach_usage(stdout);
            return 0;
        } else if (a[0] == '-') {
            fprintf(stderr, ATTACH_ERR "unknown option: %s\n", a);
            return 2;
        } else if (!pid_s)
            pid_s = a;
        else {
            attach_usage(stderr);
            return 2;
        }
    }
    char *end;
    long pid = pid_s ? strtol(pid_s, &end, 10) : 0;
    if (!pid_s || *end || pid <= 0 || pid > INT_MAX) {
        attach_usage(stderr);
        return 2;
    }
    char comm[64];
    comm_of((int)pid, comm, sizeof comm);
    if (kill((pid_t)pid, 0) != 0 && errno == ESRCH) {
        fprintf(stderr, ATTACH_ERR "%ld: no such process\n", pid);
        return 2;
    }
    /* The program writes the file: give it an absolute path. */
    char path[PATH_MAX + 64];
    char dflt[64];
    snprintf(dflt, sizeof dflt, "flamme.%ld.flm", pid);
    if (!out)
        out = dflt;
    if (flamme_abs_path("attach", out, path, sizeof path) != 0)
        return 1;
    if (strchr(path, '\n')) {
        fprintf(stderr, ATTACH_ERR "output path contains a newline\n");
        return 2;
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    char name[64];
    snprintf(name, sizeof name, FLAMME_CONTROL_NAME_FMT, (int)pid);
    memcpy(sa.sun_path + 1, name, strlen(name));
    socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(name));
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, len) != 0) {
        fprintf(stderr, ATTACH_ERR "%ld (%s): no dormant flamme agent to attach to (start the "
                        "program with LD_PRELOAD=libflamme.so FLAMME_AUTOSTART=0, or link the "
                        "flamme library)\n", pid, comm[0] ? comm : "?");
        if (fd >= 0)
            close(fd);
        return 2;
    }
    char req[sizeof path + 32], line[PATH_MAX + 128];
    snprintf(req, sizeof req, "start %d %s\n", hz, path);
    /* The agent may refuse (another user, a second attach) and close
     * before reading the request: its line is read even if sending failed. */
    ssize_t sent = send(fd, req, strlen(req), MSG_NOSIGNAL);
    (void)sent;
    if (flamme_read_line(fd, line, sizeof line, 10000) < 0) {
        fprintf(stderr, ATTACH_ERR "%ld (%s): the agent did not answer\n", pid, comm);
        close(fd);
        return 1;
    }
    if (strncmp(line, "ok ", 3) != 0) {
        fprintf(stderr, ATTACH_ERR "%ld (%s): %s\n", pid, comm,
                strncmp(line, "error ", 6) == 0 ? line + 6 : line);
        close(fd);
        return 2;
    }
    struct sigaction act = {0};
    act.sa_handler = on_int;
    sigaction(SIGINT, &act, NULL);
    sigaction(SIGTERM, &act, NULL);
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int ended = 0;
    while (!interrupted) {
        int wait_ms = -1;
        if (duration > 0) {
            clock_gettime(CLOCK_MONOTONIC, &now);
            double left = duration - ((double)(now.tv_sec - t0.tv_sec) +
                                      (double)(now.tv_nsec - t0.tv_nsec) / 1e9);
            if (left <= 0)
                break;
            wait_ms = (int)(left * 1000) + 1;
        }
        struct pollfd p = {fd, POLLIN, 0};
        int r = poll(&p, 1, wait_ms);
        if (r > 0) { /* the program ended (its exit completed the profile) */
            ended = 1;
            break;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &now);
    double secs = (double)(now.tv_sec - t0.tv_sec) + (double)(now.tv_nsec - t0.tv_nsec) / 1e9;
    if (ended) {
        fprintf(stderr, "flamme: %ld (%s) ended while attached (%.1f s); its exit completed %s\n",
                pid, comm, secs, path);
        close(fd);
        return 0;
    }
    unsigned long long samples = 0, lost = 0;
    unsigned threads = 0;
    int off = 0;
    if (send(fd, "stop\n", 5, MSG_NOSIGNAL) < 0 || flamme_read_line(fd, line, sizeof line, 30000) < 0) {
        fprintf(stderr, "flamme: %ld (%s) ended while attached (%.1f s); its exit completed %s\n",
                pid, comm, secs, path);
        close(fd);
        return 0;
    }
    close(fd);
    if (sscanf(line, "ok %llu %u %llu %n", &samples, &threads, &lost, &off) != 3 || !off) {
        fprintf(stderr, ATTACH_ERR "%ld (%s): %s\n", pid, comm,
                strncmp(line, "error ", 6) == 0 ? line + 6 : line);
        return 1;
    }
    fprintf(stderr, "flamme: attached to %ld (%s) for %.1f s: %llu samples, %u threads, %llu lost, "
                    "wrote %s\n", pid, comm, secs, samples, threads, lost, line + off);
    return 0;
}
