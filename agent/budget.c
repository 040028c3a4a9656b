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

/* Unspent budget saved at most (a long shallow phase does not buy a burst of
 * deep walks later). */
#define ALLOWANCE_MAX_NS 20000000

struct bstate {
    int64_t allowance_ns; /* budget earned minus spent */
    uint64_t debt_ns;     /* handler time not yet taken off the weight */
    uint64_t last_cost_ns;
    uint64_t full_cost_ns; /* cost of the last walk not shortened */
    int full;             /* the walk being timed is not shortened */
};
static __thread struct bstate t_b TLS_IE;

static _Atomic uint64_t g_short, g_short_weight, g_own, g_handler_ns;

unsigned flamme_budget_admit_sigsafe(unsigned weight, uint64_t period_ns, uint32_t *depth)
{
    struct bstate *b = &t_b;
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
    if (weight == 0)
        return 0;
    b->full = 1;
    if (flamme_cfg.budget_pct == 0)
        return weight;
    b->allowance_ns += (int64_t)(weight * period_ns * (uint64_t)flamme_cfg.budget_pct / 100);
    if (b->allowance_ns > ALLOWANCE_MAX_NS)
        b->allowance_ns = ALLOWANCE_MAX_NS;
    /* A full walk only when the budget covers what the last one cost (the
     * stack's depth changes slowly): the budget is then overdrawn by at most
     * the growth of one walk. */
    uint64_t need = b->full_cost_ns < ALLOWANCE_MAX_NS ? b->full_cost_ns : ALLOWANCE_MAX_NS;
    b->full = !(b->allowance_ns < (int64_t)need && *depth > FLAMME_BUDGET_SHORT_DEPTH);
    if (!b->full) {
        *depth = FLAMME_BUDGET_SHORT_DEPTH;
        atomic_fetch_add_explicit(&g_short, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&g_short_weight, weight, memory_order_relaxed);
    }
    return weight;
}

static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
        return 0;
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void flamme_budget_start_sigsafe(struct flamme_budget_clock *c)
{
    c->wall0 = flamme_now_sigsafe();
    const struct bstate *b = &t_b;
    c->cpu0 = (b->full ? b->full_cost_ns : b->last_cost_ns) > CPU_CLOCK_ABOVE_NS ? thread_cpu_ns() : 0;
}

uint64_t flamme_budget_charge_sigsafe(const struct flamme_budget_clock *c)
{
    struct bstate *b = &t_b;
    uint64_t cost = 0, cpu1;
    if (c->cpu0 && (cpu1 = thread_cpu_ns()) >= c->cpu0)
        cost = cpu1 - c->cpu0;
    else
        cost = flamme_now_sigsafe() - c->wall0;
    b->debt_ns += cost;
    b->allowance_ns -= (int64_t)cost;
    b->last_cost_ns = cost;
    if (b->full)
        b->full_cost_ns = cost;
    atomic_fetch_add_explicit(&g_handler_ns, cost, memory_order_relaxed);
    return cost;
}

void flamme_budget_totals(uint64_t *shortened, uint64_t *shortened_weight, uint64_t *own_periods,
                          uint64_t *handler_ns)
{
    *shortened = atomic_load_explicit(&g_short, memory_order_relaxed);
    *shortened_weight = atomic_load_explicit(&g_short_weight, memory_order_relaxed);
    *own_periods = atomic_load_explicit(&g_own, memory_order_relaxed);
    *handler_ns = atomic_load_explicit(&g_handler_ns, memory_order_relaxed);
}
