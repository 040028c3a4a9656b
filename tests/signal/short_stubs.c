/* short_stubs.c — C side of tests/signal/short.ml: threads that each burn
 * less CPU than one sampling period, one after the other. */
#define _GNU_SOURCE
#include <pthread.h>
#include <time.h>

#include <caml/mlvalues.h>
#include <caml/signals.h>

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static volatile unsigned long sink;

__attribute__((noinline)) static void *short_burn(void *arg)
{
    double secs = *(double *)arg, t0 = cpu_now();
    unsigned long x = 1;
    while (cpu_now() - t0 < secs)
        for (int i = 0; i < 1000; i++)
            x = x * 31 + (unsigned long)i;
    sink = x;
    return NULL;
}

value short_run(value n, value secs)
{
    double s = Double_val(secs);
    caml_enter_blocking_section();
    for (long i = 0; i < Long_val(n); i++) {
        pthread_t t;
        if (pthread_create(&t, NULL, short_burn, &s) == 0)
            pthread_join(t, NULL);
    }
    caml_leave_blocking_section();
    return Val_unit;
}
