/*
 * agent/agent.c — start-up and shut-down of libflamme.so inside the profiled
 * process. The constructor (main thread, before main) decides whether this
 * process is an OCaml 5 program; if not, the agent stays dormant (children
 * inherit LD_PRELOAD: sh, as, cp must run untouched). Otherwise it opens the
 * output, starts the writer thread, installs the SIGPROF handler and arms
 * the main thread's timer. An atexit handler, registered before the
 * program's own, runs last and flushes the profile.
 */
#include "agent/agent.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/engine.h"
#include "agent/handler.h"
#include "agent/threads.h"
#include "runtime_hooks/ocaml_rt.h"
#include "writer/writer.h"

struct flamme_config flamme_cfg;
_Atomic int flamme_agent_sampling;
pid_t flamme_agent_pid;

static int writer_running;

void flamme_agent_warn(int always, const char *fmt, ...)
{
    if (!always && flamme_cfg.quiet)
        return;
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "flamme: %s\n", buf);
}

/* Opens the profile output. With FLAMME_EXCL (flamme record) an existing
 * file belongs to another process of the same run (e.g. an OCaml parent),
 * so this one writes PATH.<pid>. Returns the fd or -1 (message printed). */
static int open_output(char *path, size_t cap)
{
    int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (flamme_cfg.excl ? O_EXCL : O_TRUNC);
    int fd = open(path, flags, 0644);
    if (fd < 0 && flamme_cfg.excl && errno == EEXIST) {
        size_t l = strlen(path);
        snprintf(path + l, cap - l, ".%d", (int)getpid());
        fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    }
    if (fd < 0)
        flamme_agent_warn(1, "cannot write profile %s: %s; not profiling", path, strerror(errno));
    return fd;
}

/* Reads /proc/self/cmdline into a space-separated string (NULL on failure). */
static char *read_cmdline(void)
{
    static char buf[4096];
    int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return NULL;
    for (ssize_t i = 0; i < n; i++)
        if (buf[i] == 0)
            buf[i] = ' ';
    while (n > 0 && buf[n - 1] == ' ')
        n--;
    buf[n] = 0;
    return buf;
}

/* Stops sampling and writes the rest of the profile. Runs at exit in the
 * owning process only (a fork child has no timers and no writer). */
static void flamme_atexit(void)
{
    if (getpid() != flamme_agent_pid || !writer_running)
        return;
    writer_running = 0;
    /* Pairs with the handler's acquire load: no sample is pushed after this. */
    atomic_store_explicit(&flamme_agent_sampling, 0, memory_order_release);
    flamme_threads_stop_all();
    uint64_t samples, lost;
    uint32_t threads;
    int rc = flamme_writer_stop(&samples, &lost, &threads);
    if (rc != 0)
        flamme_agent_warn(1, "profile %s is incomplete (write error)", flamme_cfg.output);
    else
        flamme_agent_warn(0, "%llu samples, %u threads, %llu lost, wrote %s",
                          (unsigned long long)samples, threads, (unsigned long long)lost,
                          flamme_cfg.output);
}

/* In a fork child: timers are not inherited and the writer thread does not
 * exist, so the child simply stops sampling (its copy of the profile state
 * is never written). */
static void flamme_atfork_child(void)
{
    atomic_store_explicit(&flamme_agent_sampling, 0, memory_order_release);
}

__attribute__((constructor)) static void flamme_init(void)
{
    flamme_config_load(&flamme_cfg);
    if (flamme_cfg.disabled || !flamme_ocaml_present())
        return; /* not an OCaml 5 program: stay out of the way */
    flamme_agent_pid = getpid();
    flamme_engine_init();
    int fd = open_output(flamme_cfg.output, sizeof flamme_cfg.output);
    if (fd < 0)
        return;
    if (flamme_writer_start(fd, flamme_cfg.output, read_cmdline()) != 0) {
        close(fd);
        return;
    }
    writer_running = 1;
    atexit(flamme_atexit);
    if (flamme_handler_install() != 0) {
        flamme_agent_warn(1, "cannot install the SIGPROF handler: %s; not profiling",
                          strerror(errno));
        return; /* the profile is still closed cleanly at exit, with no samples */
    }
    pthread_atfork(NULL, NULL, flamme_atfork_child);
    /* Pairs with the acquire loads in the handler and pthread_create wrapper. */
    atomic_store_explicit(&flamme_agent_sampling, 1, memory_order_release);
    flamme_thread_register(1, 0);
}
