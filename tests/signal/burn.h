/* burn.h — shared by the tests/signal C stubs: burn the calling thread's
 * CPU for a given time. */
#ifndef TESTS_SIGNAL_BURN_H
#define TESTS_SIGNAL_BURN_H
#include <time.h>

static double burn_cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static volatile unsigned long burn_sink;

/* Spins until the calling thread has used secs of CPU time. */
static void burn_cpu(double secs)
{
    double t0 = burn_cpu_now();
    unsigned long x = 1;
    while (burn_cpu_now() - t0 < secs)
        for (int i = 0; i < 1000; i++)
            x = x * 31 + (unsigned long)i;
    burn_sink = x;
}
#endif
