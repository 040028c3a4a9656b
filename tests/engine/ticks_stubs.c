/*
 * tests/engine/ticks_stubs.c — the clocks tests/engine/ticks.ml keeps step
 * with the kernel's tick by: the coarse monotonic clock, which the kernel
 * advances once a tick, and the fine one; and the thread's CPU clock, by
 * which it measures its own phases (and by which tests/engine/cycle.ml
 * keeps step with the sampler's period). Owner: the engine suite.
 */
#include <time.h>
#include <caml/mlvalues.h>

static value ns_of(clockid_t clk)
{
    struct timespec ts;
    if (clock_gettime(clk, &ts) != 0)
        return Val_long(0);
    return Val_long((long)ts.tv_sec * 1000000000L + ts.tv_nsec);
}

/* CLOCK_MONOTONIC_COARSE in ns (0 if the clock fails). */
value ticks_coarse_ns(value unit)
{
    (void)unit;
    return ns_of(CLOCK_MONOTONIC_COARSE);
}

/* CLOCK_MONOTONIC in ns (0 if the clock fails). */
value ticks_fine_ns(value unit)
{
    (void)unit;
    return ns_of(CLOCK_MONOTONIC);
}

/* CLOCK_THREAD_CPUTIME_ID in ns (0 if the clock fails). */
value ticks_cpu_ns(value unit)
{
    (void)unit;
    return ns_of(CLOCK_THREAD_CPUTIME_ID);
}
