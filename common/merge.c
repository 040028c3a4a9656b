/*
 * common/merge.c — several profiles read as one (flamme_profile_load_many,
 * see common/profile.h; rules in doc/format.md "Several files read as
 * one"): the segments of a continuous profile, or any profiles a user
 * names together. Called by the tools only (collapse, svg, report, export).
 */
#include "common/profile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/hash.h"
#include "common/index_table.h"

/* Files in the order of their header's (pid, start). */
static int by_pid_start(const void *a, const void *b)
{
    const struct flamme_profile *x = a, *y = b;
    if (x->hdr.pid != y->hdr.pid)
        return x->hdr.pid < y->hdr.pid ? -1 : 1;
    if (x->hdr.start_monotonic_ns != y->hdr.start_monotonic_ns)
        return x->hdr.start_monotonic_ns < y->hdr.start_monotonic_ns ? -1 : 1;
    return 0;
}

/* Grows *a (elements of size sz, *cap of them) to hold need. 0 / -1. */
static int reserve(void **a, size_t *cap, size_t need, size_t sz)
{
    if (need <= *cap)
        return 0;
    size_t nc = *cap ? *cap : 64;
    while (nc < need)
        nc *= 2;
    void *n = realloc(*a, nc * sz);
    if (!n)
        return -1;
    *a = n;
    *cap = nc;
    return 0;
}

/* Thread identity across files: (pid, tid, serial), serial != 0. */
struct tkey {
    uint32_t pid, tid, serial;
    uint32_t index; /* in the merged threads */
};

/* The agent's costs in a file's INFO: budget (fields 3-7 add up),
 * writer_ns, process_cpu_ns. Each is counted from the start of its run,
 * so a pid's last file holds its whole run's; over several pids they add
 * up. has: a bit per key (1 budget, 2 writer_ns, 4 process_cpu_ns). */
struct costs {
    unsigned has;
    unsigned long long budget[7], writer[4], proc;
    int nbudget, nwriter;
};

struct merger {
    struct flamme_profile *m;
    size_t cap_frames, cap_stacks, cap_samples, cap_threads, cap_info, cap_gc, cap_allocs;
    struct tkey *keys;      /* in order of first sight */
    size_t nkeys, cap_keys;
    struct flamme_itab tkeys; /* -> index in keys */
    /* Allocation ids are unique in a process: the ALLOC_EVENTs a file has
     * no ALLOC for (its block was allocated in an earlier segment) are
     * matched against the ALLOCs of all the files of its pid, from
     * m->allocs[pid_allocs] on, once the pid's last file is in. */
    uint32_t pid;
    size_t pid_allocs;
    struct flamme_alloc_event_rec *pend;
    size_t npend, cap_pend;
    /* What the agent cost (struct costs): the current pid's latest
     * values, and the sums over the pids flushed. */
    struct costs pid_cost, sum_cost;
    uint32_t npids;
};

/* q's agent costs (its last INFO for each key). */
static void read_costs(const struct flamme_profile *q, struct costs *c)
{
    memset(c, 0, sizeof *c);
    unsigned long long *b = c->budget, *w = c->writer;
    const char *v = flamme_profile_info(q, "budget");
    if (v && (c->nbudget = sscanf(v, "%llu %llu %llu %llu %llu %llu %llu", &b[0], &b[1], &b[2],
                                  &b[3], &b[4], &b[5], &b[6])) >= 6)
        c->has |= 1;
    v = flamme_profile_info(q, "writer_ns");
    if (v && (c->nwriter = sscanf(v, "%llu %llu %llu %llu", &w[0], &w[1], &w[2], &w[3])) >= 1)
        c->has |= 2;
    v = flamme_profile_info(q, "process_cpu_ns");
    if (v && sscanf(v, "%llu", &c->proc) == 1)
        c->has |= 4;
}

/* Adds the current pid's costs to the sums. A key some pid lacks is
 * left out of the sums (has cleared), but for budget and writer_ns,
 * whose fields an older agent wrote fewer of (the missing ones add 0). */
static void add_costs(struct merger *g)
{
    struct costs *s = &g->sum_cost, *c = &g->pid_cost;
    s->has = g->npids++ ? s->has & c->has : c->has;
    for (int i = 0; i < 7; i++)
        s->budget[i] = i < 2 ? c->budget[i] : s->budget[i] + c->budget[i];
    for (int i = 0; i < 4; i++)
        s->writer[i] += c->writer[i];
    s->proc += c->proc;
    if (c->nbudget > s->nbudget)
        s->nbudget = c->nbudget;
    if (c->nwriter > s->nwriter)
        s->nwriter = c->nwriter;
}

/* Appends an INFO entry (strings copied) to m, which has room. 0 / -1. */
static int put_info(struct flamme_profile *m, const char *key, const char *value)
{
    char *k = strdup(key), *v = strdup(value);
    if (!k || !v) {
        free(k);
        free(v);
        return -1;
    }
    m->info[m->ninfo].key = k;
    m->info[m->ninfo].value = v;
    m->ninfo++;
    return 0;
}

/* Profiles of several processes (a build): the agent's costs of all of
 * them, as INFO entries after every file's (the last for a key wins). A
 * cost not every process has is written empty, so that no reader takes
 * one process's for all of them. 0 / -1. */
static int sum_costs(struct merger *g)
{
    struct flamme_profile *m = g->m;
    const struct costs *s = &g->sum_cost;
    if (g->npids < 2)
        return 0;
    if (reserve((void **)&m->info, &g->cap_info, m->ninfo + 3, sizeof *m->info))
        return -1;
    char buf[200] = "";
    int n = 0;
    if (s->has & 1)
        for (int i = 0; i < s->nbudget; i++)
            n += snprintf(buf + n, sizeof buf - (size_t)n, "%s%llu", i ? " " : "", s->budget[i]);
    if (put_info(m, "budget", buf))
        return -1;
    buf[0] = 0, n = 0;
    if (s->has & 2)
        for (int i = 0; i < s->nwriter; i++)
            n += snprintf(buf + n, sizeof buf - (size_t)n, "%s%llu", i ? " " : "", s->writer[i]);
    if (put_info(m, "writer_ns", buf))
        return -1;
    buf[0] = 0;
    if (s->has & 4)
        snprintf(buf, sizeof buf, "%llu", s->proc);
    return put_info(m, "process_cpu_ns", buf);
}

/* Matches the pending events of the current pid (see struct merger); the
 * ones still unmatched stay in m->alloc_orphans. Its agent costs are added
 * up. 0 / -1. */
static int flush_pid(struct merger *g)
{
    struct flamme_profile *m = g->m;
    add_costs(g);
    int r = flamme_alloc_match_events(m->allocs + g->pid_allocs, m->nallocs - g->pid_allocs,
                                      g->pend, g->npend, &m->alloc_orphans, &m->nalloc_orphans);
    g->npend = 0;
    g->pid_allocs = m->nallocs;
    return r;
}

static uint64_t tkey_hash(const struct tkey *k)
{
    uint64_t w[2] = {((uint64_t)k->pid << 32) | k->tid, k->serial};
    return flamme_table_hash(w, sizeof w); /* keyed per process: see common/hash.h */
}

static uint64_t tkey_hash_i(const void *ctx, uint32_t i)
{
    return tkey_hash(&((const struct merger *)ctx)->keys[i]);
}

static int tkey_eq(const void *ctx, uint32_t i, const void *key, size_t len)
{
    (void)len;
    const struct tkey *a = &((const struct merger *)ctx)->keys[i], *b = key;
    return a->pid == b->pid && a->tid == b->tid && a->serial == b->serial;
}

/* The table slot of k's (pid, tid, serial): holding its index in keys + 1,
 * or 0 where a new key goes (keys has room for it). NULL on OOM. */
static uint32_t *tkey_slot(struct merger *g, const struct tkey *k)
{
    if (reserve((void **)&g->keys, &g->cap_keys, g->nkeys + 1, sizeof *g->keys) ||
        flamme_itab_reserve(&g->tkeys, g->nkeys, 256, tkey_hash_i, g) < 0)
        return NULL;
    return flamme_itab_probe(&g->tkeys, tkey_hash(k), tkey_eq, g, k, sizeof *k);
}

/* Moves everything of q into the merged profile (q is left to be freed
 * shallowly: its strings and arrays of frames now belong to m). 0 / -1. */
static int absorb(struct merger *g, struct flamme_profile *q)
{
    struct flamme_profile *m = g->m;
    if (m->nfiles && q->hdr.pid != g->pid && flush_pid(g) != 0)
        return -1;
    g->pid = q->hdr.pid;
    uint32_t fbase = (uint32_t)m->nframes, sbase = (uint32_t)m->nstacks;
    if (reserve((void **)&m->frames, &g->cap_frames, m->nframes + q->nframes, sizeof *m->frames) ||
        reserve((void **)&m->stacks, &g->cap_stacks, m->nstacks + q->nstacks, sizeof *m->stacks) ||
        reserve((void **)&m->samples, &g->cap_samples, m->nsamples + q->nsamples,
                sizeof *m->samples) ||
        reserve((void **)&m->threads, &g->cap_threads, m->nthreads + q->nthreads,
                sizeof *m->threads) ||
        reserve((void **)&m->info, &g->cap_info, m->ninfo + q->ninfo, sizeof *m->info) ||
        reserve((void **)&m->gc, &g->cap_gc, m->ngc + q->ngc, sizeof *m->gc) ||
        reserve((void **)&m->allocs, &g->cap_allocs, m->nallocs + q->nallocs,
                sizeof *m->allocs))
        return -1;
    if (q->nframes) /* q->frames may be NULL: memcpy from NULL is undefined even for 0 bytes */
        memcpy(m->frames + m->nframes, q->frames, q->nframes * sizeof *q->frames);
    m->nframes += q->nframes;
    q->nframes = 0;
    for (size_t i = 0; i < q->nstacks; i++) {
        struct flamme_stack st = q->stacks[i];
        for (uint32_t k = 0; k < st.n; k++)
            st.frames[k] += fbase;
        m->stacks[m->nstacks++] = st;
    }
    q->nstacks = 0;
    /* Threads: one per (pid, tid, serial != 0) across files. */
    uint32_t *tmap = malloc((q->nthreads ? q->nthreads : 1) * sizeof *tmap);
    if (!tmap)
        return -1;
    for (size_t i = 0; i < q->nthreads; i++) {
        struct flamme_thread *t = &q->threads[i];
        struct tkey key = {q->hdr.pid, t->tid, t->serial, (uint32_t)m->nthreads};
        uint32_t *slot = t->serial ? tkey_slot(g, &key) : NULL;
        if (t->serial && !slot) {
            free(tmap);
            return -1;
        }
        if (slot && *slot) {
            uint32_t index = g->keys[*slot - 1].index;
            struct flamme_thread *o = &m->threads[index];
            if (t->start_ns < o->start_ns)
                o->start_ns = t->start_ns;
            if (t->end_ns > o->end_ns)
                o->end_ns = t->end_ns;
            o->lost += t->lost;
            o->kind = t->kind;
            o->domain = t->domain;
            if (t->name[0]) {
                free(o->name);
                o->name = t->name;
            } else {
                free(t->name);
            }
            t->name = NULL;
            tmap[i] = index;
            continue;
        }
        tmap[i] = (uint32_t)m->nthreads;
        if (slot) {
            g->keys[g->nkeys++] = key;
            *slot = (uint32_t)g->nkeys;
        }
        m->threads[m->nthreads] = *t;
        m->threads[m->nthreads++].command = flamme_profile_info(q, "cmdline"); /* moves with info */
        t->name = NULL;
    }
    for (size_t i = 0; i < q->nsamples; i++) {
        struct flamme_sample s = q->samples[i];
        s.stack_id += sbase;
        s.thread = tmap[s.thread];
        m->samples[m->nsamples++] = s;
    }
    for (size_t i = 0; i < q->nallocs; i++) {
        struct flamme_alloc a = q->allocs[i];
        a.stack_id += sbase;
        a.thread = tmap[a.thread];
        m->allocs[m->nallocs++] = a;
    }
    free(tmap);
    if (q->nalloc_orphans) {
        if (reserve((void **)&g->pend, &g->cap_pend, g->npend + q->nalloc_orphans,
                    sizeof *g->pend))
            return -1;
        memcpy(g->pend + g->npend, q->alloc_orphans, q->nalloc_orphans * sizeof *g->pend);
        g->npend += q->nalloc_orphans;
    }
    read_costs(q, &g->pid_cost); /* a later file of the pid: its run so far */
    if (q->ninfo)
        memcpy(m->info + m->ninfo, q->info, q->ninfo * sizeof *q->info);
    m->ninfo += q->ninfo;
    q->ninfo = 0;
    if (q->ngc)
        memcpy(m->gc + m->ngc, q->gc, q->ngc * sizeof *q->gc);
    m->ngc += q->ngc;
    m->lost += q->lost;
    m->complete = m->complete && q->complete;
    m->truncated = m->truncated || q->truncated;
    if (q->end_ns > m->end_ns)
        m->end_ns = q->end_ns;
    if (q->exit_detail || q->exit_how) {
        free(m->exit_detail);
        m->exit_how = q->exit_how;
        m->exit_code = q->exit_code;
        m->exit_detail = q->exit_detail;
        q->exit_detail = NULL;
    }
    m->file_bytes += q->file_bytes;
    m->nfiles++;
    return 0;
}

/* Frees what absorb left in q (arrays whose elements were moved). */
static void free_shell(struct flamme_profile *q)
{
    for (size_t i = 0; i < q->nthreads; i++)
        free(q->threads[i].name);
    free(q->frames);
    free(q->stacks);
    free(q->samples);
    free(q->threads);
    free(q->info);
    free(q->gc);
    free(q->allocs);
    free(q->alloc_orphans);
    free(q->exit_detail);
    memset(q, 0, sizeof *q);
}

int flamme_profile_load_many(const char *const *paths, size_t n, struct flamme_profile *p,
                             const char **truncated_file, char *err, size_t errlen)
{
    if (truncated_file)
        *truncated_file = NULL;
    if (n == 1) {
        int r = flamme_profile_load(paths[0], p, err, errlen);
        if (r == 0 && p->truncated && truncated_file)
            *truncated_file = paths[0];
        return r;
    }
    memset(p, 0, sizeof *p);
    struct flamme_profile *all = calloc(n ? n : 1, sizeof *all);
    if (!all) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        if (flamme_profile_load(paths[i], &all[i], err, errlen) != 0) {
            for (size_t j = 0; j < i; j++)
                flamme_profile_free(&all[j]);
            free(all);
            return -1;
        }
        if (all[i].truncated && truncated_file && !*truncated_file)
            *truncated_file = paths[i];
    }
    qsort(all, n, sizeof *all, by_pid_start);
    struct merger g = {.m = p};
    p->hdr = all[0].hdr;
    p->complete = 1;
    p->segment_seq = all[0].segment_seq;
    p->segment_from_ns = all[0].segment_from_ns;
    p->segment_period_ns = all[0].segment_period_ns;
    /* The span covered: the last file's end. */
    p->segment_until_ns = all[n - 1].segment_until_ns;
    p->segment_last_seq = all[n - 1].segment_seq;
    for (size_t i = 1; i < n; i++)
        if (all[i].hdr.pid == all[i - 1].hdr.pid && all[i - 1].segment_seq &&
            all[i].segment_seq > all[i - 1].segment_seq + 1)
            p->segment_missing += all[i].segment_seq - all[i - 1].segment_seq - 1;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++)
        rc = absorb(&g, &all[i]);
    if (rc == 0)
        rc = flush_pid(&g);
    if (rc == 0)
        rc = sum_costs(&g);
    p->npids = g.npids;
    if (p->npids < 2) /* one process: labels as they were */
        for (size_t i = 0; i < p->nthreads; i++)
            p->threads[i].command = NULL;
    for (size_t i = 0; i < n; i++) {
        if (rc == 0)
            free_shell(&all[i]);
        else
            flamme_profile_free(&all[i]);
    }
    free(all);
    free(g.keys);
    flamme_itab_free(&g.tkeys);
    free(g.pend);
    if (rc == 0)
        rc = flamme_profile_sort_threads(p);
    if (rc != 0) {
        flamme_profile_free(p);
        snprintf(err, errlen, "%s: out of memory while merging %zu profiles", paths[0], n);
        return -1;
    }
    return 0;
}
