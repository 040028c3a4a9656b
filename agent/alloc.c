/*
 * agent/alloc.c — sampled allocations into the calling thread's ring (see
 * alloc.h). Normal context; the only shared state is the id counter and
 * the mode the writer records.
 */
#include "agent/alloc.h"

#include <stdatomic.h>
#include <string.h>

#include "agent/agent.h"
#include "agent/threads.h"
#include "common/profile.h"
#include "runtime_hooks/ocaml_rt.h"
#include "writer/ring.h"
#include "writer/writer.h"

static _Atomic uint64_t next_id = 1;

/* Mode: a sequence number the writer compares with the last it recorded. */
static _Atomic uint64_t mode_seq;
static _Atomic uint64_t mode_rate_bits;
static _Atomic int mode_live;
static uint64_t mode_seen; /* the last sequence number the writer recorded (writer thread) */
/* The last mode with a rate above 0 (a stop sets rate 0 while its
 * allocations may still be in the rings). */
static _Atomic uint64_t last_rate_bits;
static _Atomic int last_live;

void flamme_alloc_set_mode(double rate, int live)
{
    uint64_t bits;
    memcpy(&bits, &rate, sizeof bits);
    atomic_store_explicit(&mode_rate_bits, bits, memory_order_relaxed);
    atomic_store_explicit(&mode_live, live, memory_order_relaxed);
    if (rate > 0) {
        atomic_store_explicit(&last_live, live, memory_order_relaxed);
        /* Pairs with the acquire load in flamme_alloc_mode_last. */
        atomic_store_explicit(&last_rate_bits, bits, memory_order_release);
    }
    /* Pairs with the acquire load in flamme_alloc_mode_changed. */
    atomic_fetch_add_explicit(&mode_seq, 1, memory_order_release);
}

int flamme_alloc_mode_last(double *rate, int *live)
{
    uint64_t bits = atomic_load_explicit(&last_rate_bits, memory_order_acquire);
    if (!bits)
        return 0;
    memcpy(rate, &bits, sizeof *rate);
    *live = atomic_load_explicit(&last_live, memory_order_relaxed);
    return 1;
}

int flamme_alloc_mode_changed(double *rate, int *live)
{
    uint64_t seq = atomic_load_explicit(&mode_seq, memory_order_acquire);
    if (seq == mode_seen)
        return 0;
    mode_seen = seq;
    uint64_t bits = atomic_load_explicit(&mode_rate_bits, memory_order_relaxed);
    memcpy(rate, &bits, sizeof *rate);
    *live = atomic_load_explicit(&mode_live, memory_order_relaxed);
    return 1;
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
        trunc = 1;
    }
    uint64_t *rec = flamme_ring_reserve_sigsafe(s->ring, (uint64_t)n + FLAMME_ALLOC_HDR_WORDS);
    if (!rec) {
        ring_release(s);
        atomic_fetch_add_explicit(&s->lost, 1, memory_order_relaxed);
        flamme_writer_wake_sigsafe();
        return 0;
    }
    uint64_t id = atomic_fetch_add_explicit(&next_id, 1, memory_order_relaxed);
    int32_t domain = flamme_ocaml_domain_of_current_thread();
    uint64_t rate_bits;
    memcpy(&rate_bits, &a->rate, sizeof rate_bits);
    uint32_t flags = (a->heap & 0xff) | (a->source & 0xff) << 8 | (trunc ? 1u : 0u) << 16;
    rec[0] = flamme_ring_header(n + FLAMME_ALLOC_HDR_WORDS, FLAMME_RING_ALLOC, flags);
    rec[1] = flamme_now_sigsafe();
    rec[2] = (uint64_t)a->n_samples | (uint64_t)(uint32_t)domain << 32;
    rec[3] = a->size_words;
    rec[4] = id;
    rec[5] = rate_bits;
    memcpy(rec + FLAMME_ALLOC_HDR_WORDS, a->addrs, (size_t)n * sizeof *rec);
    flamme_ring_commit_sigsafe(s->ring, n + FLAMME_ALLOC_HDR_WORDS);
    ring_release(s);
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
    rec[0] = flamme_ring_header(FLAMME_ALLOC_EVENT_WORDS, FLAMME_RING_ALLOC_EVENT, event & 0xff);
    rec[1] = flamme_now_sigsafe();
    rec[2] = id;
    flamme_ring_commit_sigsafe(s->ring, FLAMME_ALLOC_EVENT_WORDS);
    ring_release(s);
    return 0;
}
