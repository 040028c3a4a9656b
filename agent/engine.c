/*
 * agent/engine.c — the three sampling engines (see engine.h).
 */
#include "agent/engine.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <linux/perf_event.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "agent/agent.h"
#include "common/fds.h"
#include "agent/handler.h"
#include "agent/threads.h"

enum flamme_engine flamme_engine;

/* Highest rate auto serves with the timer engine where perf events may
 * not overflow in the kernel. */
#define AUTO_TIMER_MAX_HZ 100

const char *flamme_engine_name(void)
{
    switch (flamme_engine) {
    case FLAMME_ENGINE_PERF: return "perf";
    case FLAMME_ENGINE_TIMER: return "timer";
    case FLAMME_ENGINE_ITIMER: return "itimer";
    }
    return "none";
}

static long period_ns(void)
{
    return 1000000000L / flamme_cfg.hz;
}

/* Seeds s's random draws (dither_rand_sigsafe: the dither's marks, the perf
 * engine's gaps) for thread tid; never 0, where xorshift would stay. */
static void rng_seed(struct flamme_slot *s, pid_t tid)
{
    s->dither_rng = ((uint64_t)tid * 0x9E3779B97F4A7C15ull ^ flamme_now_sigsafe()) | 1;
}

/* A random first delay in [1, period] so threads don't fire in lockstep and
 * threads shorter than one period still get their fair chance. */
static long first_delay_ns(pid_t tid)
{
    uint64_t x = flamme_now_sigsafe() ^ ((uint64_t)tid * 0x9E3779B97F4A7C15ull);
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return 1 + (long)(x % (uint64_t)period_ns());
}

/* ---------------------------------------------------------------- perf */

/* Whether perf events overflow in kernel mode too (perf_event_paranoid <= 1,
 * or CAP_PERFMON): set by flamme_engine_init. Without it (paranoid 2, an
 * unprivileged user) the event excludes the kernel, and the kernel drops
 * every overflow that falls in a system call or a page fault; but the
 * event still counts the thread's kernel time, and each sample record
 * carries that count (PERF_SAMPLE_READ), so the handler finds the periods
 * the kernel took between two records (perf_consume). */
static int perf_kernel = 1;

/* The least period of a task-clock event: its hrtimer's. */
#define PERF_MIN_PERIOD_NS 10000
/* Overflows between two settings of the event's gap (perf_next_sigsafe). */
#define PERF_GAP_EVERY 4

/* Opens a task-clock event counting thread tid's CPU time, overflowing
 * first after `first` ns (the handler then sets the period, see perf_first
 * in threads.h). Returns the fd or -1 (errno). */
static int perf_open(pid_t tid, long first)
{
    struct perf_event_attr a;
    memset(&a, 0, sizeof a);
    a.size = sizeof a;
    a.type = PERF_TYPE_SOFTWARE;
    a.config = PERF_COUNT_SW_TASK_CLOCK;
    a.sample_period = (uint64_t)first;
    a.disabled = 1;
    a.exclude_kernel = !perf_kernel;
    a.exclude_hv = 1;
    a.wakeup_events = 1;
    /* Records are bare headers: the wake-up matters, and the header's
     * cpumode, which says whether the overflow fell in the kernel. Without
     * kernel overflows, the count too (read_format 0: one u64). */
    a.sample_type = perf_kernel ? 0 : PERF_SAMPLE_READ;
    return (int)syscall(SYS_perf_event_open, &a, tid, -1, -1, PERF_FLAG_FD_CLOEXEC);
}

/* Whether a perf event can be opened on thread self with the kernel's
 * overflows (kernel 1) or without them (0); sets perf_kernel to match.
 * On failure errno says why. */
static int perf_probe(pid_t self, int kernel)
{
    perf_kernel = kernel;
    int fd = perf_open(self, period_ns());
    if (fd < 0)
        return 0;
    close(fd);
    return 1;
}

/* Bytes mapped per perf event: the metadata page plus one data page. The
 * kernel signals (POLL_IN) after each sample record it writes there; the
 * handler marks the records consumed by moving data_tail, a plain store, so
 * a sample costs no system call. */
#define PERF_MMAP_PAGES 2

/* Overflows the event may have outstanding, not yet counted by the handler
 * (it disables itself past that, PERF_EVENT_IOC_REFRESH): each one queues
 * a real-time signal while the thread blocks the signal, and a full queue
 * (RLIMIT_SIGPENDING, shared by the user's processes) makes the kernel send
 * SIGIO instead, which would kill the program. The handler gives the
 * counted ones back every quarter of this. */
#define PERF_MAX_UNCONSUMED 64

/* The CPU-time clock of thread tid, valid from any thread of the process:
 * the kernel's per-thread CPU clock id (what pthread_getcpuclockid returns
 * for that thread: ~tid << 3 | CPUCLOCK_PERTHREAD | CPUCLOCK_SCHED).
 * CLOCK_THREAD_CPUTIME_ID would measure the thread calling timer_create,
 * and a start arms the threads that already exist from the starting one. */
static clockid_t thread_cpu_clock(pid_t tid)
{
    return (clockid_t)((~(unsigned)tid << 3) | 6u);
}

/* Maps the event's buffer, routes its wake-ups to the sample signal on thread tid and
 * enables it. Returns 0 or -1 (errno). */
static int perf_route(struct flamme_slot *s, int fd, pid_t tid, long first)
{
    long page = sysconf(_SC_PAGESIZE);
    if (s->perf_meta) { /* left by a stop that disarmed s from another thread */
        munmap(s->perf_meta, s->perf_map_len);
        s->perf_meta = NULL;
    }
    void *m = mmap(NULL, (size_t)page * PERF_MMAP_PAGES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED)
        return -1;
    s->perf_meta = m;
    s->perf_used = 0;
    s->perf_first = (int)(first < PERF_MIN_PERIOD_NS ? PERF_MIN_PERIOD_NS : first);
    s->perf_given = 0;
    s->perf_count = 0;
    s->perf_mark = (int64_t)flamme_cpu_ns_sigsafe(thread_cpu_clock(tid)) + s->perf_first - period_ns();
    s->perf_grid = 0;
    s->perf_since = 0;
    if (!s->dither_rng) /* perf_next_sigsafe's draws */
        rng_seed(s, tid);
    s->perf_map_len = (size_t)page * PERF_MMAP_PAGES;
    struct f_owner_ex owner = {F_OWNER_TID, tid};
    if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_ASYNC) != 0 || fcntl(fd, F_SETSIG, flamme_sample_sig) != 0 ||
        fcntl(fd, F_SETOWN_EX, &owner) != 0 ||
        ioctl(fd, PERF_EVENT_IOC_REFRESH, PERF_MAX_UNCONSUMED) != 0) {
        int e = errno;
        munmap(m, s->perf_map_len);
        s->perf_meta = NULL;
        errno = e;
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- timer */

/* The kernel checks POSIX CPU timers at its ticks only, so each expiry
 * reaches the thread at a tick, and a tick is not a random instant: the
 * scheduler rotates threads there, and what a thread does just before it
 * is preempted (a stop-the-world spin waiting for the domain that is not
 * running) got twice its share (doc/design.md, "What CPU timers see").
 * Dither: the expiry only says the thread runs. Each period of the
 * thread's own CPU time has a mark at a random point of it, and the
 * samples are a chain of due points at the marks, each taken by a one-shot
 * monotonic timer set for when the thread would reach it if it kept its
 * CPU, and set again for what is left when it did not; each sample stands
 * for the periods whose marks it passed (dither_take_sigsafe), so every
 * period is counted once wherever the samples fall. Length of a tick in ns
 * (clock_getres of the coarse clock, which advances once a tick), 0: no
 * dither (wall mode, FLAMME_DITHER=0). */
static long tick_ns;

/* A thread's chain (slot field dither_state): not started (until its
 * first expiry, or after a failure to set the timer); running (the timer
 * is set for the next check); asleep (a check found the thread asleep in a
 * system call: its next expiry starts the chain again). */
enum { DITHER_OFF, DITHER_RUN, DITHER_SLEEP };
static unsigned dither_take_sigsafe(struct flamme_slot *s, int64_t now);

/* Creates a timer on clock clk that sends the sample signal to s's thread
 * with value `value` (which tells the handler which timer it is). Returns
 * 0 or -1 (errno). */
static int thread_timer(struct flamme_slot *s, clockid_t clk, void *value, timer_t *out)
{
    struct sigevent sev;
    memset(&sev, 0, sizeof sev);
    sev.sigev_notify = SIGEV_THREAD_ID;
    sev.sigev_signo = flamme_sample_sig;
    sev.sigev_value.sival_ptr = value;
    sev._sigev_un._tid = s->tid;
    return timer_create(clk, &sev, out);
}

/* Makes s's dither timer (CPU mode) unless the slot has one from an
 * earlier arming: only s's thread deletes it (dither_drop), as its handler
 * sets it, and another thread's delete could free its id for a timer of
 * the program's that the handler would then set. Returns 0 or -1 (errno). */
static int dither_create(struct flamme_slot *s)
{
    s->dither_state = DITHER_OFF;
    s->dither_acct = 0;
    __atomic_store_n(&s->dither_first_cpu, 0, __ATOMIC_RELAXED);
    /* One left by a thread that had the slot before: its handler is gone. */
    if (s->dither_ok && s->dither_tid != s->tid) {
        s->dither_ok = 0;
        timer_delete(s->dither_timer);
    }
    if (!tick_ns || s->dither_ok)
        return 0;
    if (thread_timer(s, CLOCK_MONOTONIC, &s->dither_timer, &s->dither_timer) != 0)
        return -1;
    rng_seed(s, s->tid);
    s->dither_tid = s->tid;
    s->dither_ok = 1;
    return 0;
}

/* Stops s's dither timer at a disarm: deletes it from s's own thread (its
 * handler cannot run: the signal is blocked there, or the thread is the
 * one that disarms), else only stops it (a signal already on its way finds
 * sampling stopped or no pending sample). */
static void dither_drop(struct flamme_slot *s)
{
    if (!s->dither_ok)
        return;
    if (s->tid == (pid_t)syscall(SYS_gettid)) {
        s->dither_ok = 0;
        timer_delete(s->dither_timer);
        return;
    }
    struct itimerspec off;
    memset(&off, 0, sizeof off);
    timer_settime(s->dither_timer, 0, &off, NULL);
}

/* Whether a CPU timer was armed in CPU mode, and the threads a review
 * ever found sleeping too often for a dither chain
 * (flamme_engine_timer_info). timer_used: set by any arming thread
 * (relaxed, read by the writer at the end); timer_switchers: writer only
 * (reviews, flamme_threads_review_engine). */
static atomic_int timer_used;
static unsigned timer_switchers;

/* A thread arming its own CPU timer (it runs) also sets its dither timer
 * for the same random first instant, in wall time: the thread's first
 * sample is then due when its CPU time reaches that instant
 * (dither_first_sigsafe), not at its first expiry, which comes at a tick
 * the thread runs at. On a busy 2-core VM that took 3-73 ms of the
 * thread's CPU time (tests/engine kern.ml beside a busy process), all of
 * it one sample wherever the thread then was: most of a short compiler
 * run. A thread armed from another one may be asleep: a signal would wake
 * it, so it waits for its expiry. Failure leaves it to the expiry too. */
static void dither_first_check(struct flamme_slot *s, long first)
{
    if (!s->dither_ok || flamme_thread_self_sigsafe() != s)
        return;
    int64_t cpu = (int64_t)flamme_cpu_ns_sigsafe(CLOCK_THREAD_CPUTIME_ID);
    if (cpu <= 0)
        return;
    /* Pairs with the acquire loads in dither_first_sigsafe: the signal
     * this arms finds the value. */
    __atomic_store_n(&s->dither_first_cpu, cpu + first, __ATOMIC_RELEASE);
    struct itimerspec its = {.it_value = {first / 1000000000L, first % 1000000000L}};
    if (timer_settime(s->dither_timer, 0, &its, NULL) != 0)
        __atomic_store_n(&s->dither_first_cpu, 0, __ATOMIC_RELAXED);
}

static int timer_arm(struct flamme_slot *s)
{
    clockid_t clk = flamme_cfg.wall ? CLOCK_MONOTONIC : thread_cpu_clock(s->tid);
    if (thread_timer(s, clk, s, &s->timer) != 0)
        return -1;
    if (dither_create(s) != 0) {
        int e = errno;
        timer_delete(s->timer);
        errno = e;
        return -1;
    }
    if (!flamme_cfg.wall)
        atomic_store_explicit(&timer_used, 1, memory_order_relaxed);
    long p = period_ns(), first = first_delay_ns(s->tid);
    struct itimerspec its = {
        .it_interval = {p / 1000000000L, p % 1000000000L},
        .it_value = {first / 1000000000L, first % 1000000000L},
    };
    if (timer_settime(s->timer, 0, &its, NULL) != 0) {
        int e = errno;
        timer_delete(s->timer);
        errno = e;
        return -1;
    }
    dither_first_check(s, first);
    return 0;
}

/* ---------------------------------------------------------------- common */

/* At most this many perf events at once (one descriptor each); threads past
 * it are sampled by the timer engine's per-thread CPU timer. */
#define PERF_MAX_EVENTS 48
static atomic_int perf_armed;

static atomic_int itimer_armed;

/* auto chose perf: threads that switch often are moved to timers. */
static int auto_perf;
/* Threads a review moved to a timer, and the first tids (writer only:
 * reviews and flamme_engine_moved run there). */
#define MOVED_TIDS 16
static unsigned perf_moved;
static pid_t moved_tids[MOVED_TIDS];

void flamme_engine_atfork_child(void)
{
    /* The parent's events and its process-wide timer are not the child's
     * (ITIMER_PROF is not inherited), nor are the threads it moved. */
    atomic_store(&perf_armed, 0);
    atomic_store(&itimer_armed, 0);
    perf_moved = 0;
    timer_switchers = 0;
}

int flamme_engine_init(void)
{
    const char *want = flamme_cfg.engine;
    struct timespec res;
    if (!flamme_cfg.wall && flamme_cfg.dither && clock_getres(CLOCK_MONOTONIC_COARSE, &res) == 0 &&
        res.tv_sec == 0 && res.tv_nsec > 0)
        tick_ns = res.tv_nsec;
    if (flamme_cfg.wall) {
        if (strcmp(want, "auto") && strcmp(want, "timer"))
            flamme_agent_warn(1, "wall-clock mode needs the timer engine; using it instead of %s",
                              want);
        flamme_engine = FLAMME_ENGINE_TIMER;
        return 0;
    }
    if (!strcmp(want, "timer")) {
        flamme_engine = FLAMME_ENGINE_TIMER;
        return 0;
    }
    if (!strcmp(want, "itimer")) {
        /* ITIMER_PROF and SIGPROF are the program's: the itimer engine uses
         * them only when the program does not. */
        if (flamme_handler_prof_taken()) {
            flamme_agent_warn(1, "the program uses SIGPROF or ITIMER_PROF; using the timer engine "
                                 "instead of itimer");
            flamme_engine = FLAMME_ENGINE_TIMER;
            return 0;
        }
        flamme_engine = FLAMME_ENGINE_ITIMER;
        return 0;
    }
    /* auto: perf at any rate where its events may overflow in the kernel.
     * POSIX CPU timers cost nothing on context switches, but fire at ticks
     * only, and a tick is not a random instant: measured, a multi-domain
     * program's stop-the-world spin gets twice its share at 99 Hz (see
     * doc/design.md, "What CPU timers see"). The threads that switch so
     * often that perf would cost them more than their work are moved to a
     * timer (flamme_engine_review). */
    pid_t self = (pid_t)syscall(SYS_gettid);
    int is_auto = !strcmp(want, "auto");
    /* Without kernel overflows (perf_event_paranoid 2, an unprivileged
     * user): up to 100 Hz auto keeps the timers, which put a system call's
     * time on its caller; above, and when asked, perf still, as its samples
     * fall anywhere between ticks, the kernel's periods from the event's
     * count (perf_consume). */
    if (perf_probe(self, 1) ||
        (!(is_auto && flamme_cfg.hz <= AUTO_TIMER_MAX_HZ) && perf_probe(self, 0))) {
        flamme_engine = FLAMME_ENGINE_PERF;
        auto_perf = is_auto;
        return 0;
    }
    if (!strcmp(want, "perf"))
        flamme_agent_warn(1, "perf_event_open refused (%s; see /proc/sys/kernel/perf_event_paranoid); "
                             "using the timer engine",
                          strerror(errno));
    flamme_engine = FLAMME_ENGINE_TIMER;
    return 0;
}

/* The review's first reading (flamme_engine_review), taken by s's own
 * thread as it arms: its CPU clock and getrusage(RUSAGE_THREAD)'s context
 * switches, where the writer would open schedstat and status at its next
 * sweep (~40 us of its CPU each: a program that runs 200 threads of 10 ms
 * one after another cost the writer ~60 ms more than the same work on one
 * thread). Switch-ins are the switches out plus the one the thread runs
 * in (schedstat's count), sleeps the voluntary switches (status's). A
 * thread armed from another one is left to the writer. Caller holds
 * arm_lock. */
static void review_baseline_own(struct flamme_slot *s)
{
    struct rusage ru;
    if (!flamme_engine_reviews() || s->tid != (pid_t)syscall(SYS_gettid) ||
        getrusage(RUSAGE_THREAD, &ru) != 0)
        return;
    uint64_t cpu = flamme_cpu_ns_sigsafe(CLOCK_THREAD_CPUTIME_ID);
    if (!cpu)
        return;
    s->review_switches = (uint64_t)ru.ru_nvcsw + (uint64_t)ru.ru_nivcsw + 1;
    if (tick_ns) {
        s->review_sleep_cpu_ns = cpu;
        s->review_sleeps = (uint64_t)ru.ru_nvcsw;
    }
    /* Relaxed: the writer's unlocked pre-check in flamme_threads_review_engine. */
    __atomic_store_n(&s->review_cpu_ns, cpu, __ATOMIC_RELAXED);
}

int flamme_engine_arm(struct flamme_slot *s)
{
    /* Relaxed: the writer's unlocked pre-check in flamme_threads_review_engine. */
    __atomic_store_n(&s->review_cpu_ns, 0, __ATOMIC_RELAXED);
    s->review_switches = 0;
    s->review_sleep_cpu_ns = s->review_sleeps = 0;
    switch (flamme_engine) {
    case FLAMME_ENGINE_PERF: {
        /* Few descriptors: past the cap a thread gets a CPU timer instead. */
        s->perf_fallback = atomic_fetch_add(&perf_armed, 1) >= PERF_MAX_EVENTS;
        if (s->perf_fallback) {
            atomic_fetch_sub(&perf_armed, 1);
            if (timer_arm(s) != 0)
                return -1;
            break;
        }
        /* High and checked before use: see common/fds.h. Like the timer
         * engine's, the first overflow comes after a random part of a
         * period: threads (and runs) shorter than one period get their fair
         * share instead of none. */
        long first = first_delay_ns(s->tid);
        flamme_fd_window_enter(); /* common/fds.h */
        int fd = flamme_fd_high(perf_open(s->tid, first), &s->perf_id);
        flamme_fd_window_leave();
        if (fd < 0)
            atomic_fetch_sub(&perf_armed, 1);
        if (fd < 0)
            return -1;
        s->perf_fd = fd;
        if (perf_route(s, fd, s->tid, first) != 0) {
            int e = errno;
            s->perf_fd = -1;
            close(fd);
            atomic_fetch_sub(&perf_armed, 1);
            errno = e;
            return -1;
        }
        break;
    }
    case FLAMME_ENGINE_TIMER:
        if (timer_arm(s) != 0)
            return -1;
        break;
    case FLAMME_ENGINE_ITIMER:
        if (!atomic_exchange(&itimer_armed, 1)) {
            long p = period_ns();
            struct itimerval it = {{p / 1000000000L, (p % 1000000000L) / 1000},
                                   {p / 1000000000L, (p % 1000000000L) / 1000}};
            if (it.it_interval.tv_usec == 0 && it.it_interval.tv_sec == 0)
                it.it_interval.tv_usec = it.it_value.tv_usec = 1;
            if (setitimer(ITIMER_PROF, &it, NULL) != 0)
                return -1;
        }
        break;
    }
    review_baseline_own(s);
    /* Pairs with the acquire exchange in disarm: the handle is set first. */
    atomic_store_explicit(&s->armed, 1, memory_order_release);
    return 0;
}

/* Unmaps s's event buffer if the caller is s's thread: from another
 * thread, its handler may be reading it (a later perf arming of the slot
 * unmaps it then). */
static void perf_unmap_own(struct flamme_slot *s)
{
    if (s->perf_meta && s->tid == (pid_t)syscall(SYS_gettid)) {
        munmap(s->perf_meta, s->perf_map_len);
        s->perf_meta = NULL;
    }
}

/* Disables and closes s's perf event (s->perf_fd >= 0), any thread. */
static void perf_close(struct flamme_slot *s)
{
    atomic_fetch_sub(&perf_armed, 1);
    int fd = s->perf_fd;
    /* A number the program closed and reused is left alone. */
    int ours = flamme_fd_same_sigsafe(fd, &s->perf_id);
    if (ours)
        ioctl(fd, PERF_EVENT_IOC_DISABLE, 0);
    /* The handler of s's thread may still run (disarm or a review from
     * another thread): it checks perf_fd before touching the map. */
    s->perf_fd = -1;
    atomic_signal_fence(memory_order_seq_cst);
    if (ours)
        close(fd);
    perf_unmap_own(s);
}

void flamme_engine_disarm(struct flamme_slot *s)
{
    /* Exactly one caller (the exiting thread or the exit handler) wins. A
     * stop from another thread could only stop s's dither timer: its own
     * thread, exiting, deletes it here (callers hold arm_lock, so a stop
     * cannot touch the timer meanwhile). */
    if (!atomic_exchange_explicit(&s->armed, 0, memory_order_acq_rel)) {
        dither_drop(s);
        return;
    }
    switch (flamme_engine) {
    case FLAMME_ENGINE_PERF:
        if (s->perf_fallback) {
            timer_delete(s->timer);
            dither_drop(s);
            /* Moved off perf by a review: its buffer is still mapped. */
            perf_unmap_own(s);
            break;
        }
        if (s->perf_fd >= 0)
            perf_close(s);
        break;
    case FLAMME_ENGINE_TIMER:
        timer_delete(s->timer);
        dither_drop(s);
        break;
    case FLAMME_ENGINE_ITIMER:
        break;
    }
}

unsigned flamme_engine_take_due(struct flamme_slot *s)
{
    if (!s->dither_ok || !s->dither_acct)
        return 0;
    unsigned w = dither_take_sigsafe(s, (int64_t)flamme_cpu_ns_sigsafe(CLOCK_THREAD_CPUTIME_ID));
    s->dither_state = DITHER_OFF;
    s->dither_acct = 0;
    __atomic_store_n(&s->dither_first_cpu, 0, __ATOMIC_RELAXED); /* a first check on its way */
    return w;
}

/* Switch-ins per CPU-second past which auto moves a thread off perf. The
 * perf engine costs each switch-in an hrtimer restart (a clock-event
 * reprogramming; on a KVM guest a trapped MSR write), ~8 us on the 2-core
 * VM of doc/design.md: 2000 a CPU-second (slices of 0.5 ms on average)
 * costs ~1.6% there, the thread that hands a lock over at every Thread.yield
 * (~160,000) more than its own work. */
#define FLAMME_MAX_SWITCH_RATE 2000
/* CPU a review window needs before its rate counts. */
#define FLAMME_REVIEW_MIN_CPU_MS 20

unsigned flamme_engine_moved(char *buf, size_t size)
{
    size_t n = 0;
    if (size)
        buf[0] = 0;
    if (!perf_moved)
        return 0;
    n = (size_t)snprintf(buf, size, "%u", perf_moved);
    for (unsigned i = 0; i < perf_moved && i < MOVED_TIDS && n < size; i++)
        n += (size_t)snprintf(buf + n, size - n, " %d", (int)moved_tids[i]);
    return perf_moved;
}

int flamme_engine_reviews(void)
{
    return (flamme_engine == FLAMME_ENGINE_PERF && auto_perf) ||
           (flamme_engine == FLAMME_ENGINE_TIMER && tick_ns);
}

/* Reads /proc/self/task/TID/NAME of thread tid into buf (size bytes, NUL
 * terminated). Returns its length, or -1 if not readable. Writer thread. */
static ssize_t read_task_file(pid_t tid, const char *name, char *buf, size_t size)
{
    char path[64];
    struct flamme_fd_id id;
    snprintf(path, sizeof path, "/proc/self/task/%d/%s", (int)tid, name);
    int fd = flamme_open_high(path, O_RDONLY, &id);
    if (fd < 0)
        return -1;
    size_t len = 0;
    ssize_t n;
    while (len < size - 1 && (n = read(fd, buf + len, size - 1 - len)) > 0)
        len += (size_t)n;
    flamme_close_checked(fd, &id);
    buf[len] = 0;
    return len ? (ssize_t)len : -1;
}

/* Thread tid's CPU ns and switch-ins (schedstat: "cpu_ns wait_ns
 * timeslices"). Returns 0, or -1 if not readable (a kernel without
 * schedstat: no review). */
static int read_schedstat(pid_t tid, uint64_t *cpu_ns, uint64_t *switches)
{
    char buf[128];
    unsigned long long c, w, sw;
    if (read_task_file(tid, "schedstat", buf, sizeof buf) < 0 ||
        sscanf(buf, "%llu %llu %llu", &c, &w, &sw) != 3)
        return -1;
    *cpu_ns = c;
    *switches = sw;
    return 0;
}

/* Thread tid's sleeps: its voluntary context switches (status). Returns 0,
 * or -1 if not readable. */
static int read_sleeps(pid_t tid, uint64_t *sleeps)
{
    static const char key[] = "\nvoluntary_ctxt_switches:";
    char buf[4096];
    if (read_task_file(tid, "status", buf, sizeof buf) < 0)
        return -1;
    const char *at = strstr(buf, key);
    unsigned long long v;
    if (!at || sscanf(at + sizeof key - 1, "%llu", &v) != 1)
        return -1;
    *sleeps = v;
    return 0;
}

/* Whether n events in cpu ns of a thread's CPU time are more than
 * FLAMME_MAX_SWITCH_RATE per CPU-second. */
static int rate_too_high(uint64_t n, uint64_t cpu)
{
    return n * 1000000000ull > (uint64_t)FLAMME_MAX_SWITCH_RATE * cpu;
}

/* Whether s's thread, now at cpu ns of CPU time, went to sleep more than
 * FLAMME_MAX_SWITCH_RATE times per CPU-second since its sleeps were last
 * read (at its first review, or at the last one that asked). Only a thread
 * that sleeps before most due points needs sampling at expiries: one
 * preempted as often (a busy machine: another thread woken on its CPU
 * thousands of times a second, for a few us each) keeps its CPU time
 * between preemptions, and a chain's checks wait for it (seen: a thread in
 * step with the tick counted as one, sampled at ticks for part of a run,
 * while the rest of a test suite ran). A thread whose sleeps cannot be read
 * is judged on its switches. The first reading after a long while counts
 * its sleeps over that while: a thread that just began to sleep often is
 * judged so one review later. Writer thread, under the arm lock. */
static int sleeps_fast(struct flamme_slot *s, uint64_t cpu)
{
    uint64_t sleeps;
    if (read_sleeps(s->tid, &sleeps) != 0)
        return 1;
    uint64_t was = s->review_sleep_cpu_ns, before = s->review_sleeps;
    s->review_sleep_cpu_ns = cpu ? cpu : 1;
    s->review_sleeps = sleeps;
    if (!was || cpu <= was || sleeps < before)
        return 0;
    return rate_too_high(sleeps - before, cpu - was);
}

/* Counts s's thread once among those sampled at expiries for switching
 * too often (when there is a dither to leave). Writer thread. */
static void count_switcher(struct flamme_slot *s)
{
    if (tick_ns && !s->switcher_seen) {
        s->switcher_seen = 1;
        timer_switchers++;
    }
}

void flamme_engine_review(struct flamme_slot *s, int baseline_only)
{
    /* A thread on a CPU timer with dither: the review says whether it
     * sleeps too often for a chain (dither_expiry_sigsafe). */
    int timer = flamme_engine == FLAMME_ENGINE_TIMER;
    if (!flamme_engine_reviews() || (!timer && (s->perf_fallback || s->perf_fd < 0)) ||
        (baseline_only && s->review_cpu_ns))
        return;
    /* A thread that has not run a window's CPU since its last reading is
     * not reviewed, and its CPU clock says so in one system call where
     * schedstat takes an open, a read, a close and their identity checks
     * (~40 us of the writer's CPU here): 30 idle threads of a pool,
     * reviewed every FLAMME_REVIEW_MS, cost the writer ~12 ms a second.
     * The clock is the sum schedstat's first field gives; 0 (a thread
     * gone) reads schedstat as before, which fails. */
    if (s->review_cpu_ns) {
        uint64_t now_cpu = flamme_cpu_ns_sigsafe(thread_cpu_clock(s->tid));
        if (now_cpu >= s->review_cpu_ns &&
            now_cpu - s->review_cpu_ns < FLAMME_REVIEW_MIN_CPU_MS * 1000000ull)
            return;
    }
    uint64_t cpu, sw;
    if (read_schedstat(s->tid, &cpu, &sw) != 0)
        return;
    if (!s->review_cpu_ns || cpu < s->review_cpu_ns || sw < s->review_switches) {
        __atomic_store_n(&s->review_cpu_ns, cpu ? cpu : 1, __ATOMIC_RELAXED);
        s->review_switches = sw;
        /* The sleeps' first reading, where a dither chain is at stake. */
        if (tick_ns)
            (void)sleeps_fast(s, cpu);
        return;
    }
    uint64_t dcpu = cpu - s->review_cpu_ns, dsw = sw - s->review_switches;
    if (dcpu < FLAMME_REVIEW_MIN_CPU_MS * 1000000ull)
        return;
    __atomic_store_n(&s->review_cpu_ns, cpu, __ATOMIC_RELAXED);
    s->review_switches = sw;
    int fast = rate_too_high(dsw, dcpu);
    /* Sleeps are at most switches: read only past the switches' limit. */
    int sleepy = fast && tick_ns && sleeps_fast(s, cpu);
    /* Relaxed: a hint the handler reads at the thread's next expiry. */
    if (timer) {
        if (sleepy)
            count_switcher(s);
        __atomic_store_n(&s->dither_switcher, sleepy, __ATOMIC_RELAXED);
        return;
    }
    if (!fast)
        return;
    /* Moved for the perf event's cost at every switch-in, preempted or
     * not; a chain where it does not sleep too often. */
    __atomic_store_n(&s->dither_switcher, sleepy, __ATOMIC_RELAXED);
    if (sleepy)
        count_switcher(s);
    /* The timer first: its signals carry s itself (SI_TIMER), which the
     * handler takes whatever perf_fallback says, so the thread's CPU time
     * is counted from here on. A perf signal still queued after the switch
     * takes no sample: at most the one period before it is lost. */
    if (timer_arm(s) != 0)
        return;
    /* Pairs with the handler's acquire load in accept: a perf signal sees
     * the fallback or the event still open. */
    __atomic_store_n(&s->perf_fallback, 1, __ATOMIC_RELEASE);
    perf_close(s);
    if (perf_moved < MOVED_TIDS)
        moved_tids[perf_moved] = s->tid;
    perf_moved++;
}

int flamme_engine_timer_info(char *buf, size_t size)
{
    if (!atomic_load_explicit(&timer_used, memory_order_relaxed))
        return 0;
    if (tick_ns)
        snprintf(buf, size, "dither %u", timer_switchers);
    else
        snprintf(buf, size, "tick");
    return 1;
}

int flamme_engine_kernel_counted(void)
{
    return flamme_engine == FLAMME_ENGINE_PERF && !perf_kernel;
}

void flamme_engine_stop(void)
{
    if (flamme_engine == FLAMME_ENGINE_ITIMER && atomic_exchange(&itimer_armed, 0)) {
        struct itimerval off;
        memset(&off, 0, sizeof off);
        setitimer(ITIMER_PROF, &off, NULL);
    }
}

/* Counts the overflows the kernel recorded in slot s's event buffer since
 * the last call (one sample record each, plus those a LOST record counts)
 * and marks them consumed, so the buffer never fills and wake-ups continue.
 * A wake-up signal can stand for several overflows (while the signal was
 * blocked), and several queued signals for overflows already counted: the
 * count, not the signal, is the sample's weight (0: nothing new). *kernel:
 * how many of them fell in kernel mode (a record's cpumode; lost ones
 * count as user). *dropped: without kernel overflows (perf_kernel 0), the
 * periods the kernel took that no record stands for: the thread's CPU time
 * between the last record of the previous call and the last of this one,
 * in periods, beyond the records; 0 when the count is not known yet or the
 * period is not set (`first`: the records came every first-delay then). */
static unsigned perf_consume(struct flamme_slot *s, int first, unsigned *kernel,
                             unsigned *dropped)
{
    struct perf_event_mmap_page *mp = s->perf_meta;
    /* Pairs with the kernel's write of data_head: the records below it are
     * written. */
    uint64_t head = __atomic_load_n(&mp->data_head, __ATOMIC_ACQUIRE);
    uint64_t tail = mp->data_tail;
    const unsigned char *data = (const unsigned char *)mp + mp->data_offset;
    uint64_t size = mp->data_size;
    uint64_t n = 0, k = 0, count = 0;
    *kernel = 0;
    *dropped = 0;
    if (!size) { /* a kernel before 4.1 (no data_size): count the signal */
        __atomic_store_n(&mp->data_tail, head, __ATOMIC_RELEASE);
        return 1;
    }
    while (tail + sizeof(struct perf_event_header) <= head) {
        const struct perf_event_header *h = (const void *)(data + tail % size);
        if (h->size < sizeof *h || (h->size & 7))
            break; /* not a record: count what we have */
        if (h->type == PERF_RECORD_SAMPLE) {
            n++;
            k += (h->misc & PERF_RECORD_MISC_CPUMODE_MASK) == PERF_RECORD_MISC_KERNEL;
            /* Records are 8-byte aligned and the buffer a multiple of 8:
             * the value never wraps. */
            if (!perf_kernel && h->size >= sizeof *h + 8 && (tail + sizeof *h) % size + 8 <= size)
                count = *(const uint64_t *)(data + (tail + sizeof *h) % size);
        }
        else if (h->type == PERF_RECORD_LOST && h->size >= sizeof *h + 16 &&
                 (tail % size) + sizeof *h + 16 <= size)
            n += ((const uint64_t *)(h + 1))[1]; /* {id, lost} */
        tail += h->size;
    }
    /* Pairs with the kernel's read of data_tail: the space may be reused. */
    __atomic_store_n(&mp->data_tail, head, __ATOMIC_RELEASE);
    if (count) {
        uint64_t p = (uint64_t)period_ns();
        if (s->perf_count && !first && count > s->perf_count) {
            uint64_t periods = (count - s->perf_count + p / 2) / p;
            if (periods > n)
                *dropped = (unsigned)(periods - n < (1u << 24) ? periods - n : 1u << 24);
        }
        s->perf_count = count;
    }
    if (n > PERF_MAX_UNCONSUMED * 4) {
        k = k * PERF_MAX_UNCONSUMED * 4 / n;
        n = PERF_MAX_UNCONSUMED * 4;
    }
    *kernel = (unsigned)k;
    return (unsigned)n;
}

/* How far before its due CPU time a check may find the thread and still
 * take the sample. */
#define DITHER_SLACK_NS 20000
/* The least time the dither timer is set for: a thread that ran less than
 * half of it between two checks did not run its program (what it used was
 * its wake-up and this handler, a few us). */
#define DITHER_MIN_NS 50000
/* A random wall delay for a new instant: a period, or a tick if shorter. */
static int64_t dither_step_sigsafe(void)
{
    long p = period_ns();
    return p < tick_ns ? p : tick_ns;
}

static int64_t dither_rand_sigsafe(struct flamme_slot *s)
{
    uint64_t x = s->dither_rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    s->dither_rng = x;
    return (int64_t)(x >> 1);
}

static int64_t dither_draw_sigsafe(struct flamme_slot *s)
{
    return 1 + dither_rand_sigsafe(s) % dither_step_sigsafe();
}

/* Arms s's dither timer to fire in ns of wall time (at least DITHER_MIN_NS),
 * the thread's CPU time being cpu. Returns 0 or -1. */
static int dither_arm_sigsafe(struct flamme_slot *s, int64_t cpu, int64_t ns)
{
    if (ns < DITHER_MIN_NS)
        ns = DITHER_MIN_NS;
    s->dither_cpu = cpu;
    s->dither_delay = ns;
    struct itimerspec its = {.it_value = {ns / 1000000000L, ns % 1000000000L}};
    return timer_settime(s->dither_timer, 0, &its, NULL);
}

/* Starts the period of s's account at thread CPU time acct (its first at
 * the first expiry, each next one a period later), its mark at a random
 * point of it. */
static void dither_period_sigsafe(struct flamme_slot *s, int64_t acct)
{
    s->dither_acct = acct;
    s->dither_mark = acct + dither_rand_sigsafe(s) % period_ns();
}

/* The periods a sample at thread CPU time now stands for: those whose mark
 * it is the first sample at or after. Each period of the thread's CPU time
 * has one mark, at a random point of it, so every period is counted once
 * wherever the samples fall, and a sample's expected weight is the CPU
 * time since the one before it over the period, wherever it is in the
 * period. (Whole periods counted from a fixed grid instead weigh a sample
 * early in its period 1.5 on average and one late in it 0.5: a program
 * that repeats at the period, in step with the grid, had its first 40%
 * counted as 30.9-50.6% by where the grid fell, tests/engine/cycle.ml.) */
static unsigned dither_take_sigsafe(struct flamme_slot *s, int64_t now)
{
    int64_t p = period_ns();
    unsigned n = 0;
    if (now - s->dither_acct >= 2 * p) {
        /* Periods wholly behind now: their marks are too. */
        int64_t k = (now - s->dither_acct) / p - 1;
        n = (unsigned)k;
        dither_period_sigsafe(s, s->dither_acct + k * p);
    }
    /* now is within two periods of dither_acct: at most twice. */
    while (s->dither_mark <= now) {
        n++;
        dither_period_sigsafe(s, s->dither_acct + p);
    }
    return n;
}

/* Runs s's chain from thread CPU time now: its due point is the current
 * period's mark, or, when that passed while the chain was not running, a
 * random part of a step away. Returns 0, or -1 when the timer could not
 * be set (the chain not running). */
static int dither_run_sigsafe(struct flamme_slot *s, int64_t now)
{
    if (s->dither_mark - now > DITHER_SLACK_NS)
        s->dither_due = s->dither_mark;
    else
        s->dither_due = now + dither_draw_sigsafe(s);
    if (dither_arm_sigsafe(s, now, s->dither_due - now) != 0)
        return -1;
    s->dither_state = DITHER_RUN;
    return 0;
}

/* (Both dither functions stay out of flamme_engine_accept_sigsafe's frame:
 * the perf engine's signals, which never call them, can come on a
 * program's alternate stack inside its own handler, before the handler's
 * room check.)
 * A CPU timer expiry of *weight periods reached s's thread, at a tick: it
 * runs. The first is sampled here, with its periods, and starts the
 * account and the chain: a thread that ends before its first due point
 * still has a sample, whose frames a later flush can reuse
 * (flamme_handler_flush_nosig). One that finds the chain not running
 * starts it, its due point the current period's mark, or a random part of
 * a step away if that passed. A thread that sleeps too often for a chain
 * (flamme_engine_review: it sleeps before most due points, and its
 * samples would go to the longest of its bursts) is sampled here, at the
 * tick, as good an instant as any within its short bursts. Returns 1 with
 * the sample's weight (0: none now; the periods stay in the account). */
static __attribute__((noinline)) int dither_expiry_sigsafe(struct flamme_slot *s, unsigned *weight)
{
    unsigned first = 0;
    int switcher = __atomic_load_n(&s->dither_switcher, __ATOMIC_RELAXED);
    if (s->dither_state == DITHER_RUN && !switcher && s->dither_acct) {
        *weight = 0;
        return 1;
    }
    int64_t now = (int64_t)flamme_cpu_ns_sigsafe(CLOCK_THREAD_CPUTIME_ID);
    if (!s->dither_acct) {
        dither_period_sigsafe(s, now);
        first = *weight;
        /* This expiry came first: a first check on its way is a chain check. */
        __atomic_store_n(&s->dither_first_cpu, 0, __ATOMIC_RELAXED);
    }
    *weight = first;
    if (switcher) {
        s->dither_state = DITHER_OFF; /* a check still on its way is ignored */
        *weight += dither_take_sigsafe(s, now);
        return 1;
    }
    if (dither_run_sigsafe(s, now) != 0) {
        s->dither_state = DITHER_OFF;
        *weight += dither_take_sigsafe(s, now);
    }
    return 1;
}

/* The check dither_first_check set fired before the thread's first
 * expiry. At or past the first instant (thread CPU ns dither_first_cpu)
 * it does what that expiry would: the sample is taken here, for the
 * periods since, and starts the account and the chain. Before it (the
 * thread waited for a CPU) the check is set again for what is left. A
 * thread found asleep, or one the writer found sleeping too often for a
 * chain, is left to its expiry. A thread that ends before its first
 * sample has no periods counted, as before its first expiry. Returns 1
 * with the sample's weight (0: none now). */
static int dither_first_sigsafe(struct flamme_slot *s, int slept, unsigned *weight)
{
    /* Pairs with the release store in dither_first_check. */
    int64_t due = __atomic_load_n(&s->dither_first_cpu, __ATOMIC_ACQUIRE);
    if (!due)
        return 1;
    if (slept || __atomic_load_n(&s->dither_switcher, __ATOMIC_RELAXED)) {
        __atomic_store_n(&s->dither_first_cpu, 0, __ATOMIC_RELAXED);
        return 1;
    }
    int64_t now = (int64_t)flamme_cpu_ns_sigsafe(CLOCK_THREAD_CPUTIME_ID);
    if (now < due - DITHER_SLACK_NS) {
        if (dither_arm_sigsafe(s, now, due - now) != 0)
            __atomic_store_n(&s->dither_first_cpu, 0, __ATOMIC_RELAXED);
        return 1;
    }
    __atomic_store_n(&s->dither_first_cpu, 0, __ATOMIC_RELAXED);
    *weight = 1 + (unsigned)((now > due ? now - due : 0) / period_ns());
    dither_period_sigsafe(s, now);
    dither_run_sigsafe(s, now); /* failing: left to the next expiry */
    return 1;
}

/* s's dither timer fired, set for when the thread would reach its due
 * point (in its CPU time) if it kept its CPU. At or past it, the sample is
 * taken where the thread is, for the periods whose marks it passed, and the
 * due point moves on to the next mark. Before it (the thread waited
 * for a CPU meanwhile, and this signal waited for it) the timer is set
 * again for what is left. A check that finds the thread asleep in a
 * system call (this signal woke it, or was held back over it: slept) puts
 * the chain to sleep until the thread's next expiry, rather than wake it
 * again. One preempted in a system call is not asleep: the chain goes on.
 * (Taken for asleep, it waited for the next expiry, which on a busy 2-core
 * VM came up to 80 ms of the thread's CPU time later: kern.ml gave 2-9 pp
 * of its compute phase to the next.) Returns 1 with the sample's weight
 * (0: not now). */
static __attribute__((noinline)) int dither_fired_sigsafe(struct flamme_slot *s, int slept,
                                                           unsigned *weight)
{
    *weight = 0;
    if (s->dither_state == DITHER_OFF && !s->dither_acct)
        return dither_first_sigsafe(s, slept, weight);
    if (s->dither_state != DITHER_RUN)
        return 1;
    int64_t now = (int64_t)flamme_cpu_ns_sigsafe(CLOCK_THREAD_CPUTIME_ID);
    if (now - s->dither_cpu < s->dither_delay / 2 && slept) {
        s->dither_state = DITHER_SLEEP;
        return 1;
    }
    if (now >= s->dither_due - DITHER_SLACK_NS) {
        /* A check a little early still counts the mark it was set for. */
        *weight = dither_take_sigsafe(s, now > s->dither_due ? now : s->dither_due);
        /* The next period's mark: one sample per period, each at a random
         * point of it, the least spread a random instant allows (a period
         * apart on average, a fixed period locks onto a program that
         * repeats at a tick: tests/engine ticks.ml, 4 periods a tick at
         * 999 Hz). */
        s->dither_due = s->dither_mark;
    }
    if (dither_arm_sigsafe(s, now, s->dither_due - now) != 0) {
        s->dither_state = DITHER_OFF;
        *weight += dither_take_sigsafe(s, now);
    }
    return 1;
}

/* After `overflows` overflows of s's perf event, with kernel overflows
 * (each one makes a record, which stands for one period): every
 * PERF_GAP_EVERY overflows, sets the gap the kernel keeps between the
 * event's next ones, so the overflows fall at random points of the
 * program. A fixed period locks onto a program that repeats in step with it
 * (tests/engine/cycle.ml: 0% or 100% of the samples in Cycle.first for its
 * 40%). Not the dither's marks: two marks can be a few us apart, closer
 * than the handler's own latency, and the event then overflowed again and
 * again before the handler set the next gap (1,983 records of weight 2,353
 * on cycle.ml for ~1,998 periods).
 *
 * Not at every overflow: in place the call stops and restarts the event's
 * timer, two trapped deadline-timer writes on a KVM guest, 25-35 us a
 * sample (doc/design.md, "What the gaps cost"). One gap for a block of
 * overflows puts them a gap apart, so the block's last one is placed where
 * the randomness is: at a uniform point within PERF_GAP_EVERY periods
 * around the grid of one period per overflow counted. Its gap is then
 * spread over a period and more, so each overflow falls at a uniform point
 * of any cycle as long as a period (cycle.ml) and the grid keeps the
 * overflows' count in a stretch of the program within a few of its
 * periods, however long (a random walk of independent gaps drifts: kern.ml's
 * phases at 99 Hz). The kernel restarts the countdown at this call, some us
 * of the thread's CPU time after the overflow (the signal's delivery, the
 * handler): the gap is measured from now, so that lateness is not added to
 * every block. Without kernel overflows the period stays fixed:
 * perf_consume converts the event's count into periods. */
static void perf_next_sigsafe(struct flamme_slot *s, unsigned overflows)
{
    s->perf_since += overflows;
    if (s->perf_since < PERF_GAP_EVERY)
        return;
    int64_t p = period_ns(), span = PERF_GAP_EVERY * p;
    int64_t grid = s->perf_grid + (int64_t)s->perf_since * p;
    int64_t now = (int64_t)flamme_cpu_ns_sigsafe(CLOCK_THREAD_CPUTIME_ID);
    if (!now)
        now = grid;
    /* Not known, or far off it (the event disabled at its limit, a clock
     * that failed): a grid from here. */
    if (!s->perf_grid || now - grid > 2 * span || grid - now > 2 * span)
        grid = now;
    /* The block's last overflow: within half a span of its grid place. */
    int64_t last = grid + span / 2 + dither_rand_sigsafe(s) % span;
    /* At least a quarter period: a gap of a few us would make the event
     * overflow again and again while the signal waits (47-65 records in one
     * sample, in about one block in 500 before this floor); the grid
     * catches up in the next blocks. */
    int64_t gap = (last - now) / PERF_GAP_EVERY;
    if (gap < p / 4)
        gap = p / 4;
    if (gap < PERF_MIN_PERIOD_NS)
        gap = PERF_MIN_PERIOD_NS;
    s->perf_grid = grid;
    s->perf_since = 0;
    uint64_t g = (uint64_t)gap;
    ioctl(s->perf_fd, PERF_EVENT_IOC_PERIOD, &g);
}

int flamme_engine_accept_sigsafe(struct flamme_slot *s, const siginfo_t *si, int slept,
                                 unsigned *weight,
                                 unsigned *kernel)
{
    *weight = 1;
    *kernel = FLAMME_KERNEL_UNKNOWN;
    if (!s)
        return 0;
    switch (flamme_engine) {
    case FLAMME_ENGINE_PERF:
        /* A thread past the cap, or moved off perf by a review (whose
         * timer may fire before the fallback is visible here: SI_TIMER with
         * s as its value is only ever the timer's). */
        if (si->si_code == SI_TIMER ||
            __atomic_load_n(&s->perf_fallback, __ATOMIC_ACQUIRE))
            goto timer;
        if ((si->si_code != POLL_HUP && si->si_code != POLL_IN) || si->si_fd != s->perf_fd ||
            s->perf_fd < 0)
            return 0;
        int first = s->perf_first;
        if (first) {
            uint64_t p = (uint64_t)period_ns();
            ioctl(s->perf_fd, PERF_EVENT_IOC_PERIOD, &p); /* from now on, every period */
            s->perf_first = 0;
            if (perf_kernel) { /* perf_next_sigsafe's grid */
                s->perf_grid = (int64_t)flamme_cpu_ns_sigsafe(CLOCK_THREAD_CPUTIME_ID);
                s->perf_since = 0;
            }
        }
        if (s->perf_meta) {
            unsigned dropped;
            *weight = perf_consume(s, first, kernel, &dropped);
            /* Only after a new overflow: the call restarts the event's
             * countdown, and a signal for records already counted would
             * lose the CPU time since the last one. */
            if (perf_kernel && !first && *weight)
                perf_next_sigsafe(s, *weight);
            /* The overflows the event counted against its limit: all of
             * them, before the first-period scaling below shrinks the
             * weight. */
            s->perf_used += *weight;
            /* Until the period is set the event overflowed every `first` ns
             * (as little as 10 us), e.g. again and again while the thread
             * was still in the kernel arming it, or had the signal blocked:
             * the first overflow stands for a period (a random start within
             * one), each later one for `first` ns. */
            if (first && *weight > 1) {
                uint64_t n = *weight, w = 1 + ((n - 1) * (uint64_t)first + period_ns() / 2) /
                                                  (uint64_t)period_ns();
                *kernel = (unsigned)(*kernel * w / n);
                *weight = (unsigned)w;
            }
            /* The kernel's periods that made no record (no kernel
             * overflows): they go to the stack the thread is on at this
             * sample, within a period of its return to user space, flagged
             * as the kernel's. Not overflows: the limit does not count them. */
            *weight += dropped;
            *kernel += dropped;
            s->perf_given += *weight;
            /* The event reached its limit and disabled itself (POLL_HUP, or
             * as many overflows as the limit since the last refresh): the
             * thread had the signal blocked that long (or since before its
             * first overflow, when they come every `first` ns) and the CPU
             * time since went uncounted. The thread's CPU clock says how
             * many periods went by since the last refresh; those not given
             * yet go to this sample, as user time (the clock does not
             * split). */
            if (s->perf_used >= PERF_MAX_UNCONSUMED || si->si_code == POLL_HUP) {
                int64_t now = (int64_t)flamme_cpu_ns_sigsafe(CLOCK_THREAD_CPUTIME_ID), p = period_ns();
                int64_t due = now > s->perf_mark ? (now - s->perf_mark) / p : 0;
                if (now && due > (int64_t)s->perf_given && due - (int64_t)s->perf_given < (1 << 24))
                    *weight += (unsigned)(due - (int64_t)s->perf_given);
                /* Periods the grid did not count: perf_next_sigsafe would
                 * make them up again with short gaps. */
                s->perf_grid = 0;
            }
            /* Given back every quarter of the limit (an ioctl and a clock
             * read per 16 samples), so that at least 48 overflows may wait
             * while the thread blocks the signal before the clock has to
             * make up for the rest. */
            if (s->perf_used >= PERF_MAX_UNCONSUMED / 4 || si->si_code == POLL_HUP) {
                ioctl(s->perf_fd, PERF_EVENT_IOC_REFRESH, s->perf_used ? (int)s->perf_used : 1);
                s->perf_used = 0;
                s->perf_given = 0;
                s->perf_mark = (int64_t)flamme_cpu_ns_sigsafe(CLOCK_THREAD_CPUTIME_ID);
            }
        }
        return 1;
    case FLAMME_ENGINE_TIMER:
    timer:
        if (si->si_code != SI_TIMER)
            return 0;
        if (si->si_value.sival_ptr == &s->dither_timer)
            return dither_fired_sigsafe(s, slept, weight);
        if (si->si_value.sival_ptr != s)
            return 0;
        /* Expiries merged into this one signal (the kernel delivers at most
         * one per tick): weigh the sample by all of them. */
        if (si->si_overrun > 0)
            *weight += (unsigned)si->si_overrun;
        if (s->dither_ok)
            return dither_expiry_sigsafe(s, weight);
        return 1;
    case FLAMME_ENGINE_ITIMER:
        return si->si_code == SI_KERNEL;
    }
    return 0;
}
