/*
 * common/clock.h — the one clock of sample times: CLOCK_MONOTONIC in ns.
 * The handler stamps samples with it and the writer cuts segments and
 * chunks on it, so both must read the same clock.
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

#endif
