/* nested_stubs.c — C side of tests/signal/nested.ml: a SIGALRM handler,
 * installed with SA_ONSTACK (as OCaml installs its own), that burns CPU
 * inside the handler at every tick of ITIMER_REAL. It runs on the thread's
 * alternate signal stack, OCaml's 8 KiB one (sysconf's size from 5.5).
 * With "deep", the handler first takes all but 1.5 KiB of what is left of
 * that stack, as a handler may that knows its stack's size: no signal of
 * the program's own comes in meanwhile (SIGALRM is masked in its handler),
 * so nothing else needs room there. */
#define _GNU_SOURCE
#include <alloca.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>

#include <caml/mlvalues.h>

#include "burn.h"

static volatile sig_atomic_t ticks;
static double spin_secs;
/* "deep": the thread's alternate stack [deep_lo, deep_hi), else 0. */
static uintptr_t deep_lo, deep_hi;
/* What a deep handler leaves of its stack. */
#define DEEP_LEFT 1536

/* Where the handler's CPU time goes: a profile shows it as this function. */
__attribute__((noinline)) void nested_in_handler(double secs)
{
    burn_cpu(secs);
}

static void on_alarm(int sig)
{
    (void)sig;
    ticks++;
    uintptr_t here = (uintptr_t)__builtin_frame_address(0);
    if (here > deep_lo + DEEP_LEFT + 512 && here < deep_hi) {
        volatile char *buf = alloca(here - deep_lo - DEEP_LEFT);
        buf[0] = 1; /* the stack's lowest byte the handler uses */
        nested_in_handler(spin_secs);
        buf[1] = buf[0];
    } else {
        nested_in_handler(spin_secs);
    }
}

/* Installs the handler, which burns secs of CPU at each 10 ms tick; on
 * the alternate signal stack unless main_stack; deep as above. */
value nested_start(value secs, value main_stack, value deep)
{
    spin_secs = Double_val(secs);
    /* Binds clock_gettime now: a first call through lazy binding takes
     * ~3 KiB of stack (the dynamic linker saves the vector registers),
     * more than a deep handler leaves. */
    nested_in_handler(0);
    stack_t ss;
    if (Bool_val(deep) && sigaltstack(NULL, &ss) == 0 && !(ss.ss_flags & SS_DISABLE)) {
        deep_lo = (uintptr_t)ss.ss_sp;
        deep_hi = deep_lo + ss.ss_size;
    }
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
    /* The handler reads back as installed: an empty mask. */
    struct sigaction back;
    if (sigaction(SIGALRM, NULL, &back) == 0)
        for (int sig = 1; sig < 65; sig++)
            if (sigismember(&back.sa_mask, sig) == 1)
                fprintf(stderr, "nested: signal %d in the handler's mask as read back\n", sig);
    return Val_long(ticks);
}
