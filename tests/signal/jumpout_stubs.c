/* jumpout_stubs.c — C side of tests/signal/jumpout.ml: the old timeout
 * pattern of C code, a SIGALRM handler that siglongjmps out of a wait.
 * The wait (poll with a 5 s timeout) is one the agent holds its signal
 * back around, so the jump leaves the agent's interposer without its end;
 * then the thread burns CPU in jumpout_burn. */
#define _GNU_SOURCE
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <string.h>
#include <sys/time.h>

#include <caml/mlvalues.h>

#include "burn.h"

static sigjmp_buf env;

static void on_alarm(int sig)
{
    (void)sig;
    siglongjmp(env, 1);
}

/* Waits in poll until SIGALRM (50 ms) jumps out; returns 1 if it did. */
__attribute__((noinline)) static int jumpout_wait(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, NULL);
    if (sigsetjmp(env, 1))
        return 1; /* the mask at sigsetjmp is back: nothing held */
    struct itimerval it = {{0, 0}, {0, 50000}};
    setitimer(ITIMER_REAL, &it, NULL);
    poll(NULL, 0, 5000);
    return 0;
}

__attribute__((noinline)) static void jumpout_burn(double secs)
{
    burn_cpu(secs);
}

/* Rounds of a wait jumped out of, then secs of CPU burnt; returns how
 * many waits were jumped out of. */
value jumpout_run(value rounds, value secs)
{
    int jumped = 0;
    for (long i = 0; i < Long_val(rounds); i++) {
        jumped += jumpout_wait();
        jumpout_burn(Double_val(secs));
    }
    return Val_long(jumped);
}
