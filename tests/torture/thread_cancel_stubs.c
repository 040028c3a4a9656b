/* thread_cancel_stubs.c — C side of thread_cancel.ml: one round starts a
 * spinning thread and a thread blocked in read(), cancels both, joins them
 * and returns how many ended cancelled (2 when all went well). */
#include <pthread.h>
#include <unistd.h>
#include <caml/mlvalues.h>

static void *spinner(void *arg)
{
    volatile unsigned long x = (unsigned long)arg;
    for (;;) {
        for (int i = 0; i < 10000; i++)
            x = x * 7 + 1;
        pthread_testcancel();
    }
    return NULL;
}

static void *reader(void *arg)
{
    int fd = *(int *)arg;
    char c;
    for (;;)
        if (read(fd, &c, 1) <= 0)
            break;
    return NULL;
}

value torture_cancel_round(value n)
{
    pthread_t a, b;
    int p[2];
    int ok = 0;
    if (pipe(p) != 0)
        return Val_int(0);
    if (pthread_create(&a, NULL, spinner, (void *)(long)Long_val(n)) == 0) {
        usleep(200);
        pthread_cancel(a);
        void *r;
        pthread_join(a, &r);
        ok += r == PTHREAD_CANCELED;
    }
    if (pthread_create(&b, NULL, reader, &p[0]) == 0) {
        usleep(200);
        pthread_cancel(b);
        void *r;
        pthread_join(b, &r);
        ok += r == PTHREAD_CANCELED;
    }
    close(p[0]);
    close(p[1]);
    return Val_int(ok);
}
