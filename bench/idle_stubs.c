/* idle_stubs.c — C side of bench/idle.ml: what the agent costs a program's
 * blocking calls and threads. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <caml/alloc.h>
#include <caml/memory.h>
#include <caml/mlvalues.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ns per poll(NULL, 0, 0) over n calls. */
value idle_poll_ns(value n)
{
    long k = Long_val(n);
    double t0 = now();
    for (long i = 0; i < k; i++)
        poll(NULL, 0, 0);
    return caml_copy_double((now() - t0) * 1e9 / (double)k);
}

/* ns per 1-byte read of /dev/zero over n calls. */
value idle_read_ns(value n)
{
    long k = Long_val(n);
    char b;
    int fd = open("/dev/zero", O_RDONLY | O_CLOEXEC);
    double t0 = now();
    for (long i = 0; i < k; i++)
        if (read(fd, &b, 1) != 1)
            break;
    double dt = now() - t0;
    close(fd);
    return caml_copy_double(dt * 1e9 / (double)k);
}

/* ns per open, 1-byte read and close of /dev/zero over n rounds (each a
 * new descriptor, which the agent learns nothing about by a system call
 * of its own: open is interposed). */
value idle_open_ns(value n)
{
    long k = Long_val(n);
    char b;
    double t0 = now();
    for (long i = 0; i < k; i++) {
        int fd = open("/dev/zero", O_RDONLY | O_CLOEXEC);
        if (fd < 0 || read(fd, &b, 1) != 1)
            break;
        close(fd);
    }
    return caml_copy_double((now() - t0) * 1e9 / (double)k);
}

/* Sleeps s seconds (a program waiting for input), through the
 * interposed nanosleep. */
value idle_pause(value s)
{
    struct timespec ts = { (time_t)Double_val(s), 0 };
    ts.tv_nsec = (long)((Double_val(s) - (double)ts.tv_sec) * 1e9);
    while (nanosleep(&ts, &ts) != 0)
        ;
    return Val_unit;
}

static void *nothing(void *arg) { return arg; }

/* VmSize in kB after n short-lived threads, created and joined one by one. */
value idle_threads_vmsize(value n)
{
    for (long i = 0; i < Long_val(n); i++) {
        pthread_t t;
        if (pthread_create(&t, NULL, nothing, NULL) == 0)
            pthread_join(t, NULL);
    }
    long kb = -1;
    char line[256];
    FILE *f = fopen("/proc/self/status", "r");
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmSize:", 7))
            sscanf(line + 7, "%ld", &kb);
    if (f)
        fclose(f);
    return Val_long(kb);
}

/* A pool of threads that wait: each sleeps 50 ms at a time until
 * idle_pool_stop (a C library's workers waiting for work). */
#define POOL_MAX 256
static pthread_t pool[POOL_MAX];
static int pool_n, pool_stop;

static void *sleeper(void *arg)
{
    struct timespec ts = { 0, 50 * 1000 * 1000 };
    /* Pairs with the release store in idle_pool_stop. */
    while (!__atomic_load_n(&pool_stop, __ATOMIC_ACQUIRE))
        nanosleep(&ts, NULL);
    return arg;
}

/* Starts n (at most POOL_MAX) sleeping threads; returns how many started. */
value idle_pool_start(value n)
{
    __atomic_store_n(&pool_stop, 0, __ATOMIC_RELEASE);
    for (pool_n = 0; pool_n < Long_val(n) && pool_n < POOL_MAX; pool_n++)
        if (pthread_create(&pool[pool_n], NULL, sleeper, NULL) != 0)
            break;
    return Val_long(pool_n);
}

/* Stops and joins the pool's threads. */
value idle_pool_stop(value unit)
{
    /* Pairs with the acquire load in sleeper. */
    __atomic_store_n(&pool_stop, 1, __ATOMIC_RELEASE);
    for (int i = 0; i < pool_n; i++)
        pthread_join(pool[i], NULL);
    pool_n = 0;
    return unit;
}
