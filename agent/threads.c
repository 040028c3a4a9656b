/*
 * agent/threads.c — thread registry, per-thread CPU-time timers and the
 * pthread_create interposition that finds every thread (see threads.h).
 * OCaml's systhreads library overwrites the runtime's domain hooks without
 * chaining, so interposing pthread_create is the one reliable way to see
 * domains, systhreads, runtime helpers and C threads alike.
 */
#include "agent/threads.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "agent/agent.h"
#include "agent/engine.h"
#include "agent/handler.h"
#include "agent/libc_next.h"
#include "common/forkchild.h"
#include "runtime_hooks/ocaml_rt.h"
#include "writer/writer.h"

struct flamme_slot flamme_slots[FLAMME_MAX_THREADS];
_Atomic int flamme_slots_hwm;
/* Threads of the program still running that the agent knows: the main
 * thread, and every thread started through the pthread_create wrapper,
 * counted from its creation (before it runs) to its end. Relaxed: a count,
 * nothing is published through it. */
static _Atomic int live_threads;

int flamme_threads_leave(void)
{
    return atomic_fetch_sub_explicit(&live_threads, 1, memory_order_relaxed) - 1;
}

static __thread struct flamme_slot *tls_slot;

struct flamme_slot *flamme_thread_self_sigsafe(void)
{
    return tls_slot;
}

void flamme_thread_agent_enter(void)
{
    struct flamme_slot *s = tls_slot;
    if (s)
        s->in_agent++;
    /* Pairs with the handler's read of in_agent on this thread. */
    atomic_signal_fence(memory_order_seq_cst);
}

void flamme_thread_agent_leave(void)
{
    /* Pairs with the handler's read of in_agent on this thread. */
    atomic_signal_fence(memory_order_seq_cst);
    struct flamme_slot *s = tls_slot;
    if (s && s->in_agent > 0)
        s->in_agent--;
}

/* Claims a FREE slot. Returns it in state CLAIMED, or NULL if all are taken. */
static struct flamme_slot *claim_slot(void)
{
    for (int i = 0; i < FLAMME_MAX_THREADS; i++) {
        int expect = FLAMME_SLOT_FREE;
        /* Pairs with the writer's release store of FREE after it recycled the
         * slot: its ring pointer and counters are reset before we reuse it. */
        if (atomic_compare_exchange_strong_explicit(&flamme_slots[i].state, &expect,
                                                    FLAMME_SLOT_CLAIMED, memory_order_acq_rel,
                                                    memory_order_relaxed)) {
            int hwm = atomic_load_explicit(&flamme_slots_hwm, memory_order_relaxed);
            while (hwm < i + 1 &&
                   !atomic_compare_exchange_weak_explicit(&flamme_slots_hwm, &hwm, i + 1,
                                                          memory_order_release,
                                                          memory_order_relaxed))
                ;
            return &flamme_slots[i];
        }
    }
    return NULL;
}

/* Serialises arming and disarming (start, stop, thread start and exit). */
static pthread_mutex_t arm_lock = PTHREAD_MUTEX_INITIALIZER;

/* arm_lock with cancellation off: arming calls cancellation points (close,
 * perf_event_open's fallbacks), and a thread cancelled there would die
 * holding the lock and hang every thread created after it (a thread
 * cancelled right after pthread_create does exactly that at its
 * registration). Returns the state to give back to arm_unlock. */
static int arm_lock_take(void)
{
    int old;
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old);
    pthread_mutex_lock(&arm_lock);
    return old;
}

static void arm_unlock(int old)
{
    pthread_mutex_unlock(&arm_lock);
    pthread_setcancelstate(old, NULL);
}

/* What a slot's thread starts with, the first time (registration) or
 * again (the forking thread in a fork child): its tid, no samples, no
 * loss, nothing carried or held, for the handler and the writer. */
static void slot_begin(struct flamme_slot *s)
{
    s->tid = (pid_t)syscall(SYS_gettid);
    s->held_callee = 0;
    s->memo.len = 0;
    s->last_n = 0;
    s->arming_carry = 0; /* a dead thread's periods are not this one's */
    s->dither_state = 0;
    s->dither_acct = 0;
    s->dither_switcher = 0;
    s->switcher_seen = 0;
    atomic_store(&s->in_call, 0);
    atomic_store(&s->arm_pending, 0);
    atomic_store_explicit(&s->lost, 0, memory_order_relaxed);
    atomic_store_explicit(&s->taken, 0, memory_order_relaxed);
    s->writer_lost_seen = 0;
    s->writer_announced = 0;
    s->writer_domain = -1;
    s->start_ns = flamme_now_sigsafe();
    s->end_ns = 0;
}

static void own_atfork_child(void);

int flamme_threads_fork_prepare(void)
{
    return flamme_mutex_lock_for_fork(&arm_lock);
}

void flamme_threads_fork_parent(void)
{
    pthread_mutex_unlock(&arm_lock);
}

int flamme_threads_atfork_child(int held, int follow)
{
    /* held: the forking thread itself took it (flamme_threads_fork_prepare). */
    int quiet = held ? (pthread_mutex_init(&arm_lock, NULL), 1) : flamme_mutex_reset_child(&arm_lock);
    own_atfork_child();
    /* Timers are not inherited: a timer id in a slot may later be one of
     * the child's own, which a disarm must not touch. Perf events are (a
     * copy of each descriptor, still counting the parent's thread): closed
     * now, before the child can have reused a number (the system call
     * itself: the agent's close is its interposer). */
    int hwm = atomic_load_explicit(&flamme_slots_hwm, memory_order_acquire);
    for (int i = 0; i < hwm; i++) {
        struct flamme_slot *s = &flamme_slots[i];
        atomic_store_explicit(&s->armed, 0, memory_order_relaxed);
        s->dither_ok = 0;
        if (s->perf_fd >= 0 && flamme_fd_same_sigsafe(s->perf_fd, &s->perf_id))
            syscall(SYS_close, s->perf_fd);
        s->perf_fd = -1;
    }
    atomic_store_explicit(&live_threads, tls_slot ? 1 : 0, memory_order_relaxed);
    if (!follow)
        return quiet;
    /* The child's profile begins with the one thread it has: every other
     * slot (and its ring, with samples of the parent's) is let go, and
     * this thread's starts over as the main thread of a new process. */
    for (int i = 0; i < hwm; i++) {
        struct flamme_slot *s = &flamme_slots[i];
        if (s == tls_slot || atomic_load_explicit(&s->state, memory_order_relaxed) == FLAMME_SLOT_FREE)
            continue;
        flamme_slot_release(s);
    }
    struct flamme_slot *s = tls_slot;
    if (!s)
        return quiet;
    flamme_ring_free(s->ring);
    s->ring = NULL; /* mapped afresh at its arming */
    slot_begin(s);
    s->is_main = 1;
    /* Its CPU clock starts again from 0 in the child. */
    s->perf_fallback = 0;
    s->perf_first = 0;
    s->perf_used = 0;
    s->perf_mark = 0;
    s->perf_given = 0;
    s->perf_grid = 0;
    s->perf_since = 0;
    s->perf_count = 0;
    atomic_store_explicit(&s->writer_debt_ns, 0, memory_order_relaxed);
    return quiet;
}

/* What arm_locked maps for a slot: the stack memo, then the rows' memo
 * (the memo's size keeps it 64-byte aligned), then the last sample's
 * frames. */
#define SLOT_MAP_BYTES                                                                             \
    (FLAMME_MEMO_BYTES + sizeof(struct flamme_cfi_cache) + FLAMME_LAST_FRAMES * sizeof(uint64_t))
_Static_assert(FLAMME_MEMO_BYTES % 64 == 0, "the rows' memo follows the stack memo aligned");

/* Arms s unless already armed; warns once per process on failure.
 * Caller holds arm_lock. */
static void arm_locked(struct flamme_slot *s)
{
    static int warned;
    if (atomic_load_explicit(&s->armed, memory_order_relaxed) || s->sig_blocked)
        return;
    if (!s->memo.frame) {
        /* Touched only as deep as the thread's stacks go, and the rows'
         * memo once sampling starts (36 KiB). */
        void *m = mmap(NULL, SLOT_MAP_BYTES, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m != MAP_FAILED) {
            flamme_memo_init(&s->memo, m);
            s->cfi_cache = (struct flamme_cfi_cache *)((char *)m + FLAMME_MEMO_BYTES);
            s->last_frames = (uint64_t *)(s->cfi_cache + 1);
        }
    }
    if (!s->ring) {
        struct flamme_ring *r = flamme_ring_new(flamme_cfg.ring_words);
        if (!r) {
            if (!warned) {
                warned = 1;
                flamme_agent_warn(1, "cannot map a sample ring for thread %d: %s", (int)s->tid,
                                  strerror(errno));
            }
            return;
        }
        /* Pairs with the writer's acquire load in its sweep: the ring is
         * initialised before it is drained. */
        __atomic_store_n(&s->ring, r, __ATOMIC_RELEASE);
    }
    if (s != tls_slot) {
        /* The thread waits in a blocking call that does not hold the signal
         * back (it began while not profiling): a signal would cut it short.
         * seq_cst, against the store of in_call then load of sampling in
         * agent/blocking.c: the call holds the signal, or we see it here. */
        int v = atomic_load(&s->in_call);
        while (v != 0)
            if (atomic_compare_exchange_weak(&s->in_call, &v, 2))
                return; /* armed by the writer once the call is over */
    }
    int self = s == tls_slot;
    if (self) {
        s->self_arming = 1;
        /* Pairs with the handler's read of self_arming on this thread: the
         * flag is set before the engine can fire. */
        atomic_signal_fence(memory_order_seq_cst);
    }
    int armed = flamme_engine_arm(s);
    if (self) {
        /* Pairs with the same read: arming is over before the flag clears. */
        atomic_signal_fence(memory_order_seq_cst);
        s->self_arming = 0;
    }
    if (armed != 0 && !warned) {
        warned = 1;
        flamme_agent_warn(1, "cannot start the %s engine on thread %d: %s", flamme_engine_name(),
                          (int)s->tid, strerror(errno));
    }
}

struct flamme_slot *flamme_thread_register(int is_main, uintptr_t start_routine,
                                           int32_t creator_domain)
{
    static _Atomic int warned_full;
    struct flamme_slot *s = claim_slot();
    if (!s) {
        if (!atomic_exchange(&warned_full, 1))
            flamme_agent_warn(1, "more than %d live threads; new threads are not profiled",
                              FLAMME_MAX_THREADS);
        return NULL;
    }
    s->is_main = is_main;
    atomic_store_explicit(&s->armed, 0, memory_order_relaxed);
    s->perf_fd = -1; /* perf_meta: a leftover mapping is reused/unmapped by the next arm */
    s->start_routine = start_routine;
    s->caml_state_slot = flamme_ocaml_state_slot();
    s->last_ds = NULL;
    s->n_ocaml_ranges = 0;
    s->last_domain = creator_domain;
    s->stack_lo = s->stack_hi = 0;
    slot_begin(s);
    pthread_attr_t attr;
    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
        void *addr;
        size_t size;
        if (pthread_attr_getstack(&attr, &addr, &size) == 0) {
            s->stack_lo = (uintptr_t)addr;
            s->stack_hi = (uintptr_t)addr + size;
        }
        pthread_attr_destroy(&attr);
    }
    /* The ring is mapped when the thread is first armed: a thread that
     * lives while not profiling costs no address space. */
    s->ring = NULL;
    sigset_t cur;
    pthread_sigmask(SIG_BLOCK, NULL, &cur);
    s->sig_blocked = sigismember(&cur, flamme_sample_sig) == 1;
    s->unblocked = 0;
    if (s->sig_blocked && flamme_cfg.sample_blocked) {
        /* The runtime starts its helper threads (a domain's backup thread,
         * which runs GC work while the domain waits, and the tick thread)
         * with every signal blocked so program signals never land there.
         * Unblocking only the sample signal lets the engine sample them; one
         * that is not ours is dropped on such a thread, never forwarded. */
        sigset_t prof;
        sigemptyset(&prof);
        sigaddset(&prof, flamme_sample_sig);
        if (pthread_sigmask(SIG_UNBLOCK, &prof, NULL) == 0) {
            s->sig_blocked = 0;
            s->unblocked = 1;
        }
    }
    tls_slot = s;
    if (is_main)
        atomic_fetch_add_explicit(&live_threads, 1, memory_order_relaxed);
    /* Pairs with the writer's acquire load of state: the slot's fields and
     * ring are initialised before the writer reads them. */
    atomic_store_explicit(&s->state, FLAMME_SLOT_LIVE, memory_order_release);
    /* A thread that still blocks the signal (FLAMME_SAMPLE_BLOCKED=0, or the
     * unblock failed) gets no timer: its signals would only pend. It still
     * appears in the profile. */
    if (!s->sig_blocked) {
        int cs = arm_lock_take();
        /* Pairs with the release store in flamme_agent_start, which then arms
         * every LIVE slot under arm_lock: one of the two arms this thread. */
        if (atomic_load_explicit(&flamme_agent_sampling, memory_order_acquire))
            arm_locked(s);
        arm_unlock(cs);
    }
    return s;
}

int flamme_slot_take_dead(struct flamme_slot *s)
{
    int expect = FLAMME_SLOT_DEAD;
    /* Pairs with the release store of DEAD in unregister: the last samples
     * and end_ns are visible to the taker. */
    return atomic_compare_exchange_strong_explicit(&s->state, &expect, FLAMME_SLOT_CLAIMED,
                                                   memory_order_acq_rel, memory_order_relaxed);
}

void flamme_slot_release(struct flamme_slot *s)
{
    /* The ring and the memos stay mapped for the slot's next thread: an
     * munmap of a touched mapping costs ~45 us on the 2-core VM of
     * doc/design.md (page tables freed, TLB shootdown), and a program that
     * runs 200 threads of 10 ms one after another paid the writer ~20 ms
     * for unmapping theirs. What stays resident is what the threads alive
     * at once touched; the rows' memo is kept too (its entries name the
     * set of tables they came from). Pairs with the release store of FREE
     * below: the next thread finds both empty. */
    if (s->ring)
        flamme_ring_reset(s->ring);
    s->memo.len = 0;
    s->last_n = 0;
    atomic_store_explicit(&s->writer_debt_ns, 0, memory_order_relaxed);
    /* Pairs with the acquire CAS in claim_slot. */
    atomic_store_explicit(&s->state, FLAMME_SLOT_FREE, memory_order_release);
}

void flamme_threads_recycle_dead(void)
{
    int hwm = atomic_load_explicit(&flamme_slots_hwm, memory_order_acquire);
    for (int i = 0; i < hwm; i++)
        if (flamme_slot_take_dead(&flamme_slots[i]))
            flamme_slot_release(&flamme_slots[i]);
}

/* Blocks the sample signal in the calling thread; *old gets the mask. */
static void block_sample_sig(sigset_t *old)
{
    sigset_t prof;
    sigemptyset(&prof);
    sigaddset(&prof, flamme_sample_sig);
    pthread_sigmask(SIG_BLOCK, &prof, old);
}

void flamme_thread_flush_self(void)
{
    struct flamme_slot *s = flamme_thread_self_sigsafe();
    if (!s)
        return;
    sigset_t old;
    block_sample_sig(&old);
    flamme_handler_flush_nosig(s, flamme_engine_take_due(s));
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

void flamme_thread_unregister(struct flamme_slot *s)
{
    if (!s)
        return;
    sigset_t old;
    block_sample_sig(&old);
    tls_slot = NULL; /* a sample signal still pending finds no slot and is ignored */
    /* A cancellation inside a blocking call skips its release: the
     * call it named is over. */
    s->held_callee = 0;
    flamme_handler_flush_nosig(s, flamme_engine_take_due(s));
    int cs = arm_lock_take();
    flamme_engine_disarm(s);
    arm_unlock(cs);
    s->end_ns = flamme_now_sigsafe();
    /* Pairs with the writer's acquire load: every sample pushed before is
     * visible, and the writer may now drain and free the ring. */
    atomic_store_explicit(&s->state, FLAMME_SLOT_DEAD, memory_order_release);
    /* No writer will drain it (not profiling): nothing to keep, recycle it
     * now. If a writer starts meanwhile, the one of us that takes it wins. */
    if (!flamme_writer_active() && flamme_slot_take_dead(s))
        flamme_slot_release(s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

void flamme_threads_arm_all(void)
{
    int cs = arm_lock_take();
    int hwm = atomic_load_explicit(&flamme_slots_hwm, memory_order_acquire);
    for (int i = 0; i < hwm; i++)
        if (atomic_load_explicit(&flamme_slots[i].state, memory_order_acquire) == FLAMME_SLOT_LIVE)
            arm_locked(&flamme_slots[i]);
    arm_unlock(cs);
}

void flamme_thread_call_end(struct flamme_slot *s)
{
    /* seq_cst, against the CAS to 2 in arm_locked. */
    if (s && atomic_exchange(&s->in_call, 0) == 2) {
        atomic_store_explicit(&s->arm_pending, 1, memory_order_release);
        /* The writer arms it at its next sweep: now, not after an idle
         * writer's longer wait (DRAIN_IDLE_MAX_MS). The blocking call's
         * errno is the program's. */
        int e = errno;
        flamme_writer_wake_sigsafe();
        errno = e;
    }
}

void flamme_threads_arm_pending(void)
{
    int hwm = atomic_load_explicit(&flamme_slots_hwm, memory_order_acquire);
    for (int i = 0; i < hwm; i++) {
        struct flamme_slot *s = &flamme_slots[i];
        /* Pairs with the release store in flamme_thread_call_end. */
        if (!atomic_load_explicit(&s->arm_pending, memory_order_acquire) ||
            !atomic_exchange_explicit(&s->arm_pending, 0, memory_order_acquire))
            continue;
        int cs = arm_lock_take();
        /* Pairs with the release stores in flamme_agent_start/stop. */
        if (atomic_load_explicit(&s->state, memory_order_acquire) == FLAMME_SLOT_LIVE &&
            atomic_load_explicit(&flamme_agent_sampling, memory_order_acquire))
            arm_locked(s);
        arm_unlock(cs);
    }
}

void flamme_threads_review_engine(void)
{
    static uint64_t last;
    uint64_t now = flamme_now_sigsafe();
    if (!flamme_engine_reviews())
        return;
    /* Between reviews, only the first reading of threads armed since. */
    int baseline_only = now - last < FLAMME_REVIEW_MS * 1000000ull;
    if (!baseline_only)
        last = now;
    int hwm = atomic_load_explicit(&flamme_slots_hwm, memory_order_acquire);
    for (int i = 0; i < hwm; i++) {
        struct flamme_slot *s = &flamme_slots[i];
        /* Pairs with the release store in register: tid is set. */
        if (atomic_load_explicit(&s->state, memory_order_acquire) != FLAMME_SLOT_LIVE ||
            !atomic_load_explicit(&s->armed, memory_order_relaxed) ||
            (baseline_only && __atomic_load_n(&s->review_cpu_ns, __ATOMIC_RELAXED)))
            continue; /* (relaxed: rechecked under the lock) */
        /* Under arm_lock, against the thread's exit (which disarms) and a stop. */
        int cs = arm_lock_take();
        if (atomic_load_explicit(&s->state, memory_order_acquire) == FLAMME_SLOT_LIVE &&
            atomic_load_explicit(&s->armed, memory_order_relaxed))
            flamme_engine_review(s, baseline_only);
        arm_unlock(cs);
    }
}

void flamme_threads_disarm_all(void)
{
    int cs = arm_lock_take();
    int hwm = atomic_load_explicit(&flamme_slots_hwm, memory_order_acquire);
    for (int i = 0; i < hwm; i++)
        if (atomic_load_explicit(&flamme_slots[i].state, memory_order_acquire) == FLAMME_SLOT_LIVE)
            flamme_engine_disarm(&flamme_slots[i]);
    flamme_engine_stop();
    arm_unlock(cs);
}

/* ------------------------------------------------ pthread_create interposer */

typedef int (*pthread_create_fn)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);

struct tramp {
    void *(*fn)(void *);
    void *arg;
    int32_t creator_domain;
};

static void tramp_cleanup(void *s)
{
    flamme_thread_unregister(s);
    flamme_agent_thread_exited(flamme_threads_leave());
}

/* Runs in the new thread: registers it, runs the real start routine, and
 * unregisters on return, pthread_exit or cancellation. */
static void *flamme_tramp(void *p)
{
    struct tramp t = *(struct tramp *)p;
    free(p);
    struct flamme_slot *s = flamme_thread_register(0, (uintptr_t)t.fn, t.creator_domain);
    void *ret;
    pthread_cleanup_push(tramp_cleanup, s);
    ret = t.fn(t.arg);
    pthread_cleanup_pop(1);
    return ret;
}

static pthread_create_fn real_pthread_create(void)
{
    FLAMME_LIBC_REAL(pthread_create_fn, "pthread_create");
    return real;
}

/* Creates a thread without registering it (the agent's own writer thread). */
int flamme_pthread_create_unprofiled(pthread_t *t, const pthread_attr_t *a, void *(*fn)(void *),
                                     void *arg)
{
    return real_pthread_create()(t, a, fn, arg);
}

/* The agent's joinable threads (the writer, the table builder) run on
 * stacks mapped here, not glibc's: glibc gives a new thread the stack,
 * and with it the pthread_t, of one that ended, and in a fork child those
 * of every thread of the parent. OCaml 5.3's systhreads, when the last
 * thread of a fork child ends, joins the parent's tick thread by its old
 * pthread_t: in a profiled child that had become the writer's, and the
 * child never ended (tests/e2e forkwork, a worker forked by a systhread).
 * A stack of the agent's own gives a pthread_t no thread of the program
 * had. The stacks of threads not joined yet, under own_lock. */
#define OWN_STACK_BYTES ((size_t)8 << 20)
#define OWN_THREADS 8
static struct {
    pthread_t t;
    void *stack;
} own[OWN_THREADS];
static pthread_mutex_t own_lock = PTHREAD_MUTEX_INITIALIZER;

int flamme_thread_create_own(pthread_t *t, void *(*fn)(void *), void *arg)
{
    void *st = mmap(NULL, OWN_STACK_BYTES, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (st == MAP_FAILED)
        return errno;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    mprotect(st, page, PROT_NONE); /* a guard page, as glibc's stacks have */
    pthread_attr_t a;
    int rc = pthread_attr_init(&a);
    if (rc == 0) {
        rc = pthread_attr_setstack(&a, st, OWN_STACK_BYTES);
        if (rc == 0)
            rc = real_pthread_create()(t, &a, fn, arg);
        pthread_attr_destroy(&a);
    }
    if (rc != 0) {
        munmap(st, OWN_STACK_BYTES);
        return rc;
    }
    pthread_mutex_lock(&own_lock);
    int i = 0;
    while (i < OWN_THREADS && own[i].stack)
        i++;
    if (i < OWN_THREADS) {
        own[i].t = *t;
        own[i].stack = st;
    } /* else never unmapped: at most a few of these threads exist at once */
    pthread_mutex_unlock(&own_lock);
    return 0;
}

int flamme_thread_join_own(pthread_t t)
{
    int rc = pthread_join(t, NULL);
    pthread_mutex_lock(&own_lock);
    for (int i = 0; i < OWN_THREADS; i++)
        if (own[i].stack && pthread_equal(own[i].t, t)) {
            if (rc == 0)
                munmap(own[i].stack, OWN_STACK_BYTES);
            own[i].stack = NULL;
        }
    pthread_mutex_unlock(&own_lock);
    return rc;
}

/* In a fork child: the parent's agent threads are not there; their stacks
 * are the child's copies, unused. */
static void own_atfork_child(void)
{
    pthread_mutex_init(&own_lock, NULL);
    for (int i = 0; i < OWN_THREADS; i++)
        if (own[i].stack) {
            munmap(own[i].stack, OWN_STACK_BYTES);
            own[i].stack = NULL;
        }
}

__attribute__((visibility("default"))) int pthread_create(pthread_t *t, const pthread_attr_t *a,
                                                          void *(*fn)(void *), void *arg)
{
    pthread_create_fn real = real_pthread_create();
    if (!real)
        return EAGAIN;
    /* Pairs with the release store in the constructor (0 in fork children
     * and non-OCaml processes: no wrapping at all). */
    if (!atomic_load_explicit(&flamme_agent_loaded, memory_order_acquire))
        return real(t, a, fn, arg);
    struct tramp *tr = malloc(sizeof *tr);
    if (!tr)
        return real(t, a, fn, arg);
    tr->fn = fn;
    tr->arg = arg;
    tr->creator_domain = flamme_ocaml_domain_of_current_thread();
    atomic_fetch_add_explicit(&live_threads, 1, memory_order_relaxed);
    int rc = real(t, a, flamme_tramp, tr);
    if (rc != 0) {
        flamme_threads_leave();
        free(tr);
    }
    return rc;
}
