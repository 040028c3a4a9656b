/*
 * tests/engine/kern_stubs.c — the calling thread's system (kernel) CPU time,
 * for tests/engine/kern.ml: what share of each phase the kernel spent on the
 * thread's behalf. Owner: the engine suite.
 */
#define _GNU_SOURCE /* RUSAGE_THREAD */
#include <sys/resource.h>
#include <caml/alloc.h>
#include <caml/mlvalues.h>

/* Seconds of system CPU time used by the calling thread (getrusage
 * RUSAGE_THREAD: tick-sampled, scaled to the thread's exact CPU time);
 * 0.0 if the call fails. */
value eng_thread_systime(value unit)
{
    struct rusage ru;
    if (getrusage(RUSAGE_THREAD, &ru) != 0)
        return caml_copy_double(0.0);
    return caml_copy_double((double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6);
}
