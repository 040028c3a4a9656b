/*
 * tools/report.c — `flamme report FILE`: a one-screen text summary of a
 * profile: header facts, totals, how many stacks reach a real thread root,
 * per-thread shares, the GC section (tools/gc_frames.c) and the top functions
 * by self and total time; for a profile with sampled allocations, the
 * allocation section (per domain rate beside its GC share, top allocators
 * by bytes and by blocks, and with --live those still alive at the end).
 *
 * Built on flamme_collapse_profile (threads off), so the names, markers and
 * "[module]" frames are exactly those of `flamme collapse` and the SVG.
 * Percentages are of sample weight (a sample's weight is the number of
 * timer ticks it stands for).
 */
#include "tools/alloc_view.h"
#include "tools/cmds.h"
#include "tools/collapse.h"
#include "tools/fnagg.h"
#include "tools/gc_frames.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TOP_N 20

static double pct(uint64_t part, uint64_t whole)
{
    return whole ? 100.0 * (double)part / (double)whole : 0.0;
}

static void print_top(struct flamme_fn **v, size_t n, uint64_t weight, int self_first)
{
    printf("%s\n", self_first ? "top functions by self time:" : "top functions by total time:");
    printf("  %7s %7s %10s  %s\n", "self%", "total%", self_first ? "self" : "total", "function");
    for (size_t i = 0; i < n && i < TOP_N; i++) {
        if ((self_first ? v[i]->self : v[i]->total) == 0)
            break; /* sorted: the rest never ran as leaf */
        printf("  %6.1f%% %6.1f%% %10llu  ", pct(v[i]->self, weight), pct(v[i]->total, weight),
               (unsigned long long)(self_first ? v[i]->self : v[i]->total));
        flamme_put_term_safe(stdout, v[i]->name);
        putchar('\n');
    }
}

struct tstat {
    uint32_t tid; /* index of the thread in p->threads (a tid may be reused) */
    uint64_t weight, samples;
};

static int by_tid(const void *x, const void *y)
{
    const struct tstat *a = x, *b = y;
    return a->tid < b->tid ? -1 : a->tid > b->tid;
}

static int by_weight(const void *x, const void *y)
{
    const struct tstat *a = x, *b = y;
    if (a->weight != b->weight)
        return a->weight > b->weight ? -1 : 1;
    return a->tid < b->tid ? -1 : a->tid > b->tid;
}

/* Per-thread table: samples sorted by thread, then runs summed. */
static int print_threads(const struct flamme_profile *p, uint64_t weight)
{
    struct tstat *t = malloc((p->nsamples ? p->nsamples : 1) * sizeof *t);
    if (!t)
        return -1;
    for (size_t i = 0; i < p->nsamples; i++)
        t[i] = (struct tstat){ p->samples[i].thread, p->samples[i].weight, 1 };
    qsort(t, p->nsamples, sizeof *t, by_tid);
    size_t n = 0;
    for (size_t i = 0; i < p->nsamples; i++) {
        if (n && t[n - 1].tid == t[i].tid) {
            t[n - 1].weight += t[i].weight;
            t[n - 1].samples++;
        } else
            t[n++] = t[i];
    }
    qsort(t, n, sizeof *t, by_weight);
    printf("threads (%zu with samples):\n", n);
    printf("  %-28s %10s %10s %7s\n", "thread", "tid", "samples", "%");
    for (size_t i = 0; i < n; i++) {
        char lbl[96];
        const struct flamme_thread *th = t[i].tid < p->nthreads ? &p->threads[t[i].tid] : NULL;
        flamme_thread_label(th, lbl, sizeof lbl);
        printf("  %-28s %10u %10llu %6.1f%%\n", lbl, th ? (unsigned)th->tid : 0u, (unsigned long long)t[i].weight,
               pct(t[i].weight, weight));
    }
    free(t);
    return 0;
}

/* Where a segment (or the merged segments) of a continuous profile lie. */
static void print_segments(const struct flamme_profile *p)
{
    if (p->nfiles > 1)
        printf("  %u files read as one\n", (unsigned)p->nfiles);
    if (!p->segment_seq)
        return;
    uint64_t until = p->segment_until_ns ? p->segment_until_ns : p->end_ns;
    if (p->nfiles > 1)
        printf("  segments %u to %u of a continuous profile (period %.2f s), %u missing\n",
               (unsigned)p->segment_seq, (unsigned)p->segment_last_seq,
               (double)p->segment_period_ns / 1e9, (unsigned)p->segment_missing);
    else
        printf("  segment %u of a continuous profile (period %.2f s), %.3f s long%s\n",
               (unsigned)p->segment_seq, (double)p->segment_period_ns / 1e9,
               until > p->segment_from_ns ? (double)(until - p->segment_from_ns) / 1e9 : 0.0,
               p->segment_until_ns ? "" : " (cut short)");
}

static void print_header(const char *path, const struct flamme_profile *p)
{
    fputs("profile: ", stdout);
    flamme_put_term_safe(stdout, path);
    putchar('\n');
    double dur = p->end_ns > p->hdr.start_monotonic_ns
                     ? (double)(p->end_ns - p->hdr.start_monotonic_ns) / 1e9
                     : 0.0;
    char when[64] = "?";
    time_t secs = (time_t)(p->hdr.start_realtime_ns / 1000000000ull);
    struct tm tm;
    if (gmtime_r(&secs, &tm))
        strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &tm);
    /* Profiles of a build: the first process's pid and start, the last
     * one's command (INFO: the last value counts). */
    if (p->npids > 1)
        printf("  %u processes (the first: pid %u), %u Hz per thread, %.2f s, started %s\n",
               (unsigned)p->npids, (unsigned)p->hdr.pid, (unsigned)p->hdr.hz, dur, when);
    else
        printf("  pid %u, %u Hz per thread, %.2f s, started %s\n", (unsigned)p->hdr.pid,
               (unsigned)p->hdr.hz, dur, when);
    const char *cmd = flamme_profile_info(p, "cmdline");
    if (cmd) {
        fputs(p->npids > 1 ? "  command of the last: " : "  command: ", stdout);
        flamme_put_term_safe(stdout, cmd);
        putchar('\n');
    }
    if (p->truncated)
        printf("  status: damaged or cut short (read up to the last whole chunk)\n");
    else if (!p->complete)
        printf("  status: incomplete (no end record: the process was killed by something the "
               "agent cannot see, such as SIGKILL, or the profile could not be written)\n");
    else
        printf("  status: complete\n");
    print_segments(p);
    if (p->exit_detail) {
        fputs("  ended: ", stdout);
        flamme_put_term_safe(stdout, p->exit_detail);
        putchar('\n');
    }
}

/* The agent's CPU budget (agent/budget.h), from its INFO record. */
static void print_budget(const struct flamme_profile *p)
{
    const char *v = flamme_profile_info(p, "budget");
    unsigned long long pct, depth, skipped, weight, own, ns, replayed = 0, leaf = 0, leaf_w = 0;
    if (!v || sscanf(v, "%llu %llu %llu %llu %llu %llu %llu %llu %llu", &pct, &depth, &skipped,
                     &weight, &own, &ns, &replayed, &leaf, &leaf_w) < 6)
        return;
    /* The writer's CPU (INFO writer_ns, since 1.0 agents of 2026-11) and
     * the share of both in the program's CPU time: the process's (INFO
     * process_cpu_ns, agents of 2026-11-28 on) less the agent's; before,
     * in cpu mode, the weight of every sample in the file times the period
     * (far off for a run of few samples). */
    const char *wv = flamme_profile_info(p, "writer_ns");
    const char *mode = flamme_profile_info(p, "mode");
    const char *pv = flamme_profile_info(p, "process_cpu_ns");
    unsigned long long wns = 0, charged = 0, setup = 0, start = 0, proc = 0;
    if (wv && sscanf(wv, "%llu %llu %llu %llu", &wns, &charged, &setup, &start) < 1)
        wv = NULL;
    /* The one-time costs (the unwind tables built as the program starts,
     * the symbol tables and the executable's line table the writer reads) are the
     * same however long the program runs: their share is given apart. */
    double all = ((double)ns + (double)wns + (double)start) / 1e9;
    double once = ((double)setup + (double)start) / 1e9;
    double prog_s = 0;
    if (pv && sscanf(pv, "%llu", &proc) == 1) {
        prog_s = (double)proc / 1e9 - all; /* whatever the sampling mode */
    } else if (mode && !strcmp(mode, "cpu") && p->hdr.hz) {
        uint64_t weight_all = 0;
        for (size_t i = 0; i < p->nsamples; i++)
            weight_all += p->samples[i].weight;
        prog_s = (double)weight_all / p->hdr.hz;
    }
    char startup[48] = "";
    if (start)
        snprintf(startup, sizeof startup, ", start-up %.3f s", (double)start / 1e9);
    if (!wv)
        printf("  agent: signal handler %.3f s of CPU (budget: %llu%% of the program's)\n",
               (double)ns / 1e9, pct);
    else if (prog_s <= 0)
        /* No share to give (an older agent's wall mode, or a run too short
         * for a sample), but what the agent spent is known, the one-time
         * part included. */
        printf("  agent: signal handler %.3f s of CPU%s, writer %.3f s; %.3f s spent once\n"
               "  (the handler's budget: %llu%%)\n",
               (double)ns / 1e9, startup, (double)wns / 1e9, once, pct);
    else if (once <= 0)
        printf("  agent: signal handler %.3f s of CPU, writer %.3f s: %.1f%% of the program's %.2f s\n"
               "  (the handler's budget: %llu%%)\n",
               (double)ns / 1e9, (double)wns / 1e9, 100.0 * all / prog_s, prog_s, pct);
    else
        printf("  agent: signal handler %.3f s of CPU%s, writer %.3f s: %.1f%% of the program's %.2f s\n"
               "  (%.1f%% beside %.3f s spent once: %s; the handler's budget: %llu%%)\n",
               (double)ns / 1e9, startup, (double)wns / 1e9, 100.0 * all / prog_s, prog_s,
               100.0 * (all - once) / prog_s, once,
               !start   ? "symbol tables and\n  the executable's line table"
               : !setup ? "unwind tables at start-up"
                        : "unwind tables at start-up, symbol tables\n  and the executable's line table",
               pct);
    if (charged)
        printf("  the writer's time beyond its 1%% (%.3f s) was charged to the handler's budget\n",
               (double)charged / 1e9);
    if (own)
        printf("  %llu periods were the handler's own CPU time and are not counted as samples\n",
               own);
    if (skipped)
        printf("  %llu samples (weight %llu) were shortened to their %llu leaf-most frames to keep\n"
               "  the agent within its budget (deep stacks); they count as truncated\n",
               skipped, weight, depth);
    if (leaf)
        printf("  %llu samples (weight %llu) were only the function that ran, no stack read: even\n"
               "  %llu-frame walks cost more than the budget (each frame a stack switch to read,\n"
               "  e.g. thousands of nested effect handlers); they count as truncated\n",
               leaf, leaf_w, depth);
    if (replayed)
        printf("  %llu samples replayed frames of their thread's previous whole stack instead of\n"
               "  walking them (each checked in its stack slot, up to the next stack switch)\n",
               replayed);
    v = flamme_profile_info(p, "pc_only_samples");
    if (v && atoll(v) > 0)
        printf("  %lld samples came inside one of the program's signal handlers, on its alternate\n"
               "  signal stack with no room for a walk: only the function that ran; truncated\n",
               atoll(v));
    v = flamme_profile_info(p, "engine_kernel");
    if (v && !strcmp(v, "counted"))
        printf("  perf events could not sample the kernel here (perf_event_paranoid 2): kernel time\n"
               "  is counted in full, as [kernel] on each thread's next user-space sample (within a\n"
               "  period of the system call or page fault), not always under the code that entered it\n");
    v = flamme_profile_info(p, "engine_timer");
    if (v && !strcmp(v, "tick"))
        printf("  CPU timers sampled at the kernel's ticks (FLAMME_DITHER=0): a tick is not a random\n"
               "  instant, and code that runs in step with it is over- or under-counted\n");
    else if (v && !strncmp(v, "dither", 6)) {
        int switchers = atoi(v + 6);
        printf("  CPU timers sampled at random points of each thread's CPU time, not at ticks%s\n",
               switchers > 0 ? ";" : "");
        if (switchers > 0)
            printf("  %d threads that went to sleep too often for that were sampled at ticks, "
                   "which\n  never fall in part of a switch: their own code gets a few points more "
                   "than its\n  share (doc/design.md, \"What the ticks miss\")\n",
                   switchers);
    }
    v = flamme_profile_info(p, "engine_moved_to_timer");
    if (v && atoi(v) > 0) {
        const char *tids = strchr(v, ' ');
        printf("  %d threads left the perf engine for a CPU timer: they context-switched too\n"
               "  often for a perf event (auto; see 'Engines' in doc/design.md)%s%s\n",
               atoi(v), tids ? "; tids:" : "", tids ? tids : "");
    }
}

/* Aggregates the view v of p by function (agg a, fresh). Returns 0, -1
 * (memory), -2 (budget), -3 (no such view: err says why). */
static int view_agg(const struct flamme_profile *p, const struct flamme_view *v, const char *in,
                    struct flamme_fnagg *a, char *err, size_t errlen)
{
    struct flamme_profile q = *p;
    if (flamme_view_samples(p, v, in, &q.samples, &q.nsamples, err, errlen) != 0)
        return -3;
    struct flamme_collapse_opts o = { 0 };
    int r = flamme_collapse_profile(&q, &o, flamme_fnagg_stack, a);
    free(q.samples);
    return r != 0 ? r : a->oom ? -1 : 0;
}

/* Top leaf functions of agg a (weights in unit), each with its share of a
 * and, when other is not NULL, its own weight in other (blocks beside
 * bytes). Returns 0 / -1. */
static int print_alloc_top(const char *title, struct flamme_fnagg *a, struct flamme_fnagg *other, const char *unit,
                           const char *other_unit)
{
    size_t n;
    struct flamme_fn **v = flamme_fnagg_sorted(a, 0, &n);
    if (!v)
        return -1;
    printf("%s\n", title);
    printf("  %7s %14s", "self%", unit);
    if (other)
        printf(" %7s %14s", "self%", other_unit);
    printf("  function\n");
    for (size_t i = 0; i < n && i < TOP_N && v[i]->self; i++) {
        printf("  %6.1f%% %14llu", pct(v[i]->self, a->weight), (unsigned long long)v[i]->self);
        if (other) {
            struct flamme_fn *o = flamme_fnagg_get(other, v[i]->name, strlen(v[i]->name));
            uint64_t w = o ? o->self : 0;
            printf(" %6.1f%% %14llu", pct(w, other->weight), (unsigned long long)w);
        }
        printf("  ");
        flamme_put_term_safe(stdout, v[i]->name);
        putchar('\n');
    }
    free(v);
    return 0;
}

/* The allocation section. Returns 0, -1 (memory), -2 (budget), -3 (err). */
static int print_allocs(const struct flamme_profile *p, const char *in, int live, char *err,
                        size_t errlen)
{
    enum { ROWS = 129 };
    double bytes[ROWS] = { 0 }, blocks[ROWS] = { 0 }, tb = 0, tk = 0, major = 0, marshal = 0,
           custom = 0, lb = 0, lk = 0;
    uint64_t cpu[ROWS] = { 0 }, gc[ROWS] = { 0 };
    for (size_t i = 0; i < p->nallocs; i++) {
        const struct flamme_alloc *x = &p->allocs[i];
        int r = x->domain >= 0 && x->domain < ROWS - 1 ? x->domain : ROWS - 1;
        double b = flamme_alloc_bytes(x), k = flamme_alloc_blocks(x);
        bytes[r] += b, blocks[r] += k, tb += b, tk += k;
        major += x->heap == FLAMME_ALLOC_MAJOR ? b : 0;
        marshal += x->source == FLAMME_ALLOC_MARSHAL ? b : 0;
        custom += x->source == FLAMME_ALLOC_CUSTOM ? b : 0;
        if (!x->died_ns)
            lb += b, lk += k;
    }
    for (size_t i = 0; i < p->nsamples; i++) {
        const struct flamme_sample *s = &p->samples[i];
        int r = s->domain >= 0 && s->domain < ROWS - 1 ? s->domain : ROWS - 1;
        uint32_t root;
        cpu[r] += s->weight;
        if (s->stack_id < p->nstacks &&
            flamme_gc_classify(p, &p->stacks[s->stack_id], &root) != FLAMME_GCC_NONE)
            gc[r] += s->weight;
    }
    const char *rate = flamme_profile_info(p, "alloc_rate");
    const char *tracked = flamme_profile_info(p, "alloc_live");
    double secs = p->end_ns > p->hdr.start_monotonic_ns
                      ? (double)(p->end_ns - p->hdr.start_monotonic_ns) / 1e9
                      : 0;
    int hf = flamme_view_heapfill(p);
    if (hf) {
        printf("allocations (heap fill, %zu samples: each minor collection charges a domain's "
               "minor-heap bytes to the stack that filled it, or that it was stopped at; a "
               "systematic sample, biased: doc/design.md):\n",
               p->nallocs);
        printf("  allocated: %.1f MB; major heap directly: %.1f%%\n", tb / 1e6,
               tb > 0 ? 100 * major / tb : 0);
    } else {
        printf("allocations (Gc.Memprof, %zu sampled blocks at %s samples per word; estimates):\n",
               p->nallocs, rate ? rate : "?");
        printf("  allocated: %.1f MB in %.0f blocks; major heap directly: %.1f%%; marshal %.1f%%, "
               "custom %.1f%%\n",
               tb / 1e6, tk, tb > 0 ? 100 * major / tb : 0, tb > 0 ? 100 * marshal / tb : 0,
               tb > 0 ? 100 * custom / tb : 0);
    }
    /* A segment the run went on after: no full major collection at its
     * end, and its blocks may die in a later segment (doc/format.md). */
    const char *alive = p->exit_how == FLAMME_EXIT_SEGMENT
                            ? "not collected by the segment's end (the run went on)"
                            : "alive when profiling stopped";
    if (tracked && strcmp(tracked, "1") == 0)
        printf("  %s: %.1f MB (%.1f%% of the bytes allocated) in %.0f blocks\n", alive, lb / 1e6,
               tb > 0 ? 100 * lb / tb : 0, lk);
    if (tracked && strcmp(tracked, "1") == 0 && flamme_view_live_domains(p) > 1)
        printf("  (an undercount: with %d domains allocating, OCaml 5.3's Gc.Memprof reports some "
               "blocks that another domain promotes as dead)\n",
               flamme_view_live_domains(p));
    printf("  %-8s %14s %7s %10s %14s %14s\n", "domain", "bytes", "%", "MB/s", "blocks",
           "GC % of CPU");
    for (int r = 0; r < ROWS; r++) {
        if (bytes[r] <= 0)
            continue;
        char name[16];
        snprintf(name, sizeof name, r == ROWS - 1 ? "none" : "%d", r);
        printf("  %-8s %14.0f %6.1f%% %10.1f", name, bytes[r], 100 * bytes[r] / tb,
               secs > 0 ? bytes[r] / 1e6 / secs : 0);
        if (hf)
            printf(" %14s", "-");
        else
            printf(" %14.0f", blocks[r]);
        if (cpu[r])
            printf(" %13.1f%%\n", pct(gc[r], cpu[r]));
        else
            printf(" %14s\n", "-");
    }
    struct flamme_fnagg ab = { 0 }, ak = { 0 }, al = { 0 };
    struct flamme_view vb = { 1, 0, 0 }, vk = { 1, 0, 1 }, vl = { 1, 1, 0 };
    int r = view_agg(p, &vb, in, &ab, err, errlen);
    if (r == 0 && !hf)
        r = view_agg(p, &vk, in, &ak, err, errlen);
    if (r == 0)
        r = print_alloc_top("top allocators by bytes:", &ab, hf ? NULL : &ak, "bytes", "blocks");
    if (r == 0 && !hf)
        r = print_alloc_top("top allocators by blocks:", &ak, &ab, "blocks", "bytes");
    if (r == 0 && live) {
        r = view_agg(p, &vl, in, &al, err, errlen);
        if (r == 0)
            r = print_alloc_top(p->exit_how == FLAMME_EXIT_SEGMENT
                                    ? "not collected by the segment's end, by bytes:"
                                    : "alive when profiling stopped, by bytes:",
                                &al, NULL, "bytes", NULL);
    }
    flamme_fnagg_free(&ab);
    flamme_fnagg_free(&ak);
    flamme_fnagg_free(&al);
    return r;
}

int flamme_cmd_report(int argc, char **argv)
{
    const char *in = NULL;
    /* Inputs are gathered in argv's own front (never past what was read). */
    const char **ins = (const char **)argv;
    size_t nin = 0;
    struct flamme_view view = { 0 };
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            fprintf(stderr, "usage: flamme report FILE... [--alloc | --live]\n"
                            "  a profile with sampled allocations gets an allocation section;\n"
                            "  --alloc requires one, --live adds what was alive at the end\n");
            return 0;
        }
        if (flamme_view_option(&view, argv[i]))
            continue;
        if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "flamme report: unknown option: %s\n", argv[i]);
            return 2;
        }
        ins[nin++] = argv[i];
    }
    if (!nin) {
        fprintf(stderr, "usage: flamme report FILE...\n");
        return 2;
    }
    in = ins[0];

    struct flamme_profile p;
    char err[512];
    const char *trunc;
    int lr = flamme_profile_load_many(ins, nin, &p, &trunc, err, sizeof err);
    if (lr != 0) {
        fprintf(stderr, "flamme report: %s\n", err);
        return 2;
    }
    if (view.alloc) { /* asked for: say why there is none (the view is checked, not used) */
        struct flamme_sample *vs;
        size_t vn;
        if (flamme_view_samples(&p, &view, in, &vs, &vn, err, sizeof err) != 0) {
            fprintf(stderr, "flamme report: %s\n", err);
            flamme_profile_free(&p);
            return 2;
        }
        free(vs);
    }
    struct flamme_fnagg a = { 0 };
    struct flamme_collapse_opts o = { 0 };
    struct flamme_fn **v = NULL;
    int rc = 1;
    int r = flamme_collapse_profile(&p, &o, flamme_fnagg_stack, &a);
    if (r == -2) {
        rc = flamme_collapse_error("report", in, r);
        flamme_profile_free(&p);
        return rc;
    }
    if (r != 0 || a.oom)
        goto out;

    print_header(in, &p);
    printf("totals:\n");
    printf("  samples: %zu records, weight %llu; lost: %llu (%.1f%%)\n", p.nsamples,
           (unsigned long long)a.weight, (unsigned long long)p.lost, pct(p.lost, a.weight + p.lost));
    print_budget(&p);
    printf("stacks:\n");
    if (!a.weight) {
        printf("  no samples: no stack to judge\n");
    } else {
        printf("  complete stacks: %.1f%%  (root-most frame is a thread root: main, start_thread, "
               "...)\n",
               pct(a.complete, a.weight));
        printf("  truncated: %.1f%%  broken: %.1f%%  other: %.1f%%\n", pct(a.truncated, a.weight),
               pct(a.broken, a.weight),
               pct(a.weight - a.complete - a.truncated - a.broken, a.weight));
    }
    if (print_threads(&p, a.weight) != 0 || flamme_gc_report(&p, stdout) != 0)
        goto out;

    size_t n;
    if (!(v = flamme_fnagg_sorted(&a, 0, &n)))
        goto out;
    print_top(v, n, a.weight, 1);
    qsort(v, n, sizeof *v, flamme_fn_by_total);
    print_top(v, n, a.weight, 0);
    if (p.nallocs) {
        r = print_allocs(&p, in, view.live, err, sizeof err);
        if (r == -2 || r == -3) {
            rc = r == -2 ? flamme_collapse_error("report", in, r) : 2;
            if (r == -3)
                fprintf(stderr, "flamme report: %s\n", err);
            goto out_quiet;
        }
        if (r != 0)
            goto out;
    }
    rc = 0;
out:
    if (rc != 0)
        fprintf(stderr, "flamme report: %s: out of memory\n", in);
out_quiet:
    if (fflush(stdout) != 0 && rc == 0) {
        fprintf(stderr, "flamme report: write error on stdout\n");
        rc = 1;
    }
    free(v);
    flamme_fnagg_free(&a);
    flamme_profile_free(&p);
    return rc;
}
