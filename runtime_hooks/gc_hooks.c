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
#include "common/forkchild.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "agent/agent.h"
#include "agent/alloc.h"
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
    _Atomic uint64_t nmajor; /* major slices begun by its owners (relaxed) */
    struct gc_ev ev[GC_RING];
};

static _Atomic(struct gcbuf *) all_bufs;
static pthread_key_t release_key;

/* The runtime's hook variables and the hooks that were there before ours. */
static _Atomic(timing_hook) *var_minor_begin, *var_minor_end, *var_major_begin, *var_major_end;
static timing_hook prev_minor_begin, prev_minor_end, prev_major_begin, prev_major_end;
static pthread_mutex_t install_lock = PTHREAD_MUTEX_INITIALIZER;
static int installed; /* under install_lock */

/* Per-thread state, one TLS block so that a hook computes its address once
 * (the major-slice hooks can run a million times a second). The flags word
 * is what the handler reads; the rest is only touched by the hooks of this
 * thread. */
struct hstate {
    _Atomic uint32_t flags;
    int depth_minor, depth_major;
    uint32_t major_epoch; /* major_epoch when depth_major was last valid */
    uint32_t idle_streak; /* major slices in a row with nothing to do */
    int ready;           /* tid, caml_state slot and buffer looked up */
    uint64_t start_minor, start_major; /* 0: this pair is not timed */
    void **state_slot;   /* this thread's caml_state */
    struct gcbuf *buf;
    uint32_t tid;
};
static __thread struct hstate t_hs TLS_IE;

/* Pausing the major-slice hooks. A domain waiting for others to finish a
 * cycle runs empty major slices back to back, millions a second; even a
 * hook that only sets a flag is then a few percent of the program. So the
 * major hooks are taken out of the runtime for a pause when a thread sees
 * IDLE_STREAK slices in a row with nothing to do, or when the writer
 * measures more than BUSY_SLICES_PER_S; the writer puts them back when the
 * pause is over. The pause doubles (PAUSE_MIN_NS to PAUSE_MAX_NS) when the
 * next one comes right after a resume and halves otherwise (the rate comes
 * in bursts). major_epoch changes at each pause and resume: a thread whose
 * depth_major dates from another epoch may have missed an end hook, so its
 * depth and GC_MAJOR flag are not trusted.
 * paused: 0 hooks in, 2 a thread is taking them out, 1 out (release: the
 * pause's fields are written). The thread that moves it from 0 owns the
 * pause fields until it stores 1; the writer owns them while it is 1. */
#define IDLE_STREAK 2000u
#define BUSY_SLICES_PER_S 200000u
#define RATE_WINDOW_NS 20000000u
#define PAUSE_MIN_NS 200000000u
#define PAUSE_MAX_NS 3200000000u
#define BACK_SOON_NS 100000000u
static _Atomic uint32_t major_epoch;
static _Atomic int paused;
static uint64_t pause_start_ns, pause_ns = PAUSE_MIN_NS, resume_ns, paused_total_ns, pauses;
static uint64_t rate_since_ns, rate_since_count; /* writer only */

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
static void thread_setup(struct hstate *h)
{
    h->tid = (uint32_t)syscall(SYS_gettid);
    h->state_slot = flamme_ocaml_state_slot();
    h->buf = get_buf();
    h->ready = 1;
}

/* Appends one event to this thread's ring (drops it when full). */
static void push(struct hstate *hs, uint8_t kind, uint64_t start, uint64_t end)
{
    /* Only while profiling: events from before a (re)start would land in the
     * next profile otherwise. */
    if (!atomic_load_explicit(&flamme_agent_sampling, memory_order_acquire))
        return;
    if (!hs->ready)
        thread_setup(hs);
    struct gcbuf *b = hs->buf;
    if (!b)
        return;
    uint64_t h = atomic_load_explicit(&b->head, memory_order_relaxed);
    uint64_t t = atomic_load_explicit(&b->tail, memory_order_acquire);
    if (h - t >= GC_RING)
        return; /* full: the writer is stalled; the event is dropped */
    struct gc_ev *e = &b->ev[h % GC_RING];
    const char *ds = hs->state_slot ? *hs->state_slot : NULL;
    e->start_ns = start;
    e->duration_ns = end - start;
    e->tid = hs->tid;
    e->domain = ds ? *(const int32_t *)(ds + flamme_ocaml_ds_id) : -1;
    e->kind = kind;
    atomic_store_explicit(&b->head, h + 1, memory_order_release);
}

/* Sets or clears one of this thread's flag bits. Only this thread writes
 * the flags (the handler only reads them), so a plain load and store do: no
 * locked instruction on a path the runtime may take a million times a
 * second. The signal fence orders the store before what the hook does next,
 * as seen by this thread's handler. */
static void set_flag(struct hstate *h, uint32_t bit, int on)
{
    uint32_t f = atomic_load_explicit(&h->flags, memory_order_relaxed);
    atomic_store_explicit(&h->flags, on ? f | bit : f & ~bit, memory_order_relaxed);
    atomic_signal_fence(memory_order_seq_cst);
}

/* Whether a major slice about to begin has nothing to do on this domain:
 * marking and sweeping are done (Caml_state->marking_done, sweeping_done;
 * same offsets in 5.1-5.5; 5.5's slices between the end of sweeping and the
 * start of marking, with marking_done still 0, are timed: one a minor
 * collection, not a loop). The runtime calls such slices back to back, a
 * few hundred nanoseconds each, while it waits for other domains to finish a
 * cycle (Gc.major, Gc.full_major, Gc.compact, domain spawn and exit); a clock
 * read would cost a good share of such a slice. They are flagged but not
 * timed (doc/format.md, GC record). */
#define DS_MARKING_DONE 112
#define DS_SWEEPING_DONE 120
static int idle_major_slice(struct hstate *h)
{
    if (!h->ready)
        thread_setup(h);
    const char *ds = h->state_slot ? *h->state_slot : NULL;
    return ds && *(const uintptr_t *)(ds + DS_MARKING_DONE) &&
           *(const uintptr_t *)(ds + DS_SWEEPING_DONE);
}

/* Begin/end pairs. Nesting happens (a domain waiting in a stop-the-world
 * request inside a major slice may serve another domain's minor collection
 * or cycle end), so each kind keeps a depth and times its outermost pair;
 * a start of 0 means the pair is not timed. */
static void leave(struct hstate *h, int *depth, uint64_t start, uint32_t bit, uint8_t kind)
{
    if (*depth == 0) /* end without begin: hooks installed mid-collection */
        return;
    if (--*depth == 0) {
        set_flag(h, bit, 0);
        if (start)
            push(h, kind, start, now_ns());
    }
}

/* Swaps *var from `from` to `to` if it still holds `from` (a hook chained
 * over ours since cannot be taken out). Returns 1 if swapped. */
static int swap_hook(_Atomic(timing_hook) *var, timing_hook from, timing_hook to)
{
    return atomic_compare_exchange_strong_explicit(var, &from, to, memory_order_acq_rel,
                                                   memory_order_acquire);
}

static void hook_major_begin(void);
static void hook_major_end(void);

/* Takes the major-slice hooks out for a pause (see above); any thread. */
static void pause_major_hooks(void)
{
    int zero = 0;
    if (!atomic_compare_exchange_strong_explicit(&paused, &zero, 2, memory_order_acquire,
                                                 memory_order_relaxed))
        return;
    if (!swap_hook(var_major_begin, hook_major_begin, prev_major_begin)) {
        atomic_store_explicit(&paused, 0, memory_order_release);
        return;
    }
    if (!swap_hook(var_major_end, hook_major_end, prev_major_end)) {
        swap_hook(var_major_begin, prev_major_begin, hook_major_begin);
        atomic_store_explicit(&paused, 0, memory_order_release);
        return;
    }
    uint64_t now = now_ns();
    if (pauses && now - resume_ns < BACK_SOON_NS)
        pause_ns = pause_ns * 2 > PAUSE_MAX_NS ? PAUSE_MAX_NS : pause_ns * 2;
    else
        pause_ns = pause_ns / 2 < PAUSE_MIN_NS ? PAUSE_MIN_NS : pause_ns / 2;
    pause_start_ns = now;
    pauses++;
    atomic_fetch_add_explicit(&major_epoch, 1, memory_order_relaxed);
    /* Pairs with the acquire load in pace_major_hooks. */
    atomic_store_explicit(&paused, 1, memory_order_release);
}

/* ---- Heap-fill allocation sampling (doc/design.md) ----
 * caml_domain_state fields: young_ptr, young_end, allocated_words (the
 * same offsets in 5.3-5.5), and unique_id and the cumulative
 * statistics whose difference counts the words allocated directly in the
 * major heap (stat_major_words + allocated_words - stat_promoted_words),
 * at the running release's offsets (runtime_hooks/ocaml_layout.h;
 * flamme_gc_heapfill_supported says whether it has them). */
#define DS_YOUNG_PTR 8
#define DS_YOUNG_END 24
#define DS_ALLOCATED_WORDS 128
#define HF_DOMAINS 4096

_Atomic int flamme_gc_heapfill;

/* Per domain (by id): the domain incarnation it describes, the direct
 * words counted so far, and weights no stack took yet. Touched only by
 * the thread holding the domain (its own, or its backup thread). */
struct hf_dom {
    int seen; /* unique_id and direct_seen describe a live domain */
    int32_t unique_id;
    uint64_t direct_seen;
    uint64_t carry[2]; /* minor, major */
};
static struct hf_dom hf_doms[HF_DOMAINS];

static void hf_take(const char *ds, int minor_too, uintptr_t ret, uintptr_t sp, uintptr_t fp)
{
    int32_t id = *(const int32_t *)(ds + flamme_ocaml_ds_id);
    if (id < 0 || id >= HF_DOMAINS)
        return;
    struct hf_dom *d = &hf_doms[id];
    int32_t uid = *(const int32_t *)(ds + flamme_ocaml_ds_unique_id);
    uint64_t direct = *(const uint64_t *)(ds + flamme_ocaml_ds_stat_major) +
                      *(const uint64_t *)(ds + DS_ALLOCATED_WORDS) -
                      *(const uint64_t *)(ds + flamme_ocaml_ds_stat_promoted);
    if (!d->seen || d->unique_id != uid) {
        /* A domain first seen: its counters started at 0 with it (a
         * terminating domain's are reset), and a heap-fill profile starts
         * with the program, so all it counted is the profile's. */
        d->seen = 1;
        d->unique_id = uid;
        d->direct_seen = 0;
        d->carry[0] = d->carry[1] = 0;
    }
    uint64_t w[2] = {0, 0};
    if (minor_too) {
        uintptr_t yp = *(const uintptr_t *)(ds + DS_YOUNG_PTR);
        uintptr_t ye = *(const uintptr_t *)(ds + DS_YOUNG_END);
        if (ye > yp)
            w[0] = (ye - yp) / 8;
    }
    if (direct > d->direct_seen)
        w[1] = direct - d->direct_seen;
    d->direct_seen = direct;
    for (int i = 0; i < 2; i++) {
        uint64_t words = w[i] + d->carry[i];
        if (!words)
            continue;
        d->carry[i] = flamme_alloc_heapfill(ret, sp, fp, words,
                                            i ? FLAMME_ALLOC_MAJOR : FLAMME_ALLOC_MINOR) == 0
                          ? 0
                          : words;
    }
}

/* A heap-fill sample, when that sampling is on, at the runtime's call of
 * a GC begin hook: f is the hook's own frame (the caller passes its
 * __builtin_frame_address(0)), so the walk starts in the runtime code
 * that called the hook. */
static void heapfill_at(struct hstate *h, int minor_too, const uintptr_t *f)
{
    if (!atomic_load_explicit(&flamme_gc_heapfill, memory_order_relaxed) ||
        !atomic_load_explicit(&flamme_agent_sampling, memory_order_acquire))
        return;
    if (!h->ready)
        thread_setup(h);
    const char *ds = h->state_slot ? *h->state_slot : NULL;
    if (ds)
        hf_take(ds, minor_too, f[1], (uintptr_t)(f + 2), f[0]);
}

static void hook_minor_begin(void)
{
    struct hstate *h = &t_hs;
    if (h->depth_minor++ == 0) {
        h->start_minor = now_ns();
        set_flag(h, FLAMME_SAMPLE_GC_MINOR, 1);
        heapfill_at(h, 1, __builtin_frame_address(0));
    }
    if (prev_minor_begin)
        prev_minor_begin();
}

static void hook_minor_end(void)
{
    struct hstate *h = &t_hs;
    leave(h, &h->depth_minor, h->start_minor, FLAMME_SAMPLE_GC_MINOR, FLAMME_GC_MINOR);
    if (prev_minor_end)
        prev_minor_end();
}

static void hook_major_begin(void)
{
    struct hstate *h = &t_hs;
    uint32_t ep = atomic_load_explicit(&major_epoch, memory_order_relaxed);
    if (h->major_epoch != ep) { /* the hooks were paused since: start afresh */
        h->major_epoch = ep;
        h->depth_major = 0;
    }
    if (h->depth_major++ == 0) {
        if (h->depth_minor == 0)
            heapfill_at(h, 0, __builtin_frame_address(0));
        if (idle_major_slice(h)) {
            h->start_major = 0;
            if (++h->idle_streak >= IDLE_STREAK) {
                h->idle_streak = 0;
                pause_major_hooks();
            }
        } else {
            h->idle_streak = 0;
            h->start_major = now_ns();
        }
        set_flag(h, FLAMME_SAMPLE_GC_MAJOR, 1);
        if (h->buf) /* single writer: a plain increment, read by the writer */
            atomic_store_explicit(&h->buf->nmajor,
                                  atomic_load_explicit(&h->buf->nmajor, memory_order_relaxed) + 1,
                                  memory_order_relaxed);
    }
    if (prev_major_begin)
        prev_major_begin();
}

static void hook_major_end(void)
{
    struct hstate *h = &t_hs;
    leave(h, &h->depth_major, h->start_major, FLAMME_SAMPLE_GC_MAJOR, FLAMME_GC_MAJOR_SLICE);
    if (prev_major_end)
        prev_major_end();
}

uint32_t flamme_gc_flags_sigsafe(void)
{
    uint32_t f = atomic_load_explicit(&t_hs.flags, memory_order_relaxed);
    /* While paused, or until this thread's next major slice after a pause,
     * the GC_MAJOR bit may be stale. */
    if (atomic_load_explicit(&paused, memory_order_relaxed) ||
        t_hs.major_epoch != atomic_load_explicit(&major_epoch, memory_order_relaxed))
        f &= ~(uint32_t)FLAMME_SAMPLE_GC_MAJOR;
    return f;
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

int flamme_gc_heapfill_supported(void)
{
    return flamme_ocaml_ds_unique_id != 0;
}

int flamme_gc_hooks_atfork_child(int follow)
{
    int quiet = flamme_mutex_reset_child(&install_lock);
    if (!follow)
        return quiet;
    /* The events still in the buffers are the parent's; the buffers of
     * threads the child does not have are free for its later ones. The
     * calling thread has a new tid. */
    for (struct gcbuf *b = atomic_load_explicit(&all_bufs, memory_order_acquire); b; b = b->next) {
        atomic_store_explicit(&b->tail, atomic_load_explicit(&b->head, memory_order_relaxed),
                              memory_order_relaxed);
        if (b != t_hs.buf)
            atomic_store_explicit(&b->owned, 0, memory_order_relaxed);
    }
    if (t_hs.ready)
        t_hs.tid = (uint32_t)syscall(SYS_gettid);
    return quiet;
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

/* Resumes the major-slice hooks when a pause is over, or pauses them when
 * the measured slice rate is above BUSY_SLICES_PER_S. Writer thread. */
static void pace_major_hooks(uint64_t now)
{
    int st = atomic_load_explicit(&paused, memory_order_acquire);
    if (st == 2)
        return; /* a thread is pausing right now */
    uint64_t count = 0;
    for (struct gcbuf *b = atomic_load_explicit(&all_bufs, memory_order_acquire); b; b = b->next)
        count += atomic_load_explicit(&b->nmajor, memory_order_relaxed);
    if (st == 1) {
        if (now - pause_start_ns < pause_ns)
            return;
        /* Ends before begins, as at install. */
        swap_hook(var_major_end, prev_major_end, hook_major_end);
        swap_hook(var_major_begin, prev_major_begin, hook_major_begin);
        atomic_fetch_add_explicit(&major_epoch, 1, memory_order_relaxed);
        paused_total_ns += now - pause_start_ns;
        resume_ns = now;
        atomic_store_explicit(&paused, 0, memory_order_release);
    } else if (rate_since_ns && now - rate_since_ns >= RATE_WINDOW_NS) {
        uint64_t rate = (count - rate_since_count) * 1000000000u / (now - rate_since_ns);
        if (rate > BUSY_SLICES_PER_S)
            pause_major_hooks();
    } else if (rate_since_ns) {
        return;
    }
    rate_since_ns = now;
    rate_since_count = count;
}

void flamme_gc_major_paused(uint64_t *total_ns, uint64_t *n)
{
    *total_ns = paused_total_ns;
    *n = pauses;
    if (atomic_load_explicit(&paused, memory_order_acquire) == 1)
        *total_ns += now_ns() - pause_start_ns;
}

int flamme_gc_drain(flamme_pw *pw)
{
    int rc = 0;
    pthread_mutex_lock(&install_lock);
    if (installed > 0)
        pace_major_hooks(now_ns());
    pthread_mutex_unlock(&install_lock);
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
