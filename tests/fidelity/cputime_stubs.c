/*
 * tests/fidelity/cputime_stubs.c — the calling thread's CPU time for the
 * rate and split programs (CLOCK_THREAD_CPUTIME_ID: excludes the agent's
 * writer thread, which Sys.time counts). Owner: the fidelity suite.
 */
#include <time.h>
#include <caml/alloc.h>
#include <caml/mlvalues.h>

/* Seconds of CPU used by the calling thread; 0.0 if the clock fails. */
value fid_thread_cputime(value unit)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
        return caml_copy_double(0.0);
    return caml_copy_double((double)ts.tv_sec + (double)ts.tv_nsec * 1e-9);
}
