/*
 * agent/budget.c — the handler's CPU budget (see budget.h).
 *
 * Per-thread state lives in TLS (initial-exec: no allocation, safe in the
 * handler); only the thread's own handler touches it. Totals are relaxed
 * atomics (statistics, read after sampling stopped).
 */
#include "agent/budget.h"

#include <stdatomic.h>
#include <time.h>

#include "agent/agent.h"
#include "agent/threads.h"

#define TLS_IE __attribute__((tls_model("initial-exec")))

/* A walk that took longer than this is timed on the thread's CPU clock the
 * next time (two system calls, nothing next to such a walk): a deep stack
 * stays deep, and the wall clock would also count time the thread spent
 * preempted on a busy machine. */
#define CPU_CLOCK_ABOVE_NS 50000

/* Unspent budget saved at most, unless a whole walk of the thread's stack
 * costs more (a long shallow phase does not buy a burst of deep walks). */
#define ALLOWANCE_MAX_NS 20000000

/* Short walks give way to samples of the pc alone only after this many in
 * a row each cost this many times what a sample earns, on the CPU clock:
 * a walk made slow once (a busy machine's cold caches and slow system
 * calls, a first checked read) is no evidence; nested-handler walks are
 * ten times over, every time. */
#define LEAF_COSTLY 5
#define LEAF_STREAK 4

struct bstate {
    int64_t allowance_ns;  /* budget earned minus spent */
    uint64_t debt_ns;      /* handler time not yet taken off the weight */
    uint64_t last_cost_ns;
    uint64_t full_cost_ns; /* what a whole walk of this stack costs (estimate) */
    uint64_t ns_per_frame; /* measured on the last long walk; 0: not yet */
    uint64_t earned_ns;    /* what the sample being walked earned */
    unsigned costly;       /* short walks in a row that cost LEAF_COSTLY x what they earned */
    unsigned weight;       /* of the sample being walked */
    int full;              /* the walk being timed may go the whole depth */
    int capped;            /* ... but no deeper than the allowance pays for */
    int seed_asked;        /* flamme_budget_unseeded_sigsafe ran on this thread */
};
static __thread struct bstate t_b TLS_IE;

static _Atomic uint64_t g_short, g_short_weight, g_own, g_handler_ns, g_replayed, g_leaf,
    g_leaf_weight;
/* What is left to give threads without a whole stack (relaxed: a counter
 * that publishes nothing; the compare-exchange alone keeps it >= 0). */
static _Atomic int64_t g_seed_pool = FLAMME_BUDGET_SEED_POOL_NS;

void flamme_budget_unseeded_sigsafe(void)
{
    struct bstate *b = &t_b;
    if (b->seed_asked || flamme_cfg.budget_pct == 0)
        return;
    b->seed_asked = 1;
    int64_t left = atomic_load_explicit(&g_seed_pool, memory_order_relaxed);
    while (left >= FLAMME_BUDGET_SEED_NS &&
           !atomic_compare_exchange_weak_explicit(&g_seed_pool, &left,
                                                  left - FLAMME_BUDGET_SEED_NS,
                                                  memory_order_relaxed, memory_order_relaxed))
        ;
    if (left >= FLAMME_BUDGET_SEED_NS)
        b->allowance_ns += FLAMME_BUDGET_SEED_NS;
}

void flamme_budget_replayed_sigsafe(void)
{
    atomic_fetch_add_explicit(&g_replayed, 1, memory_order_relaxed);
}

/* The handler spent ns of the thread's time: a debt on its next samples'
 * weight, spent from the allowance, counted in the totals. */
static void spend(struct bstate *b, uint64_t ns)
{
    b->debt_ns += ns;
    b->allowance_ns -= (int64_t)ns;
    atomic_fetch_add_explicit(&g_handler_ns, ns, memory_order_relaxed);
}

void flamme_budget_leaf_only_sigsafe(uint64_t wall0, unsigned weight)
{
    /* A few hundred ns on the wall clock; the estimates of what walks cost
     * (which pick their clock and tier) stay the walks'. */
    uint64_t cost = flamme_now_sigsafe() - wall0;
    spend(&t_b, cost < CPU_CLOCK_ABOVE_NS ? cost : CPU_CLOCK_ABOVE_NS);
    atomic_fetch_add_explicit(&g_leaf, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&g_leaf_weight, weight, memory_order_relaxed);
}

unsigned flamme_budget_admit_sigsafe(unsigned weight, uint64_t period_ns, uint64_t writer_ns,
                                     uint32_t *depth)
{
    struct bstate *b = &t_b;
    b->allowance_ns -= (int64_t)writer_ns;
    b->full = 1;
    b->capped = 0;
    if (period_ns == 0)
        return weight;
    uint64_t own = b->debt_ns / period_ns;
    if (own > weight)
        own = weight;
    if (own) {
        weight -= (unsigned)own;
        b->debt_ns -= own * period_ns;
        atomic_fetch_add_explicit(&g_own, own, memory_order_relaxed);
    }
    b->weight = weight;
    if (weight == 0 || flamme_cfg.budget_pct == 0)
        return weight;
    b->earned_ns = weight * period_ns * (uint64_t)flamme_cfg.budget_pct / 100;
    b->allowance_ns += (int64_t)b->earned_ns;
    int64_t max = b->full_cost_ns > ALLOWANCE_MAX_NS ? (int64_t)b->full_cost_ns : ALLOWANCE_MAX_NS;
    if (b->allowance_ns > max)
        b->allowance_ns = max;
    if (*depth <= FLAMME_BUDGET_SHORT_DEPTH)
        return weight;
    /* A whole walk once the budget covers what the last one cost; the stack
     * may have grown since, so the walk stops where the allowance ends
     * (frames it can pay for at the measured cost per frame). In between,
     * short walks. */
    if (b->allowance_ns < -(int64_t)FLAMME_BUDGET_LEAF_BELOW_NS && b->costly >= LEAF_STREAK) {
        /* Short walks cost many times what a sample earns (each reads
         * many stack switches), so they would never pay the overdraft
         * back: none until the allowance is above the line again, then
         * one, which measures them anew. (An overdraft short walks can pay
         * back, the writer's charge, keeps them.) */
        b->full = 0;
        *depth = FLAMME_BUDGET_LEAF_DEPTH;
    } else if (b->allowance_ns < (int64_t)b->full_cost_ns) {
        b->full = 0;
        *depth = FLAMME_BUDGET_SHORT_DEPTH;
    } else if (b->ns_per_frame) {
        uint64_t can = (uint64_t)b->allowance_ns / b->ns_per_frame;
        if (can < FLAMME_BUDGET_SHORT_DEPTH)
            can = FLAMME_BUDGET_SHORT_DEPTH;
        if (can < *depth) {
            *depth = (uint32_t)can;
            b->capped = 1;
        }
    }
    return weight;
}

void flamme_budget_start_sigsafe(struct flamme_budget_clock *c)
{
    c->wall0 = flamme_now_sigsafe();
    const struct bstate *b = &t_b;
    c->cpu0 = (b->full ? b->full_cost_ns : b->last_cost_ns) > CPU_CLOCK_ABOVE_NS
                  ? flamme_cpu_ns_sigsafe(CLOCK_THREAD_CPUTIME_ID)
                  : 0;
}

uint64_t flamme_budget_charge_sigsafe(const struct flamme_budget_clock *c, uint32_t frames,
                                      int truncated)
{
    struct bstate *b = &t_b;
    uint64_t cost = 0, cpu1, charged;
    int on_cpu = c->cpu0 && (cpu1 = flamme_cpu_ns_sigsafe(CLOCK_THREAD_CPUTIME_ID)) >= c->cpu0;
    if (on_cpu) {
        cost = charged = cpu1 - c->cpu0;
    } else {
        /* A walk expected short, timed on the wall clock: longer than
         * CPU_CLOCK_ABOVE_NS is mostly the thread preempted in the handler
         * (a busy machine, or the writer its doorbell woke), not CPU the
         * program lost. (Charged in full, deepfx under load 13 lost 16-38
         * of ~800 periods as the handler's for ~8 ms of real handler CPU.)
         * Such a walk is charged what the last one of its kind cost, at
         * most CPU_CLOCK_ABOVE_NS: 3-10% of a compiler's walks on a busy
         * machine, each charged the line, were up to a fifth of its
         * handler's charge. Its estimate is just past the line, so the
         * next such walk is timed on the CPU clock, and a walk that really
         * got expensive is charged in full from then on; not the wall
         * time, a preemption's milliseconds, which a whole walk then
         * waited for the allowance to cover (at 999 Hz, 200 samples
         * shortened for 4 ms: tests/unit/test_budget.c). */
        cost = flamme_now_sigsafe() - c->wall0;
        charged = cost;
        if (cost > CPU_CLOCK_ABOVE_NS) {
            uint64_t before = b->full && b->full_cost_ns ? b->full_cost_ns : b->last_cost_ns;
            charged = before && before < CPU_CLOCK_ABOVE_NS ? before : CPU_CLOCK_ABOVE_NS;
            cost = CPU_CLOCK_ABOVE_NS + 1;
        }
    }
    spend(b, charged);
    b->last_cost_ns = cost;
    if (b->full) {
        /* Stopped by the allowance: the stack is deeper than it paid for,
         * so save up for twice as much next time. */
        int short_of_stack = b->capped && truncated;
        /* A walk that took no more frames than a short one costs what a
         * short one would: no reason to save up for the next. (Counted,
         * the first walk of a thread, cold, cost as much as 0.5 ms: its
         * later deep stacks waited ~75 samples to be walked whole, their
         * short walks spending what the samples earned.) */
        b->full_cost_ns = short_of_stack                      ? 2 * cost
                          : frames > FLAMME_BUDGET_SHORT_DEPTH ? cost
                                                               : 0;
        if (frames >= 1024)
            b->ns_per_frame = cost / frames ? cost / frames : 1;
        if (short_of_stack) {
            atomic_fetch_add_explicit(&g_short, 1, memory_order_relaxed);
            atomic_fetch_add_explicit(&g_short_weight, b->weight, memory_order_relaxed);
        }
    } else if (on_cpu && cost > LEAF_COSTLY * b->earned_ns) {
        /* (A walk timed on the wall clock was expected short.) */
        b->costly++;
    } else {
        b->costly = 0;
    }
    if (!b->full && truncated) {
        /* A short walk that met its limit: a stack that fits loses nothing. */
        atomic_fetch_add_explicit(&g_short, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&g_short_weight, b->weight, memory_order_relaxed);
    }
    return charged;
}

void flamme_budget_totals(uint64_t *shortened, uint64_t *shortened_weight, uint64_t *own_periods,
                          uint64_t *handler_ns, uint64_t *replayed, uint64_t *leaf_only,
                          uint64_t *leaf_only_weight)
{
    *leaf_only = atomic_load_explicit(&g_leaf, memory_order_relaxed);
    *leaf_only_weight = atomic_load_explicit(&g_leaf_weight, memory_order_relaxed);
    *replayed = atomic_load_explicit(&g_replayed, memory_order_relaxed);
    *shortened = atomic_load_explicit(&g_short, memory_order_relaxed);
    *shortened_weight = atomic_load_explicit(&g_short_weight, memory_order_relaxed);
    *own_periods = atomic_load_explicit(&g_own, memory_order_relaxed);
    *handler_ns = atomic_load_explicit(&g_handler_ns, memory_order_relaxed);
}
