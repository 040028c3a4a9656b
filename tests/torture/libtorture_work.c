/* libtorture_work.c — a small library for the dlopen cases: torture_work(n)
 * spins for a while; its constructor starts a thread and waits for it, as a
 * library that starts a worker at load time (or Dynlink of a .cmxs that
 * does) would. */
#include <pthread.h>

static void *ctor_thread(void *arg)
{
    volatile long *x = arg;
    for (int i = 0; i < 100000; i++)
        *x = *x * 3 + 1;
    return NULL;
}

__attribute__((constructor)) static void torture_ctor(void)
{
    static long x;
    pthread_t t;
    if (pthread_create(&t, NULL, ctor_thread, &x) == 0)
        pthread_join(t, NULL);
}

long torture_work(long n)
{
    volatile long acc = n;
    for (long i = 0; i < 200000; i++)
        acc = acc * 31 + i;
    return acc;
}
