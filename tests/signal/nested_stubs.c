/* nested_stubs.c — C side of tests/signal/nested.ml: a SIGALRM handler,
 * installed with SA_ONSTACK (as OCaml installs its own), that burns CPU
 * inside the handler at every tick of ITIMER_REAL. It runs on the thread's
 * alternate signal stack, OCaml's 8 KiB one, so the agent's sample signals
 * arrive inside it, their kernel frame below this handler's. */
#define _GNU_SOURCE
#include <signal.h>
#include <string.h>
#include <sys/time.h>

#include <caml/mlvalues.h>

#include "burn.h"

static volatile sig_atomic_t ticks;
static double spin_secs;

/* Where the handler's CPU time goes: a profile shows it as this function. */
__attribute__((noinline)) void nested_in_handler(double secs)
{
    burn_cpu(secs);
}

static void on_alarm(int sig)
{
    (void)sig;
    ticks++;
    nested_in_handler(spin_secs);
}

/* Installs the handler, which burns secs of CPU at each 10 ms tick; on
 * the alternate signal stack unless main_stack. */
value nested_start(value secs, value main_stack)
{
    spin_secs = Double_val(secs);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sa.sa_flags = (Bool_val(main_stack) ? 0 : SA_ONSTACK) | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = { { 0, 10000 }, { 0, 10000 } };
    setitimer(ITIMER_REAL, &it, NULL);
    return Val_unit;
}

/* Disarms the timer; returns the ticks the handler counted. */
value nested_stop(value unit)
{
    (void)unit;
    struct itimerval it;
    memset(&it, 0, sizeof it);
    setitimer(ITIMER_REAL, &it, NULL);
    return Val_long(ticks);
}
