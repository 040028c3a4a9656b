/*
 * agent/agent.c — life cycle of the agent inside the profiled process.
 *
 * The constructor (main thread, before main) decides whether this process
 * is an OCaml 5 program; if not, the agent stays dormant (children inherit
 * LD_PRELOAD: sh, as, cp must run untouched). Otherwise threads are
 * registered from then on (so a later start finds them all), and a preloaded
 * agent starts profiling at once unless FLAMME_AUTOSTART=0. The linked copy
 * (OCaml library, built with -DFLAMME_LINKED) only starts on request.
 * An atexit handler registered before the program's own runs last and
 * completes the profile.
 */
#include "agent/agent.h"
#include "common/fds.h"
#include "common/forkchild.h"
#include "agent/bigheap.h"
#include "agent/alloc.h"
#include "agent/control.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "agent/api.h"
#include "agent/engine.h"
#include "agent/handler.h"
#include "agent/host.h"
#include "agent/libc_next.h"
#include "agent/threads.h"
#include "writer/cfi_build.h"
#include "writer/cfi_cache.h"
#include "common/bulk.h"
#include "common/outfile.h"
#include "common/profile.h"
#include "runtime_hooks/frametable.h"
#include "runtime_hooks/gc_hooks.h"
#include "runtime_hooks/ocaml_rt.h"
#include "runtime_hooks/ocaml_version.h"
#include "writer/writer.h"

struct flamme_config flamme_cfg;
#ifdef FLAMME_LINKED
const struct flamme_agent_api_v1 *flamme_preloaded_api;
#endif
_Atomic int flamme_agent_sampling;
_Atomic int flamme_agent_loaded;
pid_t flamme_agent_pid;

/* Why the agent stays dormant in an OCaml program (set by the constructor,
 * read by start; NULL when it is not). */
static const char *dormant_reason;
static char dormant_buf[256];

/* Serialises start/stop/exit. */
static pthread_mutex_t life_lock = PTHREAD_MUTEX_INITIALIZER;
static int running;          /* under life_lock */
static int handler_installed; /* under life_lock */

/* The stderr the process started with (flamme_init): the agent's lines go
 * to descriptor 2 only while it is still that file. A program that started
 * with it closed gets its first own file there (2>&- and then open_out), a
 * daemon puts /dev/null or a log there, a server dup2s its log over it:
 * none of those files may get a line of flamme's. Not a descriptor of the
 * agent's own: a copy would keep a pipe's write end open after the program
 * closed its stderr, and a reader waiting for the end (a shell's $(...))
 * would wait for ever. */
static struct flamme_fd_id start_stderr;
static int start_stderr_open;

static void note_start_stderr(void)
{
    struct stat st;
    start_stderr_open = fstat(STDERR_FILENO, &st) == 0;
    if (start_stderr_open) {
        start_stderr.dev = st.st_dev;
        start_stderr.ino = st.st_ino;
    }
}

/* A profile's path as the agent's lines give it (see flamme_config_shown). */
static const char *shown(const char *path)
{
    return flamme_config_shown(&flamme_cfg, path);
}

/* 1 if descriptor 2 is the file the process started with, else 0. */
static int stderr_is_start(void)
{
    return start_stderr_open && flamme_fd_same_sigsafe(STDERR_FILENO, &start_stderr);
}

void flamme_agent_warn(int always, const char *fmt, ...)
{
    if ((!always && flamme_cfg.quiet) || !stderr_is_start())
        return;
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "flamme: %s\n", buf);
}

/* How many further names (NAME.2 .. NAME.<this>) a taken profile name may
 * get: a chain of exec'd OCaml images, or pids reused within one run. */
#define LATER_NAMES 64

/* Writes "<base>.<n>" into path, or with before_flm and a base ending in
 * ".flm", "<base less .flm>.<n>.flm" (the name still ends like a
 * profile's). Returns 0, or -1 (ENAMETOOLONG) when it does not fit in cap. */
static int name_with_number(char *path, size_t cap, const char *base, long n, int before_flm)
{
    size_t bl = strlen(base);
    int flm = before_flm && bl > 4 && !strcmp(base + bl - 4, ".flm");
    int len = flm ? snprintf(path, cap, "%.*s.%ld.flm", (int)(bl - 4), base, n)
                  : snprintf(path, cap, "%s.%ld", base, n);
    if (len < 0 || (size_t)len >= cap) {
        errno = ENAMETOOLONG;
        return -1;
    }
    return 0;
}

/* 1 if the file at path is a profile an earlier image of this process
 * began (the process exec'd an OCaml program, which keeps its pid): its
 * header names this pid and a start no earlier than the process's own
 * (to the clock tick). Anything else, unreadable or not a profile: 0. */
static int earlier_image(const char *path)
{
    return flamme_profile_writer(path) == (int)getpid();
}

/* Opens the profile output (common/outfile.h: no link followed, nothing
 * truncated in place, 0600). With FLAMME_EXCL (flamme record) an existing
 * file belongs to another process of the same run (e.g. an OCaml parent),
 * so this one writes PATH.<pid>, created only if absent; if an earlier
 * image of this process (before an exec) or an earlier process of the run
 * with the same pid has that one, PATH.<pid>.2, .3, ... Without it a file
 * is replaced, unless an earlier image of this process wrote it: that
 * profile is kept, and this one goes to PATH.2 (.3, ...; NAME.2.flm for a
 * NAME.flm). Returns the fd or -1 with errno. */
int flamme_agent_open_output(char *path, size_t cap)
{
    char base[sizeof flamme_cfg.output];
    if (flamme_cfg.excl) {
        int fd = flamme_out_create_excl(path);
        if (fd >= 0 || errno != EEXIST)
            return fd;
        snprintf(base, sizeof base, "%s", path);
        if (name_with_number(path, cap, base, (long)getpid(), 0) != 0)
            return -1;
        fd = flamme_out_create_excl(path);
        snprintf(base, sizeof base, "%s", path);
        for (long k = 2; fd < 0 && errno == EEXIST && k <= LATER_NAMES; k++) {
            if (name_with_number(path, cap, base, k, 0) != 0)
                return -1;
            fd = flamme_out_create_excl(path);
        }
        return fd;
    }
    if (earlier_image(path)) {
        snprintf(base, sizeof base, "%s", path);
        long k = 2;
        for (; k <= LATER_NAMES; k++) {
            if (name_with_number(path, cap, base, k, 1) != 0)
                return -1;
            if (!earlier_image(path))
                break;
        }
        if (k > LATER_NAMES) {
            errno = EEXIST;
            return -1;
        }
    }
    char tmp[sizeof flamme_cfg.output + 8];
    int fd = flamme_out_open(path, tmp, sizeof tmp);
    if (fd >= 0 && flamme_out_commit(tmp, path) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
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

/* This process is a profiled fork child (before_exec drops its profile,
 * and its end one without samples). */
static int fork_child;

/* 1 if a profile that ended with the given emptiness is to be removed: a
 * fork child's without a sample or a loss in one file (a worker that ended
 * before its first period; a loop of fork and _exit would leave a file per
 * fork). async-signal-safe: yes. */
static int empty_fork_child(int empty)
{
    return fork_child && empty && !flamme_cfg.period_ns;
}

/* Completes a running profile from any context, a signal handler
 * included, recording how the process ends: the writer drains the rings and
 * writes the file while this thread waits (a few seconds at most, so a
 * wedged process still ends). Only in the owning process, once. */
static void finish_sigsafe(int how, int code)
{
    /* Pairs with the release store in flamme_agent_start. */
    if (getpid() == flamme_agent_pid &&
        atomic_exchange_explicit(&flamme_agent_sampling, 0, memory_order_acq_rel)) {
        flamme_writer_set_end_sigsafe(how, code);
        flamme_writer_finish_sigsafe();
        if (flamme_writer_wait_finished_sigsafe(3000) && empty_fork_child(flamme_writer_empty_sigsafe()))
            unlink(flamme_writer_path());
    }
}

/* A signal that would end the program (Ctrl-C under `flamme record`, a
 * plain kill, SIGPIPE, abort(), a crash): complete the profile first, then
 * let the signal end the program as its default action would have.
 * SA_RESETHAND has already restored that default. A fault the kernel raised
 * for an instruction (SIGSEGV, SIGBUS, SIGFPE, SIGILL) happens again when
 * the handler returns, this time with the default action, so the core dump
 * shows the faulting instruction; any other signal is raised again and
 * delivered as the handler returns. */
static void on_fatal_signal(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    int saved_errno = errno;
    /* This handler runs on the thread's alternate stack, OCaml's 8 KiB (up
     * to 5.4; 5.5's is sysconf's, 13.5 KiB with AVX-512): a
     * sample signal taken while it waits for the writer would put a second
     * signal frame (~3.4 KiB with AVX-512 state) and the sample handler on
     * it, up to its end: the likely cause of a SIGTERMed run that died of
     * SIGSEGV instead (itimer engine; once in CI, once in ~1,350 runs here;
     * not reproduced on demand). The mask comes back as the handler
     * returns. */
    sigset_t quiet;
    sigemptyset(&quiet);
    sigaddset(&quiet, flamme_sample_sig);
    sigaddset(&quiet, SIGPROF);
    pthread_sigmask(SIG_BLOCK, &quiet, NULL);
    finish_sigsafe(FLAMME_EXIT_SIGNAL, sig);
    errno = saved_errno;
    int fault = (sig == SIGSEGV || sig == SIGBUS || sig == SIGFPE || sig == SIGILL) &&
                si && si->si_code > 0;
    if (!fault)
        raise(sig);
}

/* Installs on_fatal_signal for the signals whose default action ends the
 * process and that the program leaves at that default (a handler the
 * program sets later replaces it; if that handler exits, exit completes
 * the profile). SIGPROF is the program's (the agent samples on a real-time
 * signal; with the itimer engine SIGPROF has the agent's handler and is
 * skipped here); SIGKILL and SIGSTOP cannot be
 * caught (a SIGKILLed profile stays incomplete and `flamme report` says
 * so). */
static void catch_fatal_signals(void)
{
    static const int sigs[] = {SIGHUP,  SIGINT,  SIGQUIT, SIGILL,    SIGABRT, SIGBUS,  SIGFPE,
                               SIGUSR1, SIGSEGV, SIGUSR2, SIGPIPE,   SIGALRM, SIGTERM, SIGSTKFLT,
                               SIGXCPU, SIGXFSZ, SIGVTALRM, SIGPWR, SIGSYS, SIGPROF};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        struct sigaction cur;
        if (sigaction(sigs[i], NULL, &cur) != 0 || cur.sa_handler != SIG_DFL ||
            (cur.sa_flags & SA_SIGINFO))
            continue;
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_fatal_signal;
        sa.sa_flags = SA_SIGINFO | SA_RESETHAND | SA_ONSTACK;
        sigemptyset(&sa.sa_mask);
        sigaction(sigs[i], &sa, NULL);
    }
}

int flamme_agent_start(const struct flamme_start_opts *o, char *err, size_t errlen)
{
    if (flamme_cfg.disabled) {
        snprintf(err, errlen, "profiling disabled by FLAMME_DISABLE=1");
        return -1;
    }
    if (dormant_reason) {
        snprintf(err, errlen, "profiling unavailable: %s", dormant_reason);
        return -1;
    }
    if (!atomic_load_explicit(&flamme_agent_loaded, memory_order_acquire) ||
        getpid() != flamme_agent_pid) {
        snprintf(err, errlen, "profiling unavailable: not an OCaml 5 native program (or a fork child)");
        return -1;
    }
    pthread_mutex_lock(&life_lock);
    if (running) {
        pthread_mutex_unlock(&life_lock);
        snprintf(err, errlen, "already running (writing %s)", shown(flamme_cfg.output));
        return -1;
    }
    if (o && o->output && *o->output && flamme_config_set_output(&flamme_cfg, o->output) != 0) {
        pthread_mutex_unlock(&life_lock);
        snprintf(err, errlen, "output path too long: %s", o->output);
        return -1;
    }
    if (o && o->period_ms > 0) {
        flamme_cfg.period_ns = (uint64_t)o->period_ms * 1000000u;
        flamme_config_set_output(&flamme_cfg, flamme_cfg.pattern); /* the first segment's name */
    }
    if (o && o->hz > 0)
        flamme_cfg.hz = o->hz > 10000 ? 10000 : o->hz;
    if (o && o->wall >= 0)
        flamme_cfg.wall = o->wall;
    int fd = flamme_agent_open_output(flamme_cfg.output, sizeof flamme_cfg.output);
    if (fd < 0) {
        snprintf(err, errlen, "cannot write profile %s: %s", shown(flamme_cfg.output), strerror(errno));
        pthread_mutex_unlock(&life_lock);
        return -1;
    }
    flamme_engine_init();
    if (flamme_handler_install(flamme_engine == FLAMME_ENGINE_ITIMER) != 0) {
        snprintf(err, errlen, "cannot install the sampling signal handler: %s",
                 errno == EBUSY ? "every real-time signal is taken" : strerror(errno));
        close(fd);
        pthread_mutex_unlock(&life_lock);
        return -1;
    }
    if (!handler_installed) {
        handler_installed = 1;
        catch_fatal_signals();
    }
    flamme_cfi_cache_configure(flamme_cfg.cache_dir);
    if (flamme_writer_start(flamme_agent_host_for_start(), fd, flamme_cfg.output,
                            read_cmdline()) != 0) {
        snprintf(err, errlen, "cannot start the profile writer for %s", shown(flamme_cfg.output));
        pthread_mutex_unlock(&life_lock);
        return -1;
    }
    running = 1;
    flamme_gc_hooks_install(); /* -1 (no hooks in this runtime): no GC records, no GC flags */
    /* From here this thread is sampled while still in the agent's code
     * (the rest of the start, the constructor's end): flamme's time, which
     * its handler drops. Seen: `flamme_init;flamme_agent_running`, 4
     * periods of a short compile's profile. */
    flamme_thread_agent_enter();
    /* Pairs with the acquire loads in the handler and in thread
     * registration: threads registering from now on arm themselves... */
    atomic_store_explicit(&flamme_agent_sampling, 1, memory_order_release);
    /* ...and the ones already there are armed here. */
    flamme_threads_arm_all();
    pthread_mutex_unlock(&life_lock);
    flamme_thread_agent_leave();
    return 0;
}

int flamme_agent_stop(struct flamme_totals *t, char *err, size_t errlen)
{
    pthread_mutex_lock(&life_lock);
    if (!running) {
        pthread_mutex_unlock(&life_lock);
        snprintf(err, errlen, "not running");
        return -1;
    }
    running = 0;
    /* The stopping thread's sample still due (the timer engine's dither):
     * other threads' are lost, like the rest of their last period. */
    flamme_thread_flush_self();
    /* Pairs with the handler's acquire load: no sample is pushed after the
     * handlers in flight finish. */
    atomic_store_explicit(&flamme_agent_sampling, 0, memory_order_release);
    if (!flamme_handler_still_ours())
        flamme_agent_warn(1, "the program replaced flamme's handler of signal %d while profiling: "
                             "samples after that were lost",
                          flamme_sample_sig);
    flamme_threads_disarm_all();
    uint64_t samples, lost;
    uint32_t threads;
    int rc = flamme_writer_stop(&samples, &lost, &threads);
    if (t) {
        t->samples = samples;
        t->lost = lost;
        t->threads = threads;
        snprintf(t->output, sizeof t->output, "%s", shown(flamme_writer_path()));
    }
    pthread_mutex_unlock(&life_lock);
    if (rc != 0) {
        snprintf(err, errlen, "profile %s is incomplete (write error)", shown(flamme_cfg.output));
        return -1;
    }
    return 0;
}

int flamme_agent_running(void)
{
    pthread_mutex_lock(&life_lock);
    int r = running;
    pthread_mutex_unlock(&life_lock);
    return r;
}

#ifndef FLAMME_LINKED
/* The one data symbol a preloaded agent exports (see api.h). */
__attribute__((visibility("default"))) const struct flamme_agent_api_v1 flamme_agent_api_v1 = {
    1, sizeof(struct flamme_agent_api_v1), flamme_agent_start, flamme_agent_stop,
    flamme_agent_running, flamme_alloc_sample, flamme_alloc_event, flamme_alloc_set_mode};
#endif

/* Completes a running profile in the owning process (a fork child the
 * agent does not profile has none) and prints the one-line summary
 * (before_exec prints its own); a profiled fork child's without a sample
 * is removed instead. */
static void stop_and_report(void)
{
    /* Until sampling stops, this thread is sampled in the agent's code:
     * flamme's time (seen: exit;flamme_on_exit;__getpid, and
     * flamme_agent_stop;flamme_thread_flush_self;pthread_sigmask). */
    flamme_thread_agent_enter();
    if (getpid() == flamme_agent_pid && flamme_agent_running()) {
        struct flamme_totals t;
        char err[256];
        if (flamme_agent_stop(&t, err, sizeof err) != 0)
            flamme_agent_warn(1, "%s", err);
        else if (empty_fork_child(t.samples == 0 && t.lost == 0))
            unlink(flamme_writer_path());
        else
            flamme_agent_warn(0, "%llu samples, %u threads, %llu lost, wrote %s",
                              (unsigned long long)t.samples, t.threads,
                              (unsigned long long)t.lost, t.output);
    }
    flamme_thread_agent_leave();
}

/* exit(), a return from main, OCaml's exit: registered with on_exit before
 * the program's own handlers, so it runs after them, and learns the status. */
static void flamme_on_exit(int status, void *arg)
{
    (void)arg;
    flamme_thread_agent_enter(); /* see stop_and_report */
    if (getpid() == flamme_agent_pid)
        flamme_writer_set_end_sigsafe(FLAMME_EXIT_EXIT, status);
    stop_and_report();
    flamme_thread_agent_leave();
}

/* The main thread called pthread_exit: the process lives on while other
 * threads run, and ends (exit status 0) with the last of them; the agent's
 * writer thread must not be the one keeping it alive. */
static pthread_key_t main_exit_key;
static _Atomic int main_exited;

static void last_thread_ended(void)
{
    if (getpid() == flamme_agent_pid)
        flamme_writer_set_end_sigsafe(FLAMME_EXIT_LAST_THREAD, 0);
    stop_and_report();
}

void flamme_agent_thread_exited(int left)
{
    if (left == 0 && atomic_load(&main_exited))
        last_thread_ended();
}

/* Key destructor: runs on the main thread only when it ends by
 * pthread_exit (exit() runs no destructors). */
static void on_main_thread_exit(void *slot)
{
    atomic_store(&main_exited, 1);
    flamme_thread_unregister(slot);
    flamme_agent_thread_exited(flamme_threads_leave());
}

/* ------------------------------------------------------------ fork
 * A child forked while profiling (Unix.fork: a worker pool, a daemon, a
 * fork before exec) is profiled too, as perf follows children (FLAMME_FORK=0:
 * not). Only the forking thread exists there. The prepare handler takes
 * life_lock (no start, stop or exec meanwhile), the writer's sweep lock and
 * the threads' arming lock, so the child copies the agent's tables between
 * two sweeps and its slots between two armings; the child
 * handler then checks that no other lock of the agent was held at the fork
 * (what it guards could be half changed: the child is then left alone, and
 * says so), lets the parent's threads, rings and descriptors go, and starts
 * a profile of the child's own: OUTPUT.<pid>, or OUTPUT with %p as its
 * pid. A child that execs leaves no file (a fork and exec of another
 * program, Unix.system: see before_exec). */

/* Set by the prepare handler of the forking thread for its parent or child
 * handler: 1 when it took life_lock, the writer's sweep lock and the
 * arming lock (the agent profiles and follows forks), -1 when it could
 * not have them (the child is left alone and says so), else 0.
 * Thread-local: forks of two threads each have their own. */
static __thread int fork_held;

static void flamme_atfork_prepare(void)
{
    fork_held = 0;
    if (!flamme_cfg.fork || getpid() != flamme_agent_pid ||
        !atomic_load_explicit(&flamme_agent_loaded, memory_order_acquire))
        return;
    if (!flamme_mutex_lock_for_fork(&life_lock)) {
        fork_held = -1;
        return;
    }
    if (!running) {
        pthread_mutex_unlock(&life_lock);
        return;
    }
    /* The writer thread never forks, nor waits for a lock the forking
     * thread holds: its sweep always ends. */
    flamme_writer_fork_prepare();
    if (!flamme_threads_fork_prepare()) {
        flamme_writer_fork_parent();
        pthread_mutex_unlock(&life_lock);
        fork_held = -1;
        return;
    }
    fork_held = 1;
}

static void flamme_atfork_parent(void)
{
    if (fork_held <= 0) {
        fork_held = 0;
        return;
    }
    fork_held = 0;
    flamme_threads_fork_parent();
    flamme_writer_fork_parent();
    pthread_mutex_unlock(&life_lock);
}

/* The output pattern of a profiled fork child: the parent's when it names
 * the pid (%p); else under `flamme record` the parent's followed by ".%p"
 * (the name record looks for), and otherwise with ".%p" before a final
 * ".flm". Returns 0, or -1 if it does not fit. */
static int child_pattern(char *out, size_t cap)
{
    const char *pat = flamme_cfg.pattern;
    size_t pl = strlen(pat);
    int len;
    if (strstr(pat, "%p"))
        len = snprintf(out, cap, "%s", pat);
    else if (!flamme_cfg.excl && pl > 4 && !strcmp(pat + pl - 4, ".flm"))
        len = snprintf(out, cap, "%.*s.%%p.flm", (int)(pl - 4), pat);
    else
        len = snprintf(out, cap, "%s.%%p", pat);
    return len < 0 || (size_t)len >= cap ? -1 : 0;
}

/* In a fork child (before fork returns to the program): timers are not
 * inherited and the writer thread does not exist there. Every agent lock
 * starts afresh (a lock another thread held at the fork would never be
 * released). Then the child is either left alone entirely, as a process
 * the agent does not profile, or profiled from here on (see above). */
static void flamme_atfork_child(void)
{
    int held = fork_held > 0, refused = fork_held < 0;
    fork_held = 0;
    pthread_mutex_init(&life_lock, NULL);
    flamme_fd_window_atfork_child();
    flamme_control_atfork_child();
    int quiet = flamme_threads_atfork_child(held, 0);
    quiet &= flamme_gc_hooks_atfork_child(0);
    quiet &= flamme_bulk_atfork_child();
    quiet &= flamme_bigheap_atfork_child();
    quiet &= flamme_cfi_build_atfork_child();
    quiet &= flamme_frametable_atfork_child();
    quiet &= flamme_safe_read_atfork_child(0);
    char pattern[sizeof flamme_cfg.pattern];
    int follow = held && quiet && flamme_thread_self_sigsafe() &&
                 child_pattern(pattern, sizeof pattern) == 0;
    flamme_writer_atfork_child(follow);
    atomic_store_explicit(&flamme_agent_sampling, 0, memory_order_release);
    if ((held && !follow) || refused)
        flamme_agent_warn(1, "fork child %d is not profiled: %s", (int)getpid(),
                          refused  ? "the agent was busy for 2 s at the fork"
                          : quiet ? "its output name is too long"
                                  : "another thread was inside the agent at the fork");
    if (!follow) {
        atomic_store_explicit(&flamme_agent_loaded, 0, memory_order_release);
        return;
    }
    /* A thread the program started (not main) forked: in the child it is
     * the only thread, and when it returns the process ends with it, as
     * after main's pthread_exit; the writer thread must not keep it alive
     * (tests/torture fork_lock hung so). */
    atomic_store(&main_exited, flamme_thread_self_sigsafe()->start_routine != 0);
    flamme_threads_atfork_child(1, 1);
    flamme_gc_hooks_atfork_child(1);
    flamme_safe_read_atfork_child(1);
    flamme_engine_atfork_child();
    flamme_agent_pid = getpid();
    running = 0;
    fork_child = 1;
    char err[512] = "its output name is too long";
    if (flamme_config_set_output(&flamme_cfg, pattern) != 0 ||
        flamme_agent_start(NULL, err, sizeof err) != 0) {
        flamme_agent_warn(1, "fork child %d is not profiled: %s", (int)getpid(), err);
        atomic_store_explicit(&flamme_agent_loaded, 0, memory_order_release);
    }
}

/* Name of an OCaml primitive of the flamme OCaml library: when the program
 * links the library, a preloaded agent leaves starting to Flamme.start. */
#define FLAMME_ML_START_PRIMITIVE "caml_flamme_start"

__attribute__((constructor)) static void flamme_init(void)
{
    /* Every loader call the agent makes happens here (see libc_next.h). */
    flamme_libc_next_init();
    /* Not an OCaml 5 program (the shells, assemblers and linkers a build
     * under `flamme record` starts, which inherit LD_PRELOAD): stay out of
     * the way, before even reading the configuration. */
    if (!flamme_ocaml_resolve())
        return;
    note_start_stderr();
    flamme_config_load(&flamme_cfg);
    if (flamme_cfg.disabled)
        return;
#ifdef FLAMME_LINKED
    /* A preloaded agent is the one owner of threads, engines and handler;
     * this linked copy stays dormant and the stubs delegate to it. */
    flamme_preloaded_api = dlsym(RTLD_DEFAULT, FLAMME_AGENT_API_SYMBOL);
    if (flamme_preloaded_api)
        return;
#endif
    /* Every fact about the runtime's internals is checked once, here: on a
     * runtime they do not hold for, one line and no profiling rather than
     * wrong stacks. */
    const char *release = flamme_ocaml_check_runtime(dormant_buf, sizeof dormant_buf);
    if (!release) {
        dormant_reason = dormant_buf;
        flamme_agent_warn(1, "%s; not profiling", dormant_reason);
        return;
    }
    flamme_gc_hooks_resolve();
    flamme_handler_note_self();
    flamme_agent_pid = getpid();
    flamme_safe_read_init();
    /* Before any thread registers: threads that start with every signal
     * blocked get this one unblocked. */
    flamme_signal_choose(!strcmp(flamme_cfg.engine, "itimer"));
    pthread_atfork(flamme_atfork_prepare, flamme_atfork_parent, flamme_atfork_child);
    on_exit(flamme_on_exit, NULL);
    /* Pairs with the acquire loads in the pthread_create wrapper and start. */
    atomic_store_explicit(&flamme_agent_loaded, 1, memory_order_release);
    struct flamme_slot *main_slot = flamme_thread_register(1, 0, 0);
    if (main_slot && pthread_key_create(&main_exit_key, on_main_thread_exit) == 0)
        pthread_setspecific(main_exit_key, main_slot);
    /* The rest is the agent's code, sampled once the start armed the
     * threads (see flamme_agent_start). */
    flamme_thread_agent_enter();
#ifndef FLAMME_LINKED
    if (flamme_cfg.autostart && !dlsym(RTLD_DEFAULT, FLAMME_ML_START_PRIMITIVE)) {
        char err[512];
        if (getenv("FLAMME_ALLOC"))
            flamme_heapfill_prepare(release);
        if (flamme_agent_start(NULL, err, sizeof err) != 0)
            flamme_agent_warn(1, "%s; not profiling", err);
    }
#endif
    /* A dormant agent (FLAMME_AUTOSTART=0, the OCaml library) waits for
     * `flamme attach` too (agent/control.c). */
    if (!flamme_agent_running())
        flamme_control_init();
    flamme_thread_agent_leave();
}

/* ------------------------------------------------------------ exec family
 * exec replaces the process image without running atexit handlers: complete
 * the profile first (the new image, if it is an OCaml 5 program, starts a
 * profile of its own). glibc's exec functions call the system call
 * directly, so each one that OCaml's Unix library uses is interposed. */

typedef int (*execve_fn)(const char *, char *const[], char *const[]);
typedef int (*execv_fn)(const char *, char *const[]);

/* before_exec removed the profile of a fork child (under life_lock, until
 * after_exec). */
static int exec_dropped;

/* Before the process image is replaced: completes a running profile
 * (EXIT exec) but keeps it open, holding life_lock until after_exec. Returns
 * 1 if it did (after_exec must then be called), 0 if nothing runs here. */
static int before_exec(void)
{
    if (getpid() != flamme_agent_pid)
        return 0;
    pthread_mutex_lock(&life_lock);
    if (!running) {
        pthread_mutex_unlock(&life_lock);
        return 0;
    }
    /* Pairs with the handler's acquire load. */
    atomic_store_explicit(&flamme_agent_sampling, 0, memory_order_release);
    flamme_threads_disarm_all();
    uint64_t samples = 0, lost = 0;
    uint32_t threads = 0;
    exec_dropped = 0;
    if (flamme_writer_exec_checkpoint(&samples, &lost, &threads) != 0)
        flamme_agent_warn(1, "profile %s may be incomplete (write error before exec)",
                          shown(flamme_cfg.output));
    else if (fork_child && unlink(flamme_writer_path()) == 0)
        /* A fork and exec (Unix.system, a spawn by hand): what the child
         * ran in between is the fork's and the exec's glue, and the
         * agent's start in the child; its few samples, if any (a period
         * that fell there: a third of the forks of tests/e2e forkexec at
         * 499 Hz), would be a file per command run. */
        exec_dropped = 1;
    else
        /* The new image, if it is an OCaml program, writes a profile of
         * its own (another name, flamme_agent_open_output): without this
         * line only that one would be named. */
        flamme_agent_warn(0, "%llu samples, %u threads, %llu lost, wrote %s (before exec)",
                          (unsigned long long)samples, threads, (unsigned long long)lost,
                          shown(flamme_writer_path()));
    return 1;
}

/* The exec failed (its caller goes on): the profile goes on too, in the
 * same file, as if the exec had not been tried. */
static void after_exec(void)
{
    int e = errno;
    if (exec_dropped)
        /* Its file was removed: the child goes on unprofiled, and says so
         * (a fork child's failed exec usually ends it at once). */
        flamme_agent_warn(1, "profiling stopped at a failed exec (a fork child's: no profile "
                             "written)");
    if (!exec_dropped && flamme_writer_exec_resume() == 0) {
        /* Pairs with the handler's acquire load. */
        atomic_store_explicit(&flamme_agent_sampling, 1, memory_order_release);
        flamme_threads_arm_all();
    } else {
        running = 0;
        if (!exec_dropped)
            flamme_agent_warn(1, "profiling stopped at a failed exec; %s ends there",
                              shown(flamme_cfg.output));
    }
    pthread_mutex_unlock(&life_lock);
    errno = e;
}

__attribute__((visibility("default"))) int execve(const char *path, char *const argv[],
                                                  char *const envp[])
{
    execve_fn real = (execve_fn)flamme_libc_next("execve");
    int held = before_exec();
    int rc = real ? real(path, argv, envp) : (errno = ENOSYS, -1);
    if (held)
        after_exec();
    return rc;
}

__attribute__((visibility("default"))) int execv(const char *path, char *const argv[])
{
    execv_fn real = (execv_fn)flamme_libc_next("execv");
    int held = before_exec();
    int rc = real ? real(path, argv) : (errno = ENOSYS, -1);
    if (held)
        after_exec();
    return rc;
}

__attribute__((visibility("default"))) int execvp(const char *file, char *const argv[])
{
    execv_fn real = (execv_fn)flamme_libc_next("execvp");
    int held = before_exec();
    int rc = real ? real(file, argv) : (errno = ENOSYS, -1);
    if (held)
        after_exec();
    return rc;
}

__attribute__((visibility("default"))) int execvpe(const char *file, char *const argv[],
                                                   char *const envp[])
{
    execve_fn real = (execve_fn)flamme_libc_next("execvpe");
    int held = before_exec();
    int rc = real ? real(file, argv, envp) : (errno = ENOSYS, -1);
    if (held)
        after_exec();
    return rc;
}

/* ------------------------------------------------------------ _exit
 * _exit ends the process without atexit handlers (a fork child's usual
 * way out, OCaml's Unix._exit, a program's signal handler): complete the
 * profile of the owning process first, from any context. */

typedef void (*exit_fn)(int);

/* Completes the profile, then ends the process through libc's `name`. */
__attribute__((noreturn)) static void exit_through(const char *name, int status)
{
    finish_sigsafe(FLAMME_EXIT__EXIT, status);
    exit_fn real = (exit_fn)flamme_libc_next(name);
    if (real)
        real(status);
    syscall(SYS_exit_group, status);
    __builtin_unreachable();
}

__attribute__((visibility("default"), noreturn)) void _exit(int status)
{
    exit_through("_exit", status);
}

__attribute__((visibility("default"), noreturn)) void _Exit(int status)
{
    exit_through("_Exit", status);
}
