/*
 * tests/unit/test_budget.c — agent/budget.c, the handler's side of the
 * agent's CPU budget: what the writer charges a thread (its time beyond its
 * own share) shortens that thread's next deep samples until the budget has
 * saved it up again; without a charge, or with the budget off, deep samples
 * stay whole. budget.c is compiled in here, its clocks the real ones: the
 * walks this test "takes" cost nothing, so every figure is the budget's
 * arithmetic (2% of 1 ms periods: 20 us saved per sample).
 */
#include "agent/budget.c"
#include "tests/unit/check.h"

#include <pthread.h>

struct flamme_config flamme_cfg;

#define PERIOD_NS 1000000u
#define DEEP 100000u

struct run {
    uint64_t writer_ns; /* charged before the second sample */
    int samples;
    int shortened;      /* out: samples cut to FLAMME_BUDGET_SHORT_DEPTH frames */
    int last_shortened; /* out: the last sample (1-based) that was shortened */
    uint64_t preempt_ns;      /* wall time (a sleep: no CPU) in the tenth sample's walk */
    uint64_t tenth_charge_ns; /* out: what the tenth sample's walk was charged */
};

/* Samples of a DEEP-frame stack, one period each, in a thread of their own
 * (the budget's state is per thread); the tenth's walk preempted for
 * preempt_ns, if set, as on a busy machine. */
static void *take_samples(void *arg)
{
    struct run *r = arg;
    for (int i = 1; i <= r->samples; i++) {
        uint32_t depth = DEEP;
        unsigned w = flamme_budget_admit_sigsafe(1, PERIOD_NS, i == 2 ? r->writer_ns : 0, &depth);
        if (w != 1)
            return NULL; /* the walks cost nothing: no period is the handler's */
        struct flamme_budget_clock c;
        flamme_budget_start_sigsafe(&c);
        if (depth == FLAMME_BUDGET_SHORT_DEPTH) {
            r->shortened++;
            r->last_shortened = i;
        }
        if (i == 10 && r->preempt_ns) {
            struct timespec ts = {0, (long)r->preempt_ns};
            nanosleep(&ts, NULL);
        }
        uint64_t ns = flamme_budget_charge_sigsafe(&c, depth, 0);
        if (i == 10)
            r->tenth_charge_ns = ns;
    }
    return NULL;
}

static struct run run(int budget_pct, uint64_t writer_ns, int samples)
{
    flamme_cfg.budget_pct = budget_pct;
    struct run r = {.writer_ns = writer_ns, .samples = samples};
    pthread_t t;
    if (pthread_create(&t, NULL, take_samples, &r) == 0)
        pthread_join(t, NULL);
    return r;
}

TEST(whole_without_charge)
{
    struct run r = run(2, 0, 200);
    CHECK(r.shortened == 0);
}

/* 1 ms charged at 20 us saved per sample: ~50 samples shortened, then
 * whole walks again. */
TEST(writer_charge_shortens_then_recovers)
{
    struct run r = run(2, 1000000, 200);
    CHECK(r.shortened >= 45 && r.shortened <= 52);
    CHECK(r.last_shortened >= 46 && r.last_shortened <= 53);
    if (check_failed_in_test)
        fprintf(stderr, "  shortened %d, the last at sample %d\n", r.shortened, r.last_shortened);
}

/* Twice the charge, twice the samples. */
TEST(charge_in_proportion)
{
    struct run r = run(2, 2000000, 300);
    CHECK(r.shortened >= 95 && r.shortened <= 102);
    if (check_failed_in_test)
        fprintf(stderr, "  shortened %d\n", r.shortened);
}

TEST(budget_off_ignores_charge)
{
    struct run r = run(0, 1000000, 200);
    CHECK(r.shortened == 0);
}

struct costly {
    int samples;
    int leaf, walked; /* out: samples at FLAMME_BUDGET_LEAF_DEPTH, others */
    uint64_t spent_ns; /* out: what the walks cost (the leaf samples nothing) */
};

/* Burns ns of this thread's CPU. */
static void spin(uint64_t ns)
{
    uint64_t t0 = flamme_cpu_ns_sigsafe(CLOCK_THREAD_CPUTIME_ID);
    while (flamme_cpu_ns_sigsafe(CLOCK_THREAD_CPUTIME_ID) - t0 < ns)
        ;
}

/* Every walk costs 200 us (ten times what a sample earns): a stack of
 * nested effect handlers, each crossing read with system calls. */
static void *costly_samples(void *arg)
{
    struct costly *r = arg;
    for (int i = 1; i <= r->samples; i++) {
        uint32_t depth = DEEP;
        unsigned w = flamme_budget_admit_sigsafe(1, PERIOD_NS, 0, &depth);
        if (w && depth == FLAMME_BUDGET_LEAF_DEPTH) {
            r->leaf++;
            flamme_budget_leaf_only_sigsafe(flamme_now_sigsafe(), w);
            continue;
        }
        struct flamme_budget_clock c;
        flamme_budget_start_sigsafe(&c);
        if (w) {
            r->walked++;
            spin(200000);
            r->spent_ns += 200000;
            flamme_budget_charge_sigsafe(&c, depth, 1);
        }
    }
    return NULL;
}

/* The budget holds: past an overdraft of FLAMME_BUDGET_LEAF_BELOW_NS only
 * one walk in ~ten (what 2% pays for), the rest the pc alone. Before, every
 * sample was walked short, the handler ~20% of the thread. */
TEST(walks_that_cost_more_than_they_earn_become_pc_alone)
{
    flamme_cfg.budget_pct = 2;
    struct costly r = {.samples = 2000};
    pthread_t t;
    if (pthread_create(&t, NULL, costly_samples, &r) == 0)
        pthread_join(t, NULL);
    /* earned: 2000 samples x 20 us = 40 ms, plus the 1 ms overdraft line */
    CHECK(r.leaf >= 1700);
    CHECK(r.spent_ns <= 44000000);
    CHECK(r.walked >= 150); /* walks go on, measured anew */
    if (check_failed_in_test)
        fprintf(stderr, "  leaf %d, walked %d, %.1f ms\n", r.leaf, r.walked, r.spent_ns / 1e6);
}

/* A thread's first sample: its stack still shallow, its walk cold and
 * slow (300 us: the first reads of its rows); then its stacks are deep. */
static void *cold_then_deep(void *arg)
{
    int *whole = arg;
    flamme_budget_unseeded_sigsafe(); /* no whole stack in its memo yet */
    uint32_t depth = DEEP;
    flamme_budget_admit_sigsafe(1, PERIOD_NS, 0, &depth);
    struct flamme_budget_clock c;
    flamme_budget_start_sigsafe(&c);
    spin(300000);
    flamme_budget_charge_sigsafe(&c, 10, 0);
    depth = DEEP;
    flamme_budget_admit_sigsafe(1, PERIOD_NS, 0, &depth);
    *whole = depth == DEEP;
    return NULL;
}

/* The first deep sample of each of the first ten threads is walked whole
 * (its memo seeded, later samples replay): the first credit covers the
 * cold walk. Without it every one was shortened (0 of 12: the cold walk
 * overdrew the allowance). The eleventh and twelfth find the pool spent. */
TEST(first_deep_sample_walked_whole_ten_threads)
{
    flamme_cfg.budget_pct = 2;
    int whole[12] = {0};
    for (int i = 0; i < 12; i++) {
        pthread_t t;
        if (pthread_create(&t, NULL, cold_then_deep, &whole[i]) == 0)
            pthread_join(t, NULL);
    }
    int n = 0;
    for (int i = 0; i < 12; i++)
        n += whole[i];
    CHECK(n == FLAMME_BUDGET_SEED_POOL_NS / FLAMME_BUDGET_SEED_NS);
    CHECK(whole[0] && whole[9] && !whole[10] && !whole[11]);
    if (check_failed_in_test)
        fprintf(stderr, "  %d of 12 whole\n", n);
}

/* A whole walk timed on the wall clock and preempted for 4 ms is charged
 * what the walk before it cost (here next to nothing; it was charged 50
 * us), and the next whole walk waits for the allowance to cover no more
 * than 50 us (timed on the CPU clock, it then measures the walk anew). It
 * waited for the 4 ms, at 20 us saved per sample: 202 of the 300 samples
 * shortened, through the 212th. */
TEST(preempted_walk_is_not_saved_up_for)
{
    flamme_cfg.budget_pct = 2;
    struct run r = {.samples = 300, .preempt_ns = 4000000};
    pthread_t t;
    if (pthread_create(&t, NULL, take_samples, &r) == 0)
        pthread_join(t, NULL);
    CHECK(r.shortened <= 5);
    CHECK(r.tenth_charge_ns < 20000);
    if (check_failed_in_test)
        fprintf(stderr, "  shortened %d, the last at sample %d; the preempted walk charged %lu ns\n",
                r.shortened, r.last_shortened, (unsigned long)r.tenth_charge_ns);
}

int main(void)
{
    RUN(whole_without_charge);
    RUN(writer_charge_shortens_then_recovers);
    RUN(charge_in_proportion);
    RUN(budget_off_ignores_charge);
    RUN(walks_that_cost_more_than_they_earn_become_pc_alone);
    RUN(first_deep_sample_walked_whole_ten_threads);
    RUN(preempted_walk_is_not_saved_up_for);
    return CHECK_DONE();
}
