/*
 * agent/alloc.c — sampled allocations into the calling thread's ring (see
 * alloc.h). Normal context; the only shared state is the id counter (the
 * mode is the writer's: flamme_writer_alloc_mode).
 */
#include "agent/alloc.h"

#include <dlfcn.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "agent/agent.h"
#include "agent/handler.h"
#include "agent/threads.h"
#include "common/profile.h"
#include "runtime_hooks/frametable.h"
#include "runtime_hooks/gc_hooks.h"
#include "runtime_hooks/ocaml_rt.h"
#include "common/ring.h"
#include "writer/writer.h"

static _Atomic uint64_t next_id = 1;

void flamme_alloc_set_mode(double rate, int live)
{
    flamme_writer_alloc_mode(rate, live);
}

/* The calling thread's slot with its ring held against its own sample
 * handler (ring_busy set), or NULL when nothing may be written. Release
 * with ring_release. */
static struct flamme_slot *ring_hold(void)
{
    struct flamme_slot *s = flamme_thread_self_sigsafe();
    /* Pairs with the release store in flamme_agent_start/stop. */
    if (!s || !atomic_load_explicit(&flamme_agent_sampling, memory_order_acquire))
        return NULL;
    /* Pairs with the release store in arm_locked. */
    if (!__atomic_load_n(&s->ring, __ATOMIC_ACQUIRE)) {
        atomic_fetch_add_explicit(&s->lost, 1, memory_order_relaxed);
        return NULL;
    }
    /* The handler runs on this thread only, so a compiler fence orders the
     * flag against the ring writes as the handler sees them. */
    atomic_store_explicit(&s->ring_busy, 1, memory_order_relaxed);
    atomic_signal_fence(memory_order_seq_cst);
    return s;
}

static void ring_release(struct flamme_slot *s)
{
    atomic_signal_fence(memory_order_seq_cst);
    atomic_store_explicit(&s->ring_busy, 0, memory_order_relaxed);
}

uint64_t flamme_alloc_sample(const struct flamme_alloc_in *a)
{
    struct flamme_slot *s = ring_hold();
    if (!s)
        return 0;
    uint32_t n = a->n;
    int trunc = a->truncated;
    if (n > (uint32_t)flamme_cfg.depth) {
        n = (uint32_t)flamme_cfg.depth;
        trunc = FLAMME_ALLOC_CUT;
    }
    uint64_t *rec = flamme_ring_reserve_sigsafe(s->ring, (uint64_t)n + FLAMME_ALLOC_HDR_WORDS);
    if (!rec) {
        ring_release(s);
        atomic_fetch_add_explicit(&s->lost, 1, memory_order_relaxed);
        flamme_writer_wake_sigsafe();
        return 0;
    }
    uint64_t id = atomic_fetch_add_explicit(&next_id, 1, memory_order_relaxed);
    struct flamme_ring_alloc ra = {.time = flamme_now_sigsafe(), .size_words = a->size_words,
                                   .id = id, .n_samples = a->n_samples,
                                   .domain = flamme_ocaml_domain_of_current_thread(),
                                   .heap = (uint8_t)a->heap, .source = (uint8_t)a->source,
                                   .truncated = trunc, .rate = a->rate};
    flamme_ring_alloc_put(rec, n, &ra);
    memcpy(rec + FLAMME_ALLOC_HDR_WORDS, a->addrs, (size_t)n * sizeof *rec);
    flamme_ring_commit_sigsafe(s->ring, n + FLAMME_ALLOC_HDR_WORDS);
    ring_release(s);
    flamme_writer_activity_sigsafe();
    return id;
}

int flamme_alloc_event(uint64_t id, unsigned event)
{
    struct flamme_slot *s = ring_hold();
    if (!s)
        return -1;
    uint64_t *rec = flamme_ring_reserve_sigsafe(s->ring, FLAMME_ALLOC_EVENT_WORDS);
    if (!rec) {
        ring_release(s);
        atomic_fetch_add_explicit(&s->lost, 1, memory_order_relaxed);
        flamme_writer_wake_sigsafe();
        return -1;
    }
    flamme_ring_alloc_event_put(rec, flamme_now_sigsafe(), id, event);
    flamme_ring_commit_sigsafe(s->ring, FLAMME_ALLOC_EVENT_WORDS);
    ring_release(s);
    flamme_writer_activity_sigsafe();
    return 0;
}

int flamme_alloc_heapfill(uintptr_t ret, uintptr_t sp, uintptr_t fp, uint64_t words, unsigned heap)
{
    struct flamme_slot *s = ring_hold();
    if (!s)
        return 0;
    uint32_t max = (uint32_t)flamme_cfg.depth;
    uint64_t *rec = flamme_ring_reserve_sigsafe(s->ring, (uint64_t)max + FLAMME_ALLOC_HDR_WORDS);
    if (!rec) {
        ring_release(s);
        atomic_fetch_add_explicit(&s->lost, 1, memory_order_relaxed);
        flamme_writer_wake_sigsafe();
        return 0;
    }
    uint64_t *frames = rec + FLAMME_ALLOC_HDR_WORDS;
    int32_t domain;
    uint32_t wflags = 0;
    uint32_t n = flamme_walk_caller_nosig(s, ret, sp, fp, frames, max, &domain, &wflags);
    /* The runtime's frames (the collection, the allocation's slow path)
     * up to the innermost call made from OCaml code. */
    uint32_t k = 0;
    while (k < n && !flamme_frametable_is_ocaml_ret(frames[k]))
        k++;
    if (k == n) {
        ring_release(s); /* not committed: the space is reused */
        return -1;
    }
    n -= k;
    memmove(frames, frames + k, (size_t)n * sizeof *frames);
    struct flamme_ring_alloc ra = {.time = flamme_now_sigsafe(), .size_words = 0,
                                   .id = atomic_fetch_add_explicit(&next_id, 1, memory_order_relaxed),
                                   .n_samples = words > UINT32_MAX ? UINT32_MAX : (uint32_t)words,
                                   .domain = domain, .heap = (uint8_t)heap,
                                   .source = FLAMME_ALLOC_NORMAL,
                                   .truncated = (wflags & FLAMME_SAMPLE_TRUNCATED) != 0, .rate = 1.0};
    flamme_ring_alloc_put(rec, n, &ra);
    flamme_ring_commit_sigsafe(s->ring, n + FLAMME_ALLOC_HDR_WORDS);
    ring_release(s);
    flamme_writer_activity_sigsafe();
    return 0;
}

int flamme_heapfill_prepare(const char *release)
{
    if (!flamme_gc_heapfill_supported()) {
        flamme_agent_warn(1, "allocation profiling (--alloc) needs OCaml 5.3 or later; this is "
                             "%s; profiling CPU only", release);
        return -1;
    }
    void *const *tables = dlsym(RTLD_DEFAULT, "caml_frametable");
    if (!tables || flamme_frametable_index(tables) != 0) {
        flamme_agent_warn(1, "allocation profiling (--alloc): %s; profiling CPU only",
                          tables ? "out of memory" : "the program has no caml_frametable");
        return -1;
    }
    const char *live = getenv("FLAMME_LIVE");
    if (live && strcmp(live, "1") == 0)
        flamme_agent_warn(1, "--live needs the program to link the flamme library and call "
                             "Flamme.start; sampling allocations by heap fill, without a live "
                             "view (doc/design.md)");
    flamme_writer_alloc_method("heapfill");
    atomic_store_explicit(&flamme_gc_heapfill, 1, memory_order_relaxed);
    flamme_alloc_set_mode(1.0, 0);
    return 0;
}
