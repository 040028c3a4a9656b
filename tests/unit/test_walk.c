/*
 * tests/unit/test_walk.c — the handler's own walker (agent/walk.c, over the
 * rows of agent/cfi.c) held against libunwind, an independent unwinder, on
 * the same stacks from a normal context: frame by frame, from a function
 * called back by glibc (qsort, twalk: built without frame pointers) and by
 * another C library (zlib's deflateInit2 calling its allocator) down to
 * _start. Both start from one register set: libunwind's unw_getcontext
 * (a ucontext_t on x86-64) taken in the callback.
 * From a signal handler too: both go through the kernel's signal frame
 * (libc's __restore_rt) into the code the signal interrupted.
 * Also: a rule that needs a register the walk does not know gives a broken
 * stack rather than a guess.
 * The test binary is built with -fno-omit-frame-pointer (CFLAGS_COMMON);
 * glibc and zlib are Debian's (no frame pointers), unwound by CFI only.
 */
#define UNW_LOCAL_ONLY
#include "tests/unit/check.h"
#include "tests/unit/no_runtime.h"
#include "agent/cfi.h"
#include "writer/cfi_build.h"
#include "agent/walk.h"
#include "common/profile.h"

#include <libunwind.h>
#include <pthread.h>
#include <search.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>
#include <zlib.h>

#define MAXF 256

struct capture {
    uint64_t lib[MAXF], own[MAXF];
    int nlib, nown;
    uint32_t flags;
    int done;
    /* The walk's trace (agent/walk.h), checked while the stack is there:
     * return addresses it says where it read, and of those the ones whose
     * slot does not hold the frame. */
    int traced, trace_bad;
    /* Walked again with the first walk as the thread's memo (agent/memo.h):
     * frames replayed from it, and whether the whole stack came out the
     * same; then with one memo frame changed half-way to the root (the
     * replay must stop there and the walk go on by its rows). */
    int memo_replayed, memo_same, memo_bad_replayed, memo_bad_same;
};

static struct flamme_range stack_range;

static void thread_stack(void)
{
    pthread_attr_t a;
    void *lo;
    size_t sz;
    pthread_getattr_np(pthread_self(), &a);
    pthread_attr_getstack(&a, &lo, &sz);
    pthread_attr_destroy(&a);
    stack_range.lo = (uintptr_t)lo;
    stack_range.hi = (uintptr_t)lo + sz;
}

/* Both unwinders from the same context; *valid says which registers the
 * flamme walk may use (all of them: the context is complete). */
static __attribute__((noinline)) void capture_here(struct capture *c, uint32_t valid)
{
    unw_context_t uc;
    unw_cursor_t cur;
    unw_getcontext(&uc);
    unw_init_local(&cur, &uc);
    c->nlib = 0;
    do {
        unw_word_t ip;
        if (unw_get_reg(&cur, UNW_REG_IP, &ip) != 0 || ip == 0)
            break;
        c->lib[c->nlib++] = ip;
    } while (c->nlib < MAXF && unw_step(&cur) > 0);

    static const int greg_of_dw[16] = FLAMME_GREG_OF_DW;
    struct flamme_walk_regs regs;
    for (int i = 0; i < 16; i++)
        regs.r[i] = (uintptr_t)uc.uc_mcontext.gregs[greg_of_dw[i]];
    regs.valid = valid;
    uintptr_t ra_at[MAXF];
    struct flamme_walk_trace tr = {.ra_at = ra_at, .cap = MAXF};
    c->nown = (int)flamme_walk_traced_sigsafe((uintptr_t)uc.uc_mcontext.gregs[REG_RIP], &regs, 1,
                                              &stack_range, 1, NULL, c->own, MAXF, &c->flags, &tr);
    c->traced = c->trace_bad = 0;
    for (int i = 1; i < c->nown; i++) {
        if (!ra_at[i])
            continue;
        c->traced++;
        if (*(const uintptr_t *)ra_at[i] != c->own[i])
            c->trace_bad++;
    }
    c->memo_replayed = c->memo_bad_replayed = -1;
    c->memo_same = c->memo_bad_same = 0;
    static uint64_t memo_mem[FLAMME_MEMO_BYTES / sizeof(uint64_t) + 1];
    static uint8_t steps[MAXF];
    struct flamme_memo memo;
    flamme_memo_init(&memo, memo_mem);
    if (!(c->flags & (FLAMME_SAMPLE_BROKEN | FLAMME_SAMPLE_TRUNCATED)) && c->nown > 4) {
        /* The first walk again, with its steps this time. */
        uint64_t first[MAXF];
        uint32_t fl;
        struct flamme_walk_trace t1 = {.ra_at = ra_at, .step = steps, .cap = MAXF};
        uint32_t n1 = flamme_walk_traced_sigsafe((uintptr_t)uc.uc_mcontext.gregs[REG_RIP], &regs,
                                                 1, &stack_range, 1, NULL, first, MAXF, &fl, &t1);
        for (int pass = 0; pass < 2; pass++) {
            flamme_memo_set_sigsafe(&memo, first, ra_at, steps, n1);
            if (pass == 1)
                memo.frame[memo.len / 2] ^= 1;
            uint64_t again[MAXF];
            struct flamme_walk_trace t2 = {.ra_at = memo.trace, .step = memo.trace_step,
                                           .cap = MAXF, .memo = &memo};
            uint32_t n = flamme_walk_traced_sigsafe((uintptr_t)uc.uc_mcontext.gregs[REG_RIP],
                                                    &regs, 1, &stack_range, 1, NULL, again, MAXF,
                                                    &fl, &t2);
            int same = (int)n == c->nown && fl == 0 && n1 == n;
            for (uint32_t i = 0; same && i < n; i++)
                same = again[i] == c->own[i];
            if (pass == 0)
                c->memo_replayed = (int)t2.replayed, c->memo_same = same;
            else
                c->memo_bad_replayed = (int)t2.replayed, c->memo_bad_same = same;
        }
    }
    c->done = 1;
}

/* Prints both stacks side by side on a mismatch. */
static void dump(const struct capture *c)
{
    int n = c->nlib > c->nown ? c->nlib : c->nown;
    for (int i = 0; i < n; i++)
        fprintf(stderr, "    %2d  %#14llx  %#14llx\n", i,
                i < c->nlib ? (unsigned long long)c->lib[i] : 0ull,
                i < c->nown ? (unsigned long long)c->own[i] : 0ull);
}

/* The two stacks agree frame by frame, and reach _start (the walk ends
 * cleanly, not broken). */
static void same_frames(const struct capture *c, const char *what)
{
    int ok = c->done && c->nlib >= 6 && c->nown == c->nlib && !(c->flags & FLAMME_SAMPLE_BROKEN);
    for (int i = 0; ok && i < c->nlib; i++)
        ok = c->lib[i] == c->own[i];
    if (!ok) {
        fprintf(stderr, "  %s: libunwind %d frames, flamme %d (flags %#x)\n", what, c->nlib,
                c->nown, c->flags);
        dump(c);
    } else {
        printf("  info: %s: %d frames, identical\n", what, c->nlib);
    }
    CHECK(ok);
    /* Every return address came from the thread's stack, and its slot
     * holds it: what the handler checks to complete a shortened sample. */
    if (c->traced != c->nown - 1 || c->trace_bad)
        fprintf(stderr, "  %s: %d of %d return addresses traced, %d slots differ\n", what,
                c->traced, c->nown - 1, c->trace_bad);
    CHECK(c->traced == c->nown - 1 && c->trace_bad == 0);
    /* The same stack again with the first walk as the memo: the same frames
     * (C code here: most steps restore registers and are walked again). */
    printf("  info: %s: walked again with the memo: %d frames replayed, %s; with a memo frame "
           "changed: %d replayed, %s\n", what, c->memo_replayed, c->memo_same ? "same" : "DIFFERENT",
           c->memo_bad_replayed, c->memo_bad_same ? "same" : "DIFFERENT");
    CHECK(c->memo_replayed >= 0 && c->memo_same);
    CHECK(c->memo_bad_replayed >= 0 && c->memo_bad_same);
}

static struct capture cap;
static uint32_t cap_valid = 0xffff;

static __attribute__((noinline)) int cmp_int(const void *a, const void *b)
{
    if (!cap.done)
        capture_here(&cap, cap_valid);
    return *(const int *)a - *(const int *)b;
}

static __attribute__((noinline)) void run_qsort(void)
{
    int v[64];
    for (int i = 0; i < 64; i++)
        v[i] = (i * 37) % 64;
    cap.done = 0;
    qsort(v, 64, sizeof v[0], cmp_int);
}

TEST(qsort_callback)
{
    cap_valid = 0xffff;
    run_qsort();
    same_frames(&cap, "qsort comparator");
}

static void tw_action(const void *node, VISIT which, int depth)
{
    (void)node;
    (void)which;
    if (depth >= 3 && !cap.done)
        capture_here(&cap, 0xffff);
}

static void keep_node(void *p)
{
    (void)p; /* the keys are small integers, not allocations */
}

static int tcmp(const void *a, const void *b)
{
    return (int)(intptr_t)a - (int)(intptr_t)b;
}

TEST(twalk_recursion)
{
    void *root = NULL;
    for (intptr_t i = 1; i <= 200; i++)
        tsearch((void *)((i * 7919) % 211), &root, tcmp);
    cap.done = 0;
    twalk(root, tw_action); /* glibc's recursive walk: several frames deep */
    same_frames(&cap, "twalk action");
    tdestroy(root, keep_node);
}

static voidpf z_alloc(voidpf opaque, uInt items, uInt size)
{
    (void)opaque;
    if (!cap.done)
        capture_here(&cap, 0xffff);
    return calloc(items, size);
}

static void z_free(voidpf opaque, voidpf p)
{
    (void)opaque;
    free(p);
}

TEST(zlib_allocator)
{
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    zs.zalloc = z_alloc;
    zs.zfree = z_free;
    cap.done = 0;
    CHECK(deflateInit2(&zs, 6, Z_DEFLATED, 15, 8, Z_DEFAULT_STRATEGY) == Z_OK);
    deflateEnd(&zs);
    same_frames(&cap, "zlib zalloc");
}

/* The same qsort stack with only rsp and rbp known: glibc's frames are
 * still walked (their rules use rsp); where a rule needs another register
 * the walk says broken instead of guessing. Either way, no frame differs
 * from libunwind's. */
TEST(unknown_registers_never_guess)
{
    cap_valid = FLAMME_WALK_REG(FLAMME_DW_RSP) | FLAMME_WALK_REG(FLAMME_DW_RBP);
    run_qsort();
    int ok = cap.nown >= 1 && cap.nown <= cap.nlib;
    for (int i = 0; ok && i < cap.nown; i++)
        ok = cap.own[i] == cap.lib[i];
    CHECK(ok);
    CHECK(cap.nown == cap.nlib || (cap.flags & FLAMME_SAMPLE_BROKEN));
}

/* A stack built by hand: a frame-pointer chain of 200 frames whose return
 * addresses lie in no module (no unwind rows: every step is by rbp). A walk
 * with the first walk as the memo replays all but the first step and gives
 * the same frames; after the stack changes, it gives what a walk without a
 * memo gives: a return address changed half-way (the replay stops at that
 * slot and goes on after it), a saved rbp pointing one frame further (the
 * memo's next slot still holds its old return address, dead: the replay
 * must not follow it), and a chain cut short. */
#define FAKE_FRAMES 200
static uint64_t fake_stack[4 * FAKE_FRAMES + 64];

static void fake_chain(void)
{
    for (int i = 0; i < FAKE_FRAMES; i++) {
        uint64_t *fp = &fake_stack[16 + 4 * i];
        fp[0] = i + 1 < FAKE_FRAMES ? (uint64_t)(uintptr_t)&fake_stack[16 + 4 * (i + 1)] : 0;
        fp[1] = 0x7a0000 + 16 * (uint64_t)i;
    }
}

static uint32_t fake_walk(struct flamme_memo *memo, uint64_t *out, uintptr_t *ra_at,
                          uint8_t *steps, struct flamme_walk_trace *t)
{
    struct flamme_range r = {(uintptr_t)fake_stack, (uintptr_t)(fake_stack + sizeof fake_stack / 8)};
    struct flamme_walk_regs regs = {{0}, FLAMME_WALK_REG(6) | FLAMME_WALK_REG(7)};
    regs.r[7] = (uintptr_t)&fake_stack[8];
    regs.r[6] = (uintptr_t)&fake_stack[16];
    uint32_t fl;
    *t = (struct flamme_walk_trace){.ra_at = ra_at, .step = steps, .cap = FAKE_FRAMES + 8,
                                    .memo = memo};
    uint32_t n = flamme_walk_traced_sigsafe(0x790000, &regs, 0, &r, 1, NULL, out,
                                            FAKE_FRAMES + 8, &fl, t);
    return fl ? 0 : n;
}

/* Walks the hand-built stack with the memo and without; the same frames,
 * and the memo updated from the first (as the handler does) is the memo
 * made from the second. */
static int fake_same_as_fresh(struct flamme_memo *memo, const char *what, uint32_t *replayed)
{
    static uint64_t fresh[FAKE_FRAMES + 8], got[FAKE_FRAMES + 8];
    static uintptr_t ra0[FAKE_FRAMES + 8], ra1[FAKE_FRAMES + 8];
    static uint8_t st0[FAKE_FRAMES + 8], st1[FAKE_FRAMES + 8];
    static uint64_t mem2[FLAMME_MEMO_BYTES / sizeof(uint64_t) + 1];
    struct flamme_walk_trace t0, t1;
    uint32_t n0 = fake_walk(NULL, fresh, ra0, st0, &t0);
    uint32_t n1 = fake_walk(memo, got, ra1, st1, &t1);
    *replayed = t1.replayed;
    int same = n0 > 0 && n0 == n1 && memcmp(fresh, got, n0 * sizeof *got) == 0;
    if (t1.run_k >= 0)
        flamme_memo_update_sigsafe(memo, got, ra1, st1, n1, (uint32_t)t1.run_k, t1.run_at,
                                   t1.run_len);
    else
        flamme_memo_set_sigsafe(memo, got, ra1, st1, n1);
    struct flamme_memo m2;
    flamme_memo_init(&m2, mem2);
    flamme_memo_set_sigsafe(&m2, fresh, ra0, st0, n0);
    int memo_same = memo->len == m2.len;
    for (uint32_t j = 0; memo_same && j < m2.len; j++)
        memo_same = memo->frame[j] == m2.frame[j] && memo->slot[j] == m2.slot[j] &&
                    memo->step[j] == m2.step[j];
    printf("  info: %s: %u frames, %u replayed from the memo, %s; memo %s\n", what, n1,
           *replayed, same ? "as walked without it" : "DIFFERENT",
           memo_same ? "as made from that walk" : "DIFFERENT");
    return same && memo_same;
}

TEST(memo_replay_checks_every_step)
{
    static uint64_t mem[FLAMME_MEMO_BYTES / sizeof(uint64_t) + 1];
    static uint64_t frames[FAKE_FRAMES + 8];
    static uintptr_t ra[FAKE_FRAMES + 8];
    static uint8_t st[FAKE_FRAMES + 8];
    struct flamme_memo memo;
    flamme_memo_init(&memo, mem);
    uint32_t rep;
    struct flamme_walk_trace t;
    fake_chain();
    uint32_t n = fake_walk(NULL, frames, ra, st, &t);
    CHECK(n == FAKE_FRAMES + 1);
    flamme_memo_set_sigsafe(&memo, frames, ra, st, n);
    CHECK(memo.len == FAKE_FRAMES);
    CHECK(fake_same_as_fresh(&memo, "the same stack", &rep));
    CHECK(rep == FAKE_FRAMES - 1); /* all but the first frame's step */

    CHECK(fake_same_as_fresh(&memo, "the same stack, again", &rep));
    CHECK(rep == FAKE_FRAMES - 1);

    fake_stack[16 + 4 * 100 + 1] += 1; /* a return address changed */
    CHECK(fake_same_as_fresh(&memo, "a return address changed", &rep));
    CHECK(rep > 0 && rep < FAKE_FRAMES - 1);

    fake_chain();
    fake_stack[16 + 4 * 50] = (uint64_t)(uintptr_t)&fake_stack[16 + 4 * 52]; /* frame 51 skipped */
    CHECK(fake_same_as_fresh(&memo, "a saved rbp one frame further", &rep));

    fake_chain();
    fake_stack[16 + 4 * 120] = 0; /* the chain ends at frame 120 */
    CHECK(fake_same_as_fresh(&memo, "a chain cut short", &rep));

    fake_chain(); /* whole again: the memo from the short chain, then its own */
    CHECK(fake_same_as_fresh(&memo, "the whole chain back", &rep));
    CHECK(fake_same_as_fresh(&memo, "the whole chain again", &rep));
    CHECK(rep == FAKE_FRAMES - 1);
}

/* A signal raised on this stack: the handler captures both walks. */
static void on_usr1(int sig)
{
    (void)sig;
    capture_here(&cap, 0xffff);
}

static __attribute__((noinline)) void raise_usr1(void)
{
    cap.done = 0;
    raise(SIGUSR1);
    __asm__ volatile("" ::: "memory"); /* not a tail call */
}

TEST(through_signal_frame)
{
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sigemptyset(&sa.sa_mask);
    CHECK(sigaction(SIGUSR1, &sa, &old) == 0);
    flamme_walk_note_sigreturn(SIGUSR1);
    uintptr_t tramp = flamme_walk_sigreturn();
    raise_usr1();
    sigaction(SIGUSR1, &old, NULL);
    CHECK(tramp != 0 && cap.done);
    /* libunwind names the interrupted instruction itself; the walk puts it
     * one byte on, as the return address it stands for in a stack (agent/
     * walk.c). Every other frame is the same. */
    int at = -1, ok = cap.nown == cap.nlib && !(cap.flags & FLAMME_SAMPLE_BROKEN) && cap.nlib >= 6;
    for (int i = 0; ok && i < cap.nlib; i++) {
        if (cap.lib[i] == tramp && i + 1 < cap.nlib && at < 0) {
            at = i;
            ok = cap.own[i] == tramp && cap.own[i + 1] == cap.lib[i + 1] + 1;
            i++;
            continue;
        }
        ok = cap.lib[i] == cap.own[i];
    }
    if (!ok || at < 0) {
        fprintf(stderr, "  signal frame: libunwind %d frames, flamme %d (flags %#x), trampoline "
                "%#lx at %d\n", cap.nlib, cap.nown, cap.flags, (unsigned long)tramp, at);
        dump(&cap);
    } else {
        printf("  info: signal handler: %d frames, identical through __restore_rt (frame %d)\n",
               cap.nlib, at);
    }
    CHECK(ok && at > 0);
}

int main(void)
{
    thread_stack();
    /* Every mapped file's unwind rows, this binary's included. */
    CHECK(flamme_cfi_add_from_maps(NULL, NULL) >= 3);
    RUN(qsort_callback);
    RUN(twalk_recursion);
    RUN(zlib_allocator);
    RUN(unknown_registers_never_guess);
    RUN(memo_replay_checks_every_step);
    RUN(through_signal_frame);
    flamme_cfi_free_all();
    return CHECK_DONE();
}
