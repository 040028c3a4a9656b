/*
 * agent/budget.h — the handler's CPU budget: what a sample may cost, and
 * keeping the handler's own time out of what it measures.
 *
 * A timer or perf event on a thread's CPU clock also runs while the handler
 * walks: a walk of a 400,000-frame stack takes milliseconds, so at 99 Hz or
 * more the handler would cause the next sample itself, slow the program
 * without bound and count its own time as the program's. Per thread:
 * - the handler's measured time is a debt; periods it covers are taken off
 *   the weight of the next signals (they are flamme's time, not the program's);
 * - the handler may spend FLAMME_BUDGET % of the program's time (the
 *   periods it samples); until the budget has saved what a whole walk of
 *   the thread's stack costs, samples are shortened to
 *   FLAMME_BUDGET_SHORT_DEPTH frames (leaf side, flagged TRUNCATED) and keep
 *   their weight, so every period is still counted at the function it was
 *   spent in; a whole walk stops where the saved budget ends;
 * - when short walks cost many times what a sample earns, four in a row on
 *   the CPU clock (agent/budget.c, LEAF_COSTLY, LEAF_STREAK), and have
 *   overdrawn the budget by FLAMME_BUDGET_LEAF_BELOW_NS, samples are the
 *   interrupted pc alone
 *   (FLAMME_BUDGET_LEAF_DEPTH, flagged TRUNCATED, their weight kept) until
 *   it recovers: the handler's share holds whatever a short walk costs.
 * Totals go into the profile (INFO) and `flamme report`.
 *
 * Who: the handler of the sampled thread (the _sigsafe functions); the
 * writer thread reads the totals at the end. async-signal-safe: yes (the
 * _sigsafe functions).
 */
#ifndef FLAMME_AGENT_BUDGET_H
#define FLAMME_AGENT_BUDGET_H
#include <stdint.h>

/* Default share (%) of the program's CPU time the handler may use
 * (FLAMME_BUDGET). The writer thread has 1% more (the agent's 3%); what it
 * spends beyond is charged to the budgets of the threads whose samples it
 * interned (writer/writer.c, budget_sweep), so deep stacks are shortened
 * for the writer's cost too. */
#define FLAMME_BUDGET_PCT 2

/* Frames of a sample shortened for the budget. */
#define FLAMME_BUDGET_SHORT_DEPTH 64

/* The depth flamme_budget_admit_sigsafe gives when short walks, each many
 * times what a sample earns, have overdrawn the budget by more than
 * FLAMME_BUDGET_LEAF_BELOW_NS (a stack
 * whose every frame is a stack switch the handler must read with system
 * calls: thousands of nested effect handlers): the sample is the
 * interrupted pc alone, nothing read, until the allowance recovers. */
#define FLAMME_BUDGET_LEAF_DEPTH 1
#define FLAMME_BUDGET_LEAF_BELOW_NS 1000000

/* A thread's first credit (flamme_budget_unseeded_sigsafe), and what the
 * process gives in all. */
#define FLAMME_BUDGET_SEED_NS 500000
#define FLAMME_BUDGET_SEED_POOL_NS 5000000

/* Started when a sample is walked; passed to flamme_budget_charge_sigsafe. */
struct flamme_budget_clock {
    uint64_t wall0, cpu0; /* cpu0 = 0: the cost is taken from the wall clock */
};

/* Decides what a signal standing for `weight` periods becomes: returns the
 * weight of the sample to take now, or 0 when the periods were all the
 * handler's own time (no sample). Lowers *depth (the frames the walk may
 * take) when the budget is overdrawn. period_ns: the sampling period;
 * writer_ns: the writer's time charged to this thread since its last
 * sample (spent from the budget, not taken off the weight: it is another
 * thread's CPU). async-signal-safe: yes. */
unsigned flamme_budget_admit_sigsafe(unsigned weight, uint64_t period_ns, uint64_t writer_ns,
                                     uint32_t *depth);

/* Starts timing a walk. async-signal-safe: yes. */
void flamme_budget_start_sigsafe(struct flamme_budget_clock *c);

/* Charges the time since flamme_budget_start_sigsafe to the thread's budget
 * and debt (a walk timed on the wall clock and past 50 us, when the thread
 * was mostly preempted, at most what the last such walk cost); frames:
 * what the walk took, truncated: it hit its depth limit (a shortened walk
 * is counted as shortened only then).
 * Returns the ns charged. async-signal-safe: yes. */
uint64_t flamme_budget_charge_sigsafe(const struct flamme_budget_clock *c, uint32_t frames,
                                      int truncated);

/* The thread has no whole stack yet to replay frames from (agent/memo.h).
 * Frames replayed cost almost nothing, but only a whole walk gives them,
 * and the allowance of a thread with deep stacks went to short walks
 * first (its first walks cold, each short one costing more than a sample
 * earns): a 0.1 s program 120 frames deep at 999 Hz kept 8-84% of its
 * stacks whole, the first whole one after ~45 samples. Once per thread,
 * FLAMME_BUDGET_SEED_NS is added to its allowance from a process-wide pool
 * of FLAMME_BUDGET_SEED_POOL_NS (the first ten threads). async-signal-safe:
 * yes. */
void flamme_budget_unseeded_sigsafe(void);

/* Counts a sample that replayed frames of the thread's last whole stack
 * instead of walking them (agent/memo.h). async-signal-safe: yes. */
void flamme_budget_replayed_sigsafe(void);
/* Charges and counts a sample of this weight taken as its interrupted pc
 * alone (FLAMME_BUDGET_LEAF_DEPTH), begun at wall0 (flamme_now_sigsafe:
 * no CPU clock read for it), in place of flamme_budget_start_sigsafe and
 * flamme_budget_charge_sigsafe. async-signal-safe: yes. */
void flamme_budget_leaf_only_sigsafe(uint64_t wall0, unsigned weight);

/* Totals over all threads: samples shortened and their weight, periods
 * taken off as the handler's own time, handler ns, samples that replayed
 * frames of their thread's last whole stack, samples taken as their pc
 * alone and their weight. */
void flamme_budget_totals(uint64_t *shortened, uint64_t *shortened_weight, uint64_t *own_periods,
                          uint64_t *handler_ns, uint64_t *replayed, uint64_t *leaf_only,
                          uint64_t *leaf_only_weight);

#endif
