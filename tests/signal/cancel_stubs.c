/* cancel_stubs.c — C side of tests/signal/cancel.ml.
 * cancel: threads cancelled inside an interposed poll, each followed, once
 *   the writer has recycled its slot, by a thread that burns CPU (and so
 *   takes the cancelled thread's slot and gets sampled).
 * nested: the main thread waits in poll while a helper interrupts it with
 *   SIGUSR1, whose handler makes a (zero-timeout) poll of its own. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <caml/alloc.h>
#include <caml/memory.h>
#include <caml/mlvalues.h>
#include <caml/signals.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {0, ms * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static void *waiter(void *arg)
{
    (void)arg;
    for (;;)
        poll(NULL, 0, 10000);
    return NULL;
}

static volatile unsigned long sink;

__attribute__((noinline)) static void *burner(void *arg)
{
    (void)arg;
    double t0 = now();
    unsigned long x = 1;
    while (now() - t0 < 0.03)
        for (int i = 0; i < 10000; i++)
            x = x * 31 + (unsigned long)i;
    sink = x;
    return NULL;
}

value cancel_run(value rounds)
{
    CAMLparam1(rounds);
    caml_enter_blocking_section();
    for (int i = 0; i < Int_val(rounds); i++) {
        pthread_t t;
        pthread_create(&t, NULL, waiter, NULL);
        sleep_ms(20);
        pthread_cancel(t);
        pthread_join(t, NULL);
        sleep_ms(60); /* the writer (20 ms sweeps) frees the ring and the slot */
        pthread_create(&t, NULL, burner, NULL);
        pthread_join(t, NULL);
    }
    caml_leave_blocking_section();
    CAMLreturn(Val_unit);
}

static void on_usr1(int sig)
{
    (void)sig;
    int e = errno;
    poll(NULL, 0, 0);
    errno = e;
}

static volatile int stop_kicking;

static void *kicker(void *main_thread)
{
    while (!stop_kicking) {
        sleep_ms(20);
        pthread_kill(*(pthread_t *)main_thread, SIGUSR1);
    }
    return NULL;
}

__attribute__((noinline)) static int nested_outer(double secs)
{
    int woken = 0;
    double t0 = now();
    while (now() - t0 < secs)
        if (poll(NULL, 0, 1000) < 0 && errno == EINTR)
            woken++;
    return woken;
}

value cancel_nested(value secs)
{
    CAMLparam1(secs);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sigaction(SIGUSR1, &sa, NULL);
    pthread_t self = pthread_self(), k;
    double s = Double_val(secs);
    caml_enter_blocking_section();
    stop_kicking = 0;
    pthread_create(&k, NULL, kicker, &self);
    int woken = nested_outer(s);
    stop_kicking = 1;
    pthread_join(k, NULL);
    caml_leave_blocking_section();
    CAMLreturn(Val_int(woken));
}
