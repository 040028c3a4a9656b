/* masked_stubs.c — C side of tests/signal/masked.ml: burn CPU with every
 * signal blocked (as C code guarding a critical section does), then with
 * none. */
#define _GNU_SOURCE
#include <signal.h>
#include <time.h>

#include <caml/mlvalues.h>

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static volatile unsigned long sink;

static void burn(double secs)
{
    double t0 = cpu_now();
    unsigned long x = 1;
    while (cpu_now() - t0 < secs)
        for (int i = 0; i < 10000; i++)
            x = x * 31 + (unsigned long)i;
    sink = x;
}

__attribute__((noinline)) static void masked_burn(double secs)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    burn(secs);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    __asm__ volatile("" ::: "memory"); /* the samples held back land here */
}

__attribute__((noinline)) static void open_burn(double secs)
{
    burn(secs);
    __asm__ volatile("" ::: "memory");
}

value masked_run(value secs)
{
    masked_burn(Double_val(secs));
    open_burn(Double_val(secs));
    return Val_unit;
}
