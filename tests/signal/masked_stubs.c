/* masked_stubs.c — C side of tests/signal/masked.ml: burn CPU with every
 * signal blocked (as C code guarding a critical section does), then with
 * none. */
#define _GNU_SOURCE
#include <signal.h>

#include <caml/mlvalues.h>

#include "burn.h"

__attribute__((noinline)) static void masked_burn(double secs)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    burn_cpu(secs);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    __asm__ volatile("" ::: "memory"); /* the samples held back land here */
}

__attribute__((noinline)) static void open_burn(double secs)
{
    burn_cpu(secs);
    __asm__ volatile("" ::: "memory");
}

value masked_run(value secs)
{
    masked_burn(Double_val(secs));
    open_burn(Double_val(secs));
    return Val_unit;
}
