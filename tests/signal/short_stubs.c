/* short_stubs.c — C side of tests/signal/short.ml: threads that each burn
 * less CPU than one sampling period, one after the other. */
#define _GNU_SOURCE
#include <pthread.h>

#include <caml/mlvalues.h>
#include <caml/signals.h>

#include "burn.h"

__attribute__((noinline)) static void *short_burn(void *arg)
{
    burn_cpu(*(double *)arg);
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
