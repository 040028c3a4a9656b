/*
 * tests/unit/test_intern.c — writer/intern.c against the whole-stack rule it
 * replaced: random stacks of several threads, each a random change of that
 * thread's previous one (leaf-side frames popped and pushed, a frame in the
 * middle swapped, a new thread root, the empty stack), over addresses whose
 * frames are skipped, unnamed or named vDSO code, thread roots or plain.
 * Every stack must get the node its kept frames, interned from the root of
 * the prefix tree, get, and the same root flag; frames are named leaf first
 * with their callee's facts, and only below the part shared with the
 * thread's previous stack.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "common/profile.h"
#include "tests/unit/check.h"
#include "writer/intern.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
    return check_xorshift(&rng_state);
}

/* Addresses 0x1000 + 16 * k (k < NADDR) name frame k; a return address is
 * one more than the named address, a leaf pc the address itself. */
enum { NADDR = 64 };
static uint8_t fact_of[NADDR];
static uint32_t named, bad_callee;

static uint32_t frame_cb(void *ctx, uint64_t addr, uint8_t callee_facts, uint8_t *facts)
{
    const uint8_t *expect_callee = ctx;
    if (addr < 0x1000 || (addr - 0x1000) % 16 || (addr - 0x1000) / 16 >= NADDR)
        return UINT32_MAX;
    uint32_t k = (uint32_t)((addr - 0x1000) / 16);
    if (callee_facts != expect_callee[named])
        bad_callee++;
    named++;
    *facts = fact_of[k];
    return k;
}

/* The rule as the writer applied it before, leaf first: skipped frames
 * left out, an unnamed vDSO frame dropped when the next kept frame up is a
 * named one; the stack's node from the root of the tree. */
static uint32_t reference(flamme_pw *w, const uint64_t *frames, uint32_t n, int *root)
{
    static uint32_t kept[4096], rootfirst[4096], nodes[4096];
    uint32_t k = 0;
    uint8_t last = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t id = (uint32_t)(((i ? frames[i] - 1 : frames[i]) - 0x1000) / 16);
        uint8_t f = fact_of[id];
        if (f & FR_SKIP)
            continue;
        if (k && (fact_of[kept[k - 1]] & FR_VDSO_ANON) && (f & FR_VDSO_NAMED))
            k--;
        kept[k++] = id;
        last = f;
    }
    *root = (last & FR_ROOT) != 0;
    for (uint32_t j = 0; j < k; j++)
        rootfirst[j] = kept[k - 1 - j];
    if (flamme_pw_nodes(w, 0, k, rootfirst, nodes) != 0)
        return UINT32_MAX;
    return k ? nodes[k - 1] : 0;
}

TEST(random_changes_match_whole_stacks)
{
    int fd = open("/dev/null", O_WRONLY);
    struct flamme_header h = { .pid = 1, .hz = 999 };
    flamme_pw *w = flamme_pw_open(fd, &h);
    CHECK(w != NULL);
    flamme_pw_stacks_are_nodes(w);
    for (int k = 0; k < NADDR; k++) /* a few of each kind, most plain */
        fact_of[k] = k < 4 ? FR_SKIP & (k & 1 ? FR_HIDDEN : FR_AGENT)
                   : k < 8 ? FR_VDSO_ANON
                   : k < 11 ? FR_VDSO_NAMED
                   : k < 14 ? FR_ROOT
                   : k < 16 ? (FR_ROOT | FR_MAIN) : 0;
    enum { THREADS = 3, DEPTH = 600, ROUNDS = 20000 };
    static uint64_t st[THREADS][DEPTH]; /* root first, as pushed */
    static uint32_t depth[THREADS];
    static uint64_t leaf_first[DEPTH];
    static uint8_t expect_callee[DEPTH];
    struct flamme_intern in = { .pw = w, .frame = frame_cb, .ctx = expect_callee };
    struct flamme_intern_thread th[THREADS] = {{0}};
    uint32_t mismatches = 0, bad_root = 0, over_named = 0, bad_shared = 0;
    uint64_t named_total = 0, frames_total = 0;
    for (int round = 0; round < ROUNDS; round++) {
        int t = (int)(rnd() % THREADS);
        uint32_t d = depth[t];
        switch (rnd() % 64) {
        case 0: /* a new thread: one of the roots, or anything */
            d = 0;
            st[t][d++] = 0x1000 + 16 * (rnd() % 4 ? 11 + rnd() % 5 : rnd() % NADDR);
            break;
        case 1: case 2: case 3: /* a frame in the middle replaced */
            if (d)
                st[t][rnd() % d] = 0x1000 + 16 * (rnd() % NADDR);
            break;
        case 4:
            if (rnd() % 8 == 0)
                d = 0; /* the empty stack */
            break;
        default: { /* leaf-side frames popped, then others pushed */
            uint32_t pop = (uint32_t)(rnd() % 6), push = (uint32_t)(rnd() % 8);
            d = pop > d ? 0 : d - pop;
            for (uint32_t j = 0; j < push && d < DEPTH; j++)
                st[t][d++] = 0x1000 + 16 * (rnd() % NADDR);
        }
        }
        depth[t] = d;
        /* as the ring has it: leaf first, the leaf's pc exact, the others
         * return addresses (one past the call) */
        for (uint32_t i = 0; i < d; i++)
            leaf_first[i] = st[t][d - 1 - i] + (i ? 1 : 0);
        uint8_t callee = 0;
        for (uint32_t i = 0; i < d; i++) {
            expect_callee[i] = callee;
            callee = fact_of[(st[t][d - 1 - i] - 0x1000) / 16];
        }
        uint32_t shared_before = 0; /* as the test counts them */
        while (shared_before < d && shared_before < th[t].n &&
               th[t].addr[shared_before] == (shared_before == d - 1 ? leaf_first[0]
                                              : leaf_first[d - 1 - shared_before] - 1))
            shared_before++;
        uint32_t same = flamme_intern_shared(&th[t], leaf_first, d);
        if (same != shared_before)
            bad_shared++;
        named = 0;
        int root = -1, want_root = -1;
        uint32_t got = flamme_intern_stack(&in, &th[t], leaf_first, d, same, &root);
        uint32_t want = reference(w, leaf_first, d, &want_root);
        if (got != want)
            mismatches++;
        if (root != want_root)
            bad_root++;
        if (named > d - shared_before || in.named != named)
            over_named++;
        named_total += named;
        frames_total += d;
        CHECK(got != UINT32_MAX);
    }
    printf("  info: %d stacks of up to %d frames: %llu of %llu frames named (the rest shared "
           "with the thread's previous stack)\n",
           ROUNDS, DEPTH, (unsigned long long)named_total, (unsigned long long)frames_total);
    CHECK(mismatches == 0);
    CHECK(bad_root == 0);
    CHECK(bad_callee == 0);
    CHECK(over_named == 0);
    CHECK(bad_shared == 0);
    CHECK(named_total * 5 < frames_total); /* the point: most frames are not looked up */
    for (int t = 0; t < THREADS; t++)
        flamme_intern_thread_free(&th[t]);
    flamme_intern_free(&in);
    flamme_pw_close(w, 0, 0, 0, 0);
}

/* A deep recursion whose leaf changes: one frame named per sample, and a
 * thread reset (a new profile) names them all again. */
TEST(deep_stack_costs_its_change)
{
    int fd = open("/dev/null", O_WRONLY);
    struct flamme_header h = { .pid = 1, .hz = 999 };
    flamme_pw *w = flamme_pw_open(fd, &h);
    flamme_pw_stacks_are_nodes(w);
    for (int k = 0; k < NADDR; k++)
        fact_of[k] = k == 12 ? FR_ROOT : 0;
    enum { D = 3000 };
    static uint64_t fr[D];
    static uint8_t expect_callee[D];
    for (uint32_t i = 0; i < D; i++)
        fr[i] = i == D - 1 ? 0x1000 + 16 * 12 + 1 : 0x1000 + 16 * (20 + i % 3) + (i ? 1 : 0);
    struct flamme_intern in = { .pw = w, .frame = frame_cb, .ctx = expect_callee };
    struct flamme_intern_thread th = {0};
    int root = 0;
    named = 0;
    uint32_t first = flamme_intern_stack(&in, &th, fr, D, flamme_intern_shared(&th, fr, D), &root);
    CHECK(named == D && root == 1);
    uint32_t prev = first;
    for (int s = 0; s < 100; s++) {
        fr[0] = 0x1000 + 16 * (30 + s % 20); /* another leaf */
        named = 0;
        uint32_t node = flamme_intern_stack(&in, &th, fr, D, flamme_intern_shared(&th, fr, D), &root);
        CHECK(named == 1 && root == 1);
        CHECK(node != prev);
        prev = node;
    }
    fr[0] = 0x1000 + 16 * 20;
    named = 0;
    CHECK(flamme_intern_stack(&in, &th, fr, D, flamme_intern_shared(&th, fr, D), &root) == first && named == 1);
    flamme_intern_thread_reset(&th);
    named = 0;
    CHECK(flamme_intern_stack(&in, &th, fr, D, flamme_intern_shared(&th, fr, D), &root) == first && named == D);
    flamme_intern_thread_free(&th);
    flamme_intern_free(&in);
    flamme_pw_close(w, 0, 0, 0, 0);
}

int main(void)
{
    RUN(random_changes_match_whole_stacks);
    RUN(deep_stack_costs_its_change);
    return CHECK_DONE();
}
