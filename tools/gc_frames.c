/*
 * tools/gc_frames.c — GC / stop-the-world frame recognition (gc_frames.h).
 *
 * The names are the runtime's C function names, which the profile keeps
 * unmangled; static functions may carry a compiler suffix (".constprop.0",
 * ".isra.0", ".part.0", ".cold"), which is ignored. Names with a trailing
 * '*' match by prefix.
 */
#include "tools/gc_frames.h"

#include <stdlib.h>
#include <string.h>

/* Functions that only exist to run or wait for the collector. */
static const char *const gc_names[] = {
    /* entry from OCaml code and allocation slow paths */
    "caml_call_gc", "caml_alloc1", "caml_alloc2", "caml_alloc3", "caml_allocN",
    "caml_garbage_collection", "caml_alloc_small_dispatch", "caml_do_pending_actions*",
    "caml_process_pending_actions*", "caml_poll_gc_work", "caml_handle_gc_interrupt",
    "caml_check_urgent_gc", "caml_gc_*",
    /* minor collection */
    "caml_minor_collection", "caml_empty_minor_heap*", "caml_try_empty_minor_heap_on_all_domains",
    "caml_stw_empty_minor_heap*", "oldify_one", "oldify_mopup", "caml_oldify*",
    "try_update_object_header", "caml_collect_gc_stats_sample_stw",
    /* major collection */
    "caml_major_collection_slice", "caml_opportunistic_major_collection_slice",
    "caml_do_opportunistic_major_slice", "major_collection_slice", "mark", "do_some_marking",
    "mark_slice_darken", "mark_stack_push*", "ephe_mark", "ephe_sweep", "caml_darken*",
    "caml_sweep", "pool_sweep", "large_alloc_sweep", "caml_finish_major_cycle",
    "stw_cycle_all_domains", "cycle_major_heap_from_stw_single", "stw_try_complete_gc_phase",
    "caml_finish_marking", "caml_finish_sweeping", "caml_empty_mark_stack", "caml_mark_roots_stw",
    "caml_compact_heap", "compact_update*",
    /* roots and finalisers */
    "caml_do_roots", "caml_do_local_roots*", "caml_scan_stack", "caml_scan_global_*",
    "caml_final_*",
    NULL,
};

/* Stop-the-world synchronisation: a leaf-most match means waiting. */
static const char *const stw_names[] = {
    "caml_try_run_on_all_domains*", "stw_handler", "handle_incoming",
    "caml_handle_incoming_interrupts", "stw_api_barrier", "caml_enter_global_barrier",
    "caml_global_barrier*", "caml_plat_barrier*", "minor_gc_leave_barrier",
    NULL,
};

/* Logging called from GC and wait loops alike: the caller decides. */
static const char *const neutral_names[] = { "caml_gc_log", "caml_gc_message", NULL };

/* Whether fn (suffix after a '.' ignored for C names) matches a table entry. */
static int in_table(const char *fn, size_t len, const char *const *tab)
{
    for (int i = 0; tab[i]; i++) {
        size_t n = strlen(tab[i]);
        if (tab[i][n - 1] == '*') {
            if (len >= n - 1 && memcmp(fn, tab[i], n - 1) == 0)
                return 1;
        } else if (len == n && memcmp(fn, tab[i], n) == 0)
            return 1;
    }
    return 0;
}

/* FLAMME_GCC_* of one function name (NONE for everything else, including
 * caml_plat_* locks and libc, whose meaning depends on their caller). */
static enum flamme_gc_class fn_class(const char *fn)
{
    /* OCaml symbols ("camlM.f_12") contain a '.'; runtime C names only in a
     * compiler suffix. */
    if (strncmp(fn, "caml_", 5) != 0 && strncmp(fn, "caml", 4) == 0)
        return FLAMME_GCC_NONE;
    size_t len = strcspn(fn, ".");
    if (in_table(fn, len, neutral_names))
        return FLAMME_GCC_NONE;
    if (in_table(fn, len, stw_names))
        return FLAMME_GCC_STW;
    if (in_table(fn, len, gc_names))
        return FLAMME_GCC_GC;
    return FLAMME_GCC_NONE;
}

enum flamme_gc_class flamme_gc_classify(const struct flamme_profile *p,
                                        const struct flamme_stack *st, uint32_t *gc_root)
{
    enum flamme_gc_class leafmost = FLAMME_GCC_NONE;
    for (uint32_t i = 0; i < st->n; i++) { /* leaf first */
        uint32_t fid = st->frames[i];
        if (fid >= p->nframes)
            continue;
        enum flamme_gc_class c = fn_class(p->frames[fid].function);
        if (c == FLAMME_GCC_NONE)
            continue;
        if (leafmost == FLAMME_GCC_NONE)
            leafmost = c;
        *gc_root = i;
    }
    return leafmost;
}

const char *flamme_gc_class_label(enum flamme_gc_class c)
{
    return c == FLAMME_GCC_STW ? "[GC stw wait]" : "[GC]";
}

/* ------------------------------------------------------- report section */

#define MAX_DOMAINS 128 /* Max_domains is 128 in OCaml 5 (16 by default) */

struct dom_stat {
    uint64_t weight, flag_minor, flag_major, stack_gc, stack_stw;
    uint64_t nev[3];
};

static int cmp_u64(const void *x, const void *y)
{
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return a < b ? -1 : a > b;
}

static double share(uint64_t part, uint64_t whole)
{
    return whole ? 100.0 * (double)part / (double)whole : 0.0;
}

/* Nearest-rank percentile q (0..1] of sorted v[0..n), n > 0, in µs. */
static double pctl_us(const uint64_t *v, size_t n, double q)
{
    size_t k = (size_t)(q * (double)n + 0.999999);
    if (k < 1)
        k = 1;
    if (k > n)
        k = n;
    return (double)v[k - 1] / 1e3;
}

/* Row index of a domain id: 0..MAX_DOMAINS-1, MAX_DOMAINS for "none"
 * (samples of threads outside any domain, or ids out of range). */
static int row_of(int32_t domain)
{
    return domain >= 0 && domain < MAX_DOMAINS ? domain : MAX_DOMAINS;
}

int flamme_gc_report(const struct flamme_profile *p, FILE *out)
{
    struct dom_stat *ds = calloc(MAX_DOMAINS + 1, sizeof *ds);
    uint8_t *cls = calloc(p->nstacks ? p->nstacks : 1, 1);
    uint64_t *dur = malloc((p->ngc ? p->ngc : 1) * sizeof *dur);
    if (!ds || !cls || !dur) {
        free(ds), free(cls), free(dur);
        return -1;
    }
    for (size_t i = 0; i < p->nstacks; i++) {
        uint32_t root;
        cls[i] = (uint8_t)flamme_gc_classify(p, &p->stacks[i], &root);
    }
    for (size_t i = 0; i < p->nsamples; i++) {
        const struct flamme_sample *s = &p->samples[i];
        struct dom_stat *d = &ds[row_of(s->domain)];
        d->weight += s->weight;
        if (s->flags & FLAMME_SAMPLE_GC_MINOR)
            d->flag_minor += s->weight;
        if (s->flags & FLAMME_SAMPLE_GC_MAJOR)
            d->flag_major += s->weight;
        uint8_t c = s->stack_id < p->nstacks ? cls[s->stack_id] : FLAMME_GCC_NONE;
        if (c == FLAMME_GCC_GC)
            d->stack_gc += s->weight;
        else if (c == FLAMME_GCC_STW)
            d->stack_stw += s->weight;
    }
    for (size_t i = 0; i < p->ngc; i++)
        if (p->gc[i].kind == FLAMME_GC_MINOR || p->gc[i].kind == FLAMME_GC_MAJOR_SLICE)
            ds[row_of(p->gc[i].domain)].nev[p->gc[i].kind]++;

    fprintf(out, "GC:\n");
    fprintf(out, "  share of each domain's samples: flagged by the runtime's GC hooks (minor, major slice),\n"
                 "  and by stack: GC work / waiting in a stop-the-world section ([GC stw wait])\n");
    /* Domain ids are per process: read as one, domain 0 is every process's first. */
    if (p->npids > 1)
        fprintf(out, "  (%u processes read as one: a domain's row adds up that domain of each)\n",
                p->npids);
    fprintf(out, "  %-8s %10s %8s %8s %9s %14s\n", "domain", "samples", "minor", "major", "GC stack",
            "[GC stw wait]");
    for (int r = 0; r <= MAX_DOMAINS; r++) {
        const struct dom_stat *d = &ds[r];
        if (!d->weight)
            continue;
        char name[16];
        snprintf(name, sizeof name, r == MAX_DOMAINS ? "none" : "%d", r);
        fprintf(out, "  %-8s %10llu %7.1f%% %7.1f%% %8.1f%% %13.1f%%\n", name,
                (unsigned long long)d->weight, share(d->flag_minor, d->weight),
                share(d->flag_major, d->weight), share(d->stack_gc, d->weight),
                share(d->stack_stw, d->weight));
    }
    if (p->ngc == 0) {
        fprintf(out, "  no GC duration records (runtime without GC timing hooks, or profile older than format 1.1)\n");
    } else {
        fprintf(out, "  durations per domain (runtime GC timing hooks, microseconds):\n");
        fprintf(out, "  %-8s %-12s %8s %10s %9s %9s %9s %9s\n", "domain", "kind", "count", "total ms",
                "p50", "p90", "p99", "max");
        for (int r = 0; r <= MAX_DOMAINS; r++) {
            for (uint8_t k = FLAMME_GC_MINOR; k <= FLAMME_GC_MAJOR_SLICE; k++) {
                size_t n = 0;
                uint64_t total = 0;
                if (!ds[r].nev[k])
                    continue;
                for (size_t i = 0; i < p->ngc; i++)
                    if (p->gc[i].kind == k && row_of(p->gc[i].domain) == r) {
                        dur[n++] = p->gc[i].duration_ns;
                        total += p->gc[i].duration_ns;
                    }
                qsort(dur, n, sizeof *dur, cmp_u64);
                char name[16];
                snprintf(name, sizeof name, r == MAX_DOMAINS ? "none" : "%d", r);
                fprintf(out, "  %-8s %-12s %8zu %10.1f %9.1f %9.1f %9.1f %9.1f\n", name,
                        k == FLAMME_GC_MINOR ? "minor" : "major slice", n, (double)total / 1e6,
                        pctl_us(dur, n, 0.50), pctl_us(dur, n, 0.90), pctl_us(dur, n, 0.99),
                        (double)dur[n - 1] / 1e3);
            }
        }
        fprintf(out, "  major slices that begin with nothing to mark or sweep (waiting for other\n"
                     "  domains to finish a cycle) are flagged but not timed\n");
    }
    /* Written by runtime_hooks/gc_hooks.c when it paused its major-slice hooks. */
    const char *paused = flamme_profile_info(p, "gc_major_hooks_paused_ms_n");
    unsigned long long pms, pn;
    if (paused && sscanf(paused, "%llu %llu", &pms, &pn) == 2)
        fprintf(out, "  major-slice hooks paused %llu times, %llu ms in all: the runtime ran major\n"
                     "  slices too fast to follow at no cost; slices then are neither timed nor flagged\n",
                pn, pms);
    free(ds);
    free(cls);
    free(dur);
    return 0;
}
