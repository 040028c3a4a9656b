/*
 * common/clock.h — the one clock of sample times: CLOCK_MONOTONIC in ns.
 * The handler stamps samples with it and the writer cuts segments and
 * chunks on it, so both must read the same clock. Also CPU clocks in ns:
 * the handler's budget and engines, the writer's own time.
 * Who: any thread, also signal handlers. async-signal-safe: yes
 * (clock_gettime is on POSIX's list).
 */
#ifndef FLAMME_COMMON_CLOCK_H
#define FLAMME_COMMON_CLOCK_H
#include <stdint.h>
#include <time.h>

/* Monotonic clock in ns. async-signal-safe: yes. */
static inline uint64_t flamme_now_sigsafe(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* CPU ns clock clk has counted (CLOCK_THREAD_CPUTIME_ID, or another
 * thread's CPU clock id), or 0 if it cannot be read. async-signal-safe: yes. */
static inline uint64_t flamme_cpu_ns_sigsafe(clockid_t clk)
{
    struct timespec ts;
    if (clock_gettime(clk, &ts) != 0)
        return 0;
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#endif
