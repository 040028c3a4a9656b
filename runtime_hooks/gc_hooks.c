/*
 * runtime_hooks/gc_hooks.c — GC insight from the OCaml runtime's GC timing
 * hooks (see gc_hooks.h).
 *
 * Owns: the chained hooks, the per-thread "in GC" flags read by the SIGPROF
 * handler, and the per-thread event buffers the writer drains into GC
 * records.
 *
 * Contexts:
 * - the hooks run on OCaml threads in normal context (inside the runtime, with
 *   the domain lock held; a domain's backup thread runs them too while the
 *   domain is in a blocking section);
 * - flamme_gc_flags_sigsafe runs in the SIGPROF handler of the same thread;
 *   it only reads this thread's flags word;
 * - flamme_gc_drain runs on the writer thread.
 *
 * Buffers: each thread that runs a hook owns one single-producer /
 * single-consumer ring of events. Buffers are linked into a push-only list
 * and never freed (the writer may be reading one while its thread exits);
 * a thread's buffer is released at thread exit (pthread key destructor) and
 * claimed again by a later thread, which bounds memory by the number of
 * threads alive at once.
 */
#include "runtime_hooks/gc_hooks.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "agent/agent.h"
#include "runtime_hooks/ocaml_rt.h"
#include "runtime_hooks/ocaml_layout.h"

#define TLS_IE __attribute__((tls_model("initial-exec")))

/* Events per thread between two writer sweeps (20 ms apart): a domain does
 * at most a few hundred minor collections per second, so 1024 is ample. */
#define GC_RING 1024u

typedef void (*timing_hook)(void);

struct gc_ev {
    uint64_t start_ns, duration_ns;
    uint32_t tid;
    int32_t domain;
    uint8_t kind;
};

struct gcbuf {
    struct gcbuf *next;      /* immutable once the buffer is in the list */
    _Atomic int owned;       /* 1 while a live thread produces into it */
    _Atomic uint64_t head;   /* producer: next slot to write (release) */
    _Atomic uint64_t tail;   /* consumer: next slot to read (release) */
    struct gc_ev ev[GC_RING];
};

static _Atomic(struct gcbuf *) all_bufs;
static pthread_key_t release_key;

/* The runtime's hook variables and the hooks that were there before ours. */
static _Atomic(timing_hook) *var_minor_begin, *var_minor_end, *var_major_begin, *var_major_end;
static timing_hook prev_minor_begin, prev_minor_end, prev_major_begin, prev_major_end;
static pthread_mutex_t install_lock = PTHREAD_MUTEX_INITIALIZER;
static int installed; /* under install_lock */

/* Per-thread state. The flags word is what the handler reads; the rest is
 * only touched by the hooks of this thread. */
static __thread _Atomic uint32_t t_flags TLS_IE;
static __thread int t_depth_minor TLS_IE, t_depth_major TLS_IE;
static __thread uint64_t t_start_minor TLS_IE, t_start_major TLS_IE;
static __thread struct gcbuf *t_buf TLS_IE;
static __thread void **t_state_slot TLS_IE;
static __thread uint32_t t_tid TLS_IE;
static __thread int t_ready TLS_IE; /* tid, caml_state slot and buffer looked up */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Key destructor at thread exit: hands the buffer to a later thread. Pairs
 * with the acquire CAS in get_buf, so the next owner sees our head. */
static void release_buf(void *b)
{
    atomic_store_explicit(&((struct gcbuf *)b)->owned, 0, memory_order_release);
}

/* The calling thread's buffer: a released one from the list, else a new one
 * pushed on the list. Returns NULL if memory is exhausted (events of this
 * thread are then not recorded). */
static struct gcbuf *get_buf(void)
{
    struct gcbuf *b;
    for (b = atomic_load_explicit(&all_bufs, memory_order_acquire); b; b = b->next) {
        int zero = 0;
        if (atomic_load_explicit(&b->owned, memory_order_relaxed) == 0 &&
            atomic_compare_exchange_strong_explicit(&b->owned, &zero, 1, memory_order_acquire,
                                                    memory_order_relaxed))
            break;
    }
    if (!b) {
        /* mmap: zeroed, page-aligned, and off the profiled program's heap. */
        b = mmap(NULL, sizeof *b, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (b == MAP_FAILED)
            return NULL;
        atomic_store_explicit(&b->owned, 1, memory_order_relaxed);
        struct gcbuf *h = atomic_load_explicit(&all_bufs, memory_order_relaxed);
        do
            b->next = h;
        while (!atomic_compare_exchange_weak_explicit(&all_bufs, &h, b, memory_order_release,
                                                      memory_order_relaxed));
    }
    pthread_setspecific(release_key, b);
    return b;
}

/* First hook on this thread: cache tid, caml_state location and buffer. */
static void thread_setup(void)
{
    t_tid = (uint32_t)syscall(SYS_gettid);
    t_state_slot = flamme_ocaml_state_slot();
    t_buf = get_buf();
    t_ready = 1;
}

static int32_t current_domain(void)
{
    const char *ds = t_state_slot ? *t_state_slot : NULL;
    return ds ? *(const int32_t *)(ds + flamme_ocaml_ds_id) : -1;
}

/* Appends one event to this thread's ring (drops it when full). */
static void push(uint8_t kind, uint64_t start, uint64_t end)
{
    /* Only while profiling: events from before a (re)start would land in the
     * next profile otherwise. */
    if (!atomic_load_explicit(&flamme_agent_sampling, memory_order_acquire))
        return;
    if (!t_ready)
        thread_setup();
    struct gcbuf *b = t_buf;
    if (!b)
        return;
    uint64_t h = atomic_load_explicit(&b->head, memory_order_relaxed);
    uint64_t t = atomic_load_explicit(&b->tail, memory_order_acquire);
    if (h - t >= GC_RING)
        return; /* full: the writer is stalled; the event is dropped */
    struct gc_ev *e = &b->ev[h % GC_RING];
    e->start_ns = start;
    e->duration_ns = end - start;
    e->tid = t_tid;
    e->domain = current_domain();
    e->kind = kind;
    atomic_store_explicit(&b->head, h + 1, memory_order_release);
}

/* Begin/end pairs. Nesting happens (a domain waiting in a stop-the-world
 * request inside a major slice may serve another domain's minor collection
 * or cycle end), so each kind keeps a depth and times its outermost pair. */
static void enter(int *depth, uint64_t *start, uint32_t bit)
{
    if ((*depth)++ == 0) {
        *start = now_ns();
        atomic_fetch_or_explicit(&t_flags, bit, memory_order_relaxed);
        atomic_signal_fence(memory_order_seq_cst);
    }
}

static void leave(int *depth, uint64_t start, uint32_t bit, uint8_t kind)
{
    if (*depth == 0) /* end without begin: hooks installed mid-collection */
        return;
    if (--*depth == 0) {
        atomic_fetch_and_explicit(&t_flags, ~bit, memory_order_relaxed);
        atomic_signal_fence(memory_order_seq_cst);
        push(kind, start, now_ns());
    }
}

static void hook_minor_begin(void)
{
    enter(&t_depth_minor, &t_start_minor, FLAMME_SAMPLE_GC_MINOR);
    if (prev_minor_begin)
        prev_minor_begin();
}

static void hook_minor_end(void)
{
    leave(&t_depth_minor, t_start_minor, FLAMME_SAMPLE_GC_MINOR, FLAMME_GC_MINOR);
    if (prev_minor_end)
        prev_minor_end();
}

static void hook_major_begin(void)
{
    enter(&t_depth_major, &t_start_major, FLAMME_SAMPLE_GC_MAJOR);
    if (prev_major_begin)
        prev_major_begin();
}

static void hook_major_end(void)
{
    leave(&t_depth_major, t_start_major, FLAMME_SAMPLE_GC_MAJOR, FLAMME_GC_MAJOR_SLICE);
    if (prev_major_end)
        prev_major_end();
}

uint32_t flamme_gc_flags_sigsafe(void)
{
    return atomic_load_explicit(&t_flags, memory_order_relaxed);
}

/* Puts hook h into *var, remembering what was there; a CAS so that a hook
 * someone else installs meanwhile is chained, not lost. The release half of
 * the CAS publishes *prev before any thread can run h. */
static void chain(_Atomic(timing_hook) *var, timing_hook h, timing_hook *prev)
{
    timing_hook old = atomic_load_explicit(var, memory_order_acquire);
    do
        *prev = old;
    while (!atomic_compare_exchange_weak_explicit(var, &old, h, memory_order_acq_rel,
                                                  memory_order_acquire));
}

void flamme_gc_hooks_resolve(void)
{
    var_minor_begin = dlsym(RTLD_DEFAULT, "caml_minor_gc_begin_hook");
    var_minor_end = dlsym(RTLD_DEFAULT, "caml_minor_gc_end_hook");
    var_major_begin = dlsym(RTLD_DEFAULT, "caml_major_slice_begin_hook");
    var_major_end = dlsym(RTLD_DEFAULT, "caml_major_slice_end_hook");
}

int flamme_gc_hooks_install(void)
{
    pthread_mutex_lock(&install_lock);
    if (installed) {
        pthread_mutex_unlock(&install_lock);
        return installed > 0 ? 0 : -1;
    }
    if (!var_minor_begin || !var_minor_end || !var_major_begin || !var_major_end ||
        pthread_key_create(&release_key, release_buf) != 0) {
        installed = -1;
        pthread_mutex_unlock(&install_lock);
        return -1;
    }
    /* Ends before begins: a collection already running gets no end without
     * its begin being ours (leave ignores a depth of 0). */
    chain(var_minor_end, hook_minor_end, &prev_minor_end);
    chain(var_major_end, hook_major_end, &prev_major_end);
    chain(var_minor_begin, hook_minor_begin, &prev_minor_begin);
    chain(var_major_begin, hook_major_begin, &prev_major_begin);
    installed = 1;
    pthread_mutex_unlock(&install_lock);
    return 0;
}

int flamme_gc_drain(flamme_pw *pw)
{
    int rc = 0;
    for (struct gcbuf *b = atomic_load_explicit(&all_bufs, memory_order_acquire); b; b = b->next) {
        uint64_t t = atomic_load_explicit(&b->tail, memory_order_relaxed);
        uint64_t h = atomic_load_explicit(&b->head, memory_order_acquire);
        for (; t != h; t++) {
            const struct gc_ev *e = &b->ev[t % GC_RING];
            if (flamme_pw_gc(pw, e->tid, e->domain, e->kind, e->start_ns, e->duration_ns) != 0)
                rc = -1;
        }
        /* Frees the slots for the producer. */
        atomic_store_explicit(&b->tail, t, memory_order_release);
    }
    return rc;
}
