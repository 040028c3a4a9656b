/* main_pthread_exit_stubs.c — a C worker thread, and pthread_exit for the
 * main thread. */
#include <pthread.h>
#include <stdio.h>
#include <caml/mlvalues.h>

static void *worker(void *arg)
{
    volatile unsigned long x = 1;
    for (long i = 0; i < 150000000; i++)
        x = x * 2862933555777941757ul + 3037000493ul;
    FILE *f = fopen("worker.txt", "w");
    if (f) {
        fprintf(f, "worker done %lu\n", x & 0xff);
        fclose(f);
    }
    return arg;
}

value torture_start_worker(value u)
{
    pthread_t t;
    pthread_create(&t, NULL, worker, NULL);
    return u;
}

value torture_main_pthread_exit(value u)
{
    pthread_exit(NULL);
    return u;
}
