/*
 * agent/sigaction.c — the program's signal handlers that run on an
 * alternate signal stack (SA_ONSTACK) keep the agent's sample signals out:
 * they are added to such a handler's mask, by the interposed sigaction and
 * once for the handlers already there when the agent takes a signal.
 *
 * Why: an alternate stack is as big as its owner chose for its own
 * handlers (OCaml's: 8 KiB up to 5.4), and no other signal of the
 * program's comes in while one runs there unless the program says so. A
 * sample signal would: its kernel frame (~3.4 KiB with AVX-512 state) goes
 * below the handler's on the same stack, and where that does not fit the
 * kernel kills the program with SIGSEGV. It did, 1 run in ~120 at 999 Hz,
 * when the signal came while a handler's first call of a libc function
 * went through the dynamic linker's lazy binding (which saves the vector
 * registers on the stack, ~3 KiB); every run of a handler using all but
 * 1.5 KiB of its stack (tests/signal/nested.ml "deep").
 * The signal waits until the handler returns and is taken then, with all
 * its periods, at the code the handler interrupted: the handler's own CPU
 * time is profiled there. OCaml's handlers only note the signal (the
 * OCaml function runs later, at a poll point), so this is C code's time.
 *
 * Who: the program (any thread, any context: sigaction is
 * async-signal-safe and so is this), and flamme_sigaction_block from the
 * handler's installation (agent/handler.c), normal context.
 */
#include "agent/sigaction.h"

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "agent/libc_next.h"

typedef int (*sigaction_fn)(int, const struct sigaction *, struct sigaction *);

/* How long the handlers running when their masks change get to return. */
#define HANDLER_GRACE_NS 50000000

/* The agent's sample signals, as bit (sig - 1); 0 until one is taken.
 * Relaxed: each caller reads a whole mask. A handler that another thread
 * installs in the instant a signal is added (it read the mask before, and
 * flamme_sigaction_block's walk passed its signal already) goes without
 * it; the agent takes its signals at start and at an attach. */
static _Atomic uint64_t blocked_bits;
/* For each signal, the bits this file added to its handler's mask (not in
 * the mask the program gave), taken out again of what the program reads
 * back. Relaxed: a hint about one signal's own action. */
static _Atomic uint64_t added_bits[65];

/* libc's sigaction; the constructor resolved it (flamme_libc_next_init),
 * so a call from a signal handler finds it here. */
static sigaction_fn real_sigaction(void)
{
    FLAMME_LIBC_REAL(sigaction_fn, "sigaction");
    return real;
}

/* Whether act is a handler (not SIG_DFL or SIG_IGN) on the alternate
 * stack. */
static int on_altstack(const struct sigaction *act)
{
    if (!(act->sa_flags & SA_ONSTACK))
        return 0;
    return (act->sa_flags & SA_SIGINFO) ||
           (act->sa_handler != SIG_DFL && act->sa_handler != SIG_IGN);
}

/* The sample signals not in act's mask, as bits, sig itself left out (its
 * handler is the agent's own or the program's replacing it). */
static uint64_t missing(int sig, const struct sigaction *act, uint64_t bits)
{
    uint64_t out = 0;
    for (int s = 1; s <= 64; s++)
        if ((bits >> (s - 1) & 1) && s != sig && sigismember(&act->sa_mask, s) == 0)
            out |= 1ull << (s - 1);
    return out;
}

static void mask_add(struct sigaction *act, uint64_t bits)
{
    for (int s = 1; s <= 64; s++)
        if (bits >> (s - 1) & 1)
            sigaddset(&act->sa_mask, s);
}

static void mask_remove(struct sigaction *act, uint64_t bits)
{
    for (int s = 1; s <= 64; s++)
        if (bits >> (s - 1) & 1)
            sigdelset(&act->sa_mask, s);
}

__attribute__((visibility("default"))) int sigaction(int sig, const struct sigaction *act,
                                                     struct sigaction *old)
{
    sigaction_fn real = real_sigaction();
    if (!real)
        return -1;
    if (sig < 1 || sig > 64)
        return real(sig, act, old);
    uint64_t bits = atomic_load_explicit(&blocked_bits, memory_order_relaxed);
    struct sigaction mine;
    const struct sigaction *use = act;
    uint64_t add = 0;
    if (act && bits && on_altstack(act) && (add = missing(sig, act, bits)) != 0) {
        mine = *act;
        mask_add(&mine, add);
        use = &mine;
    }
    uint64_t before = atomic_load_explicit(&added_bits[sig], memory_order_relaxed);
    int rc = real(sig, use, old);
    if (rc != 0)
        return rc;
    if (old)
        mask_remove(old, before);
    if (act)
        atomic_store_explicit(&added_bits[sig], add, memory_order_relaxed);
    return 0;
}

void flamme_sigaction_block(int sample_sig)
{
    if (sample_sig < 1 || sample_sig > 64)
        return;
    uint64_t bit = 1ull << (sample_sig - 1);
    if (atomic_fetch_or_explicit(&blocked_bits, bit, memory_order_relaxed) & bit)
        return;
    sigaction_fn real = real_sigaction();
    if (!real)
        return;
    int changed = 0;
    for (int sig = 1; sig <= 64; sig++) {
        struct sigaction cur;
        if (sig == sample_sig || real(sig, NULL, &cur) != 0 || !on_altstack(&cur) ||
            !missing(sig, &cur, bit))
            continue;
        mask_add(&cur, bit);
        if (real(sig, &cur, NULL) == 0) {
            atomic_fetch_or_explicit(&added_bits[sig], bit, memory_order_relaxed);
            changed = 1;
        }
    }
    /* A handler already running keeps the mask it was entered with: the
     * first sample signal after the arming could still come inside it (at
     * an attach, tests/signal test_nested_attach died so in 1 of 5 CI
     * runs). Such handlers are given time to return before any engine is
     * armed. The system call itself: libc's nanosleep is the agent's
     * interposer. */
    if (changed) {
        struct timespec ts = {0, HANDLER_GRACE_NS};
        while (syscall(SYS_nanosleep, &ts, &ts) != 0 && errno == EINTR)
            ;
    }
}
