/*
 * tools/export.c — the `flamme export` verb: a loaded profile written in a
 * format other viewers load: speedscope JSON, pprof (gzip'd protobuf) or
 * folded text.
 *
 * Owns: the speedscope and pprof encodings (field numbers and layout from
 * speedscope's file-format schema and pprof's profile.proto). Called by tools/main.c;
 * single thread, allocates.
 *
 * Naming follows `flamme collapse`: demangled function names, "[module]" for
 * frames without a symbol, and the same "[truncated]" / "[broken]" root
 * markers and "[blocked]" / "[kernel]" leaves, so every export shows what the flame graph
 * shows. Weights: speedscope uses unit "nanoseconds" (weight * 1e9 / hz)
 * when the header has a rate, else "none" with raw weights; pprof carries
 * both (samples/count and cpu/nanoseconds). With --alloc / --live the
 * weights are the sampled allocations' estimates (tools/alloc_view.h):
 * speedscope in bytes (or blocks), pprof as Go's heap profiles name them
 * (alloc_objects/count, alloc_space/bytes, and inuse_objects/count,
 * inuse_space/bytes when blocks were tracked until they died).
 */
#include "common/hash.h"
#include "common/index_table.h"
#include "common/outfile.h"
#include "common/profile.h"
#include "tools/alloc_view.h"
#include "tools/cmds.h"
#include "tools/collapse.h"
#include "tools/demangle.h"
#include "tools/export.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define EXPORT_ERR "flamme export: "

/* Pseudo frames appended after the profile's own frames. */
enum { PSEUDO_TRUNCATED, PSEUDO_BROKEN, PSEUDO_BLOCKED, PSEUDO_KERNEL, NPSEUDO };
static const char *const pseudo_names[NPSEUDO] = { "[truncated]", "[broken]", "[blocked]",
                                                   "[kernel]" };

/* speedscope's unit when the weights are not timer ticks ("none", or the
 * allocation view's "bytes" / "blocks"). */
static const char *value_unit = "none";

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash && slash[1] ? slash + 1 : path;
}

/* Display name of frame f into buf (always NUL-terminated). */
static const char *display_name(const struct flamme_frame *f, char *buf, size_t len)
{
    if (f->function[0])
        flamme_demangle(f->function, buf, len);
    else if (f->module[0])
        snprintf(buf, len, "[%s]", base_name(f->module));
    else
        snprintf(buf, len, "[unknown]");
    return buf;
}

/* Ids of the frames of sample s root first, into out (capacity
 * st->n + 2): pseudo frames are numbered nframes + PSEUDO_*. Frame ids out of
 * range are skipped. Returns the count. */
static size_t sample_path(const struct flamme_profile *p, const struct flamme_sample *s,
                          uint32_t *out)
{
    if (s->stack_id >= p->nstacks)
        return 0; /* the loader rejects these; never index out of bounds */
    const struct flamme_stack *st = &p->stacks[s->stack_id];
    size_t n = 0;
    uint32_t nf = (uint32_t)p->nframes;
    if (s->flags & FLAMME_SAMPLE_TRUNCATED)
        out[n++] = nf + PSEUDO_TRUNCATED;
    else if (s->flags & FLAMME_SAMPLE_BROKEN)
        out[n++] = nf + PSEUDO_BROKEN;
    for (uint32_t i = st->n; i-- > 0;)
        if (st->frames[i] < nf)
            out[n++] = st->frames[i];
    if (s->flags & FLAMME_SAMPLE_SYSCALL)
        out[n++] = nf + PSEUDO_BLOCKED;
    else if (s->flags & FLAMME_SAMPLE_KERNEL)
        out[n++] = nf + PSEUDO_KERNEL;
    return n;
}

/* How many frame references an export may write: 4096 per byte of file
 * covers a deep recursion (16,384 frames) sampled into ~4 bytes a sample;
 * only a crafted file (few samples on huge stacks) gets past it. */
static uint64_t ref_budget(const struct flamme_profile *p)
{
    return flamme_profile_budget(p, 16u << 20, 4096);
}

static size_t max_depth(const struct flamme_profile *p)
{
    size_t m = 0;
    for (size_t i = 0; i < p->nstacks; i++)
        if (p->stacks[i].n > m)
            m = p->stacks[i].n;
    return m + 2;
}

/* Label of the thread of index i in p->threads (samples name their thread
 * by index: a tid may have been reused by several threads). */
static const char *tid_label(const struct flamme_profile *p, uint32_t i, char *buf, size_t len)
{
    return flamme_thread_label(i < p->nthreads ? &p->threads[i] : NULL, buf, len);
}

static uint64_t group_hash(const void *ctx, uint32_t i)
{
    return flamme_table_hash_u64(((const uint32_t *)ctx)[i]);
}

static int group_eq(const void *ctx, uint32_t i, const void *key, size_t len)
{
    (void)len;
    return ((const uint32_t *)ctx)[i] == *(const uint32_t *)key;
}

/* The samples grouped by thread: threads in order of their first sample,
 * each thread's samples in file order. Fills *tids (ntids distinct tids),
 * *order (sample indices, thread after thread) and *start (ntids + 1
 * offsets into order). One pass with a keyed hash table (common/index_table.h)
 * and a counting sort: linear however many threads (thread churn gives tens
 * of thousands). Returns 0, or -1 on allocation failure. */
static int group_by_thread(const struct flamme_profile *p, uint32_t **tids, size_t *ntids,
                           size_t **order, size_t **start)
{
    size_t ns = p->nsamples, n = 0;
    struct flamme_itab tab = { 0 }; /* thread -> index in tid */
    uint32_t *tid = malloc((ns + 1) * sizeof *tid), *of = malloc((ns + 1) * sizeof *of);
    size_t *ord = malloc((ns + 1) * sizeof *ord), *st = NULL;
    if (!tid || !of || !ord)
        goto fail;
    for (size_t i = 0; i < ns; i++) {
        uint32_t t = p->samples[i].thread;
        if (flamme_itab_reserve(&tab, n, 64, group_hash, tid) < 0)
            goto fail;
        uint32_t *slot =
            flamme_itab_probe(&tab, flamme_table_hash_u64(t), group_eq, tid, &t, sizeof t);
        if (!*slot) {
            tid[n] = t;
            *slot = (uint32_t)++n;
        }
        of[i] = *slot - 1;
    }
    st = calloc(n + 2, sizeof *st);
    if (!st)
        goto fail;
    for (size_t i = 0; i < ns; i++)
        st[of[i] + 2]++;
    for (size_t k = 2; k < n + 2; k++)
        st[k] += st[k - 1];
    for (size_t i = 0; i < ns; i++) /* st[k + 1]: next free place of thread k */
        ord[st[of[i] + 1]++] = i;
    flamme_itab_free(&tab);
    free(of);
    *tids = tid, *ntids = n, *order = ord, *start = st;
    return 0;
fail:
    flamme_itab_free(&tab);
    free(tid);
    free(of);
    free(ord);
    free(st);
    return -1;
}

/* ------------------------------------------------------------ string interning */

/* String -> dense index table (pprof string table, speedscope frame table).
 * Strings are copied. */
struct strtab {
    char **s;       /* by index */
    size_t n, scap; /* entries, capacity of s */
    struct flamme_itab ids;
};

static uint64_t str_hash(const char *s, size_t len)
{
    return flamme_table_hash(s, len);
}

static uint64_t strtab_hash(const void *ctx, uint32_t i)
{
    const struct strtab *t = ctx;
    return str_hash(t->s[i], strlen(t->s[i]));
}

static int strtab_eq(const void *ctx, uint32_t i, const void *s, size_t len)
{
    const struct strtab *t = ctx;
    return strcmp(t->s[i], s) == 0;
}

/* Index of s (added if new). Returns -1 on allocation failure. */
static int64_t strtab_get(struct strtab *t, const char *s)
{
    size_t len = strlen(s);
    if (flamme_itab_reserve(&t->ids, t->n, 256, strtab_hash, t) < 0)
        return -1;
    uint32_t *slot = flamme_itab_probe(&t->ids, str_hash(s, len), strtab_eq, t, s, len);
    if (*slot)
        return *slot - 1;
    if (t->n == t->scap) {
        size_t nc = t->scap ? t->scap * 2 : 256;
        char **ns = realloc(t->s, nc * sizeof *ns);
        if (!ns)
            return -1;
        t->s = ns;
        t->scap = nc;
    }
    char *copy = strdup(s);
    if (!copy)
        return -1;
    t->s[t->n] = copy;
    *slot = (uint32_t)t->n + 1;
    return (int64_t)t->n++;
}

static void strtab_free(struct strtab *t)
{
    for (size_t i = 0; i < t->n; i++)
        free(t->s[i]);
    free(t->s);
    flamme_itab_free(&t->ids);
}

/* ------------------------------------------------------------ speedscope */

/* Length of the valid UTF-8 sequence at s (1..4), or 0 when the bytes there
 * are not one: stray continuation bytes, overlong forms, surrogates, code
 * points past U+10FFFF, or a sequence cut short (by the NUL). */
static size_t utf8_len(const unsigned char *s)
{
    unsigned c = s[0];
    if (c < 0x80)
        return 1;
    size_t need = c >= 0xf0 && c <= 0xf4 ? 3 : c >= 0xe0 ? (c <= 0xef ? 2 : 0) : c >= 0xc2 ? 1 : 0;
    uint32_t cp = need == 1 ? (c & 0x1f) : need == 2 ? (c & 0x0f) : (c & 0x07);
    for (size_t k = 1; k <= need; k++) {
        if ((s[k] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (s[k] & 0x3f);
    }
    if (!need || (need == 2 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
        (need == 3 && (cp < 0x10000 || cp > 0x10ffff)))
        return 0;
    return need + 1;
}

/* Copies in to out (capacity len, always NUL-terminated, cut only between
 * characters) with every invalid UTF-8 byte replaced by U+FFFD, so protobuf
 * string fields hold valid UTF-8 as proto3 requires. Returns out. */
static char *utf8_fix(const char *in, char *out, size_t len)
{
    const unsigned char *s = (const unsigned char *)in;
    size_t o = 0;
    while (*s) {
        size_t n = utf8_len(s);
        const unsigned char *src = n ? s : (const unsigned char *)"\xef\xbf\xbd";
        size_t w = n ? n : 3;
        if (o + w >= len)
            break;
        memcpy(out + o, src, w);
        o += w;
        s += n ? n : 1; /* resynchronize on the next byte */
    }
    out[o] = '\0';
    return out;
}

/* Writes s as a JSON string: quotes, backslashes and control characters
 * escaped, invalid UTF-8 bytes replaced by U+FFFD, so any name gives a
 * document JSON parsers accept. */
static void json_str(FILE *out, const char *str)
{
    const unsigned char *s = (const unsigned char *)str;
    fputc('"', out);
    while (*s) {
        unsigned c = *s;
        size_t n = utf8_len(s);
        if (c == '"' || c == '\\')
            fprintf(out, "\\%c", c);
        else if (c < 0x20 || c == 0x7f)
            fprintf(out, "\\u%04x", c);
        else if (n)
            fwrite(s, 1, n, out);
        else
            fputs("\\ufffd", out);
        s += n ? n : 1;
    }
    fputc('"', out);
}

/* Writes one "sampled" profile of the samples idx[0..nidx) (all samples
 * when idx is NULL). fidx maps frame ids (and pseudo ids) to shared frame indices.
 * Returns 0, or -1 on allocation failure. */
static int speedscope_profile(FILE *out, const struct flamme_profile *p, const uint32_t *fidx,
                              const char *name, const size_t *idx, size_t nidx, uint64_t period,
                              const struct flamme_thread *thread)
{
    uint32_t *path = malloc(max_depth(p) * sizeof *path);
    /* One thread's profile is laid on the profile's time axis: it begins
     * at the thread's start, and the time between samples (the thread
     * blocked or waiting for a CPU) is an idle sample, so the threads of
     * a run line up in speedscope's time order view. gap[k]: the idle time
     * before sample k. */
    uint64_t *gap = thread && period ? calloc(nidx ? nidx : 1, sizeof *gap) : NULL;
    if (!path || (thread && period && !gap)) {
        free(path);
        free(gap);
        return -1;
    }
    uint64_t tmin = UINT64_MAX, tmax = 0, total = 0;
    for (size_t k = 0; k < nidx; k++) {
        const struct flamme_sample *s = &p->samples[idx ? idx[k] : k];
        tmin = s->time_ns < tmin ? s->time_ns : tmin;
        tmax = s->time_ns > tmax ? s->time_ns : tmax;
        total += s->weight;
    }
    uint64_t start = 0, end = total;
    if (period) {
        uint64_t t0 = p->hdr.start_monotonic_ns;
        if (tmin == UINT64_MAX)
            tmin = tmax = t0;
        start = tmin > t0 ? tmin - t0 : 0;
        end = (tmax > t0 ? tmax - t0 : 0) + period;
    }
    if (gap) {
        uint64_t t0 = p->hdr.start_monotonic_ns;
        start = thread->start_ns > t0 ? thread->start_ns - t0 : 0;
        uint64_t cur = start;
        for (size_t k = 0; k < nidx; k++) {
            const struct flamme_sample *s = &p->samples[idx ? idx[k] : k];
            uint64_t len = (uint64_t)s->weight * period;
            uint64_t t = s->time_ns > t0 ? s->time_ns - t0 : 0;
            uint64_t begin = t > len ? t - len : 0;
            if (begin > cur) {
                gap[k] = begin - cur;
                cur = begin;
            }
            cur += len;
        }
        end = cur;
    }
    fputs("{\"type\":\"sampled\",\"name\":", out);
    json_str(out, name);
    fprintf(out, ",\"unit\":\"%s\",\"startValue\":%llu,\"endValue\":%llu,\"samples\":[",
            period ? "nanoseconds" : value_unit, (unsigned long long)start, (unsigned long long)end);
    int first = 1;
    for (size_t k = 0; k < nidx; k++) {
        const struct flamme_sample *s = &p->samples[idx ? idx[k] : k];
        size_t n = sample_path(p, s, path);
        if (gap && gap[k])
            fputs(first ? "[]" : ",[]", out);
        fputs(first && !(gap && gap[k]) ? "[" : ",[", out);
        first = 0;
        for (size_t j = 0; j < n; j++)
            fprintf(out, j ? ",%u" : "%u", (unsigned)fidx[path[j]]);
        fputc(']', out);
    }
    fputs("],\"weights\":[", out);
    first = 1;
    for (size_t k = 0; k < nidx; k++) {
        const struct flamme_sample *s = &p->samples[idx ? idx[k] : k];
        uint64_t w = period ? (uint64_t)s->weight * period : s->weight;
        if (gap && gap[k]) {
            fprintf(out, first ? "%llu" : ",%llu", (unsigned long long)gap[k]);
            first = 0;
        }
        fprintf(out, first ? "%llu" : ",%llu", (unsigned long long)w);
        first = 0;
    }
    fputs("]}", out);
    free(gap);
    free(path);
    return 0;
}

/* 1 if writing every sample's frames passes the budget. */
static int speedscope_too_big(const struct flamme_profile *p)
{
    uint64_t refs = 0, budget = ref_budget(p);
    for (size_t i = 0; i < p->nsamples && refs <= budget; i++)
        if (p->samples[i].stack_id < p->nstacks)
            refs += p->stacks[p->samples[i].stack_id].n + 2u;
    return refs > budget;
}

/* ------------------------------------------------------------ perf script */

/* Writes s with every byte that would break a perf script line (control
 * characters) as '?', and, when nospace, blanks as '_' too (perf's command
 * and module fields end at a blank in every reader of the format). */
static void perf_text(FILE *out, const char *s, int nospace)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c < 0x20 || c == 0x7f)
            fputc('?', out);
        else if (nospace && c == ' ')
            fputc('_', out);
        else
            fputc(c, out);
    }
}

/* Sample order for perf script: by time, then file order. */
static int by_time(const void *a, const void *b, void *ctx)
{
    const struct flamme_profile *p = ctx;
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    uint64_t tx = p->samples[x].time_ns, ty = p->samples[y].time_ns;
    if (tx != ty)
        return tx < ty ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* `perf script` text (doc/format.md has none of this; see the man page):
 * per sample, in time order, a header "COMM PID/TID SECONDS.MICROS: PERIOD
 * EVENT:" — COMM the thread's label as `flamme collapse --threads` names it
 * with blanks as '-', the time CLOCK_MONOTONIC as perf prints it, PERIOD
 * the sample's weight in nanoseconds of the sampling period — then one line
 * per frame, leaf first: a tab, the address in hex, the function, the
 * module in parentheses; a blank line ends the sample. Returns 0, -1 on
 * allocation failure, -2 past the frame reference budget. */
static int export_perf_script(FILE *out, const struct flamme_profile *p)
{
    if (speedscope_too_big(p))
        return -2;
    size_t *order = malloc((p->nsamples ? p->nsamples : 1) * sizeof *order);
    if (!order)
        return -1;
    for (size_t i = 0; i < p->nsamples; i++)
        order[i] = i;
    qsort_r(order, p->nsamples, sizeof *order, by_time, (void *)p);
    const char *mode = flamme_profile_info(p, "mode");
    const char *event = mode && strcmp(mode, "wall") == 0 ? "wall-clock" : "cpu-clock";
    uint64_t period = p->hdr.hz ? 1000000000ull / p->hdr.hz : 1;
    char label[128], name[1024];
    for (size_t k = 0; k < p->nsamples; k++) {
        const struct flamme_sample *s = &p->samples[order[k]];
        if (s->stack_id >= p->nstacks)
            continue;
        flamme_thread_label(flamme_sample_thread(p, s), label, sizeof label);
        for (char *c = label; *c; c++)
            if (*c == ' ')
                *c = '-';
            else if (*c == '(' || *c == ')')
                *c = '_';
        perf_text(out, label, 1);
        fprintf(out, " %u/%u %llu.%06llu: %llu %s:\n", (unsigned)p->hdr.pid, (unsigned)s->tid,
                (unsigned long long)(s->time_ns / 1000000000ull),
                (unsigned long long)(s->time_ns % 1000000000ull / 1000u),
                (unsigned long long)s->weight * period, event);
        const struct flamme_stack *st = &p->stacks[s->stack_id];
        for (uint32_t j = 0; j < st->n; j++) {
            if (st->frames[j] >= p->nframes)
                continue;
            const struct flamme_frame *f = &p->frames[st->frames[j]];
            fprintf(out, "\t%16llx ", (unsigned long long)f->addr);
            if (f->function[0])
                perf_text(out, flamme_demangle(f->function, name, sizeof name), 0);
            else
                fputs("[unknown]", out);
            fputs(" (", out);
            perf_text(out, f->module[0] ? f->module : "[unknown]", 1);
            fputs(")\n", out);
        }
        fputc('\n', out);
    }
    free(order);
    return 0;
}

/* speedscope's file format: one shared frame table (deduplicated by name and
 * file, so two addresses in one function are one frame), then one sampled
 * profile for all threads or one per thread. Samples stay in file order,
 * which is time order per thread. Returns 0, -1 on allocation failure, -2 past
 * the frame reference budget. */
static int export_speedscope(FILE *out, const struct flamme_profile *p, int threads,
                             const char *title)
{
    int rc = -1;
    size_t nall = p->nframes + NPSEUDO, ntids = 0, *order = NULL, *start = NULL;
    if (speedscope_too_big(p))
        return -2;
    uint32_t *fidx = malloc(nall * sizeof *fidx);
    uint32_t *tids = NULL;
    struct strtab keys = { 0 };
    if (!fidx)
        return -1;
    /* Frame key "<length of file>:<file><name>": a profile's names may hold
     * any byte but NUL, so no separator would do. */
    char name[4096], key[8192];
    for (size_t i = 0; i < nall; i++) {
        const char *file = "";
        if (i < p->nframes) {
            display_name(&p->frames[i], name, sizeof name);
            file = base_name(p->frames[i].module);
        } else
            snprintf(name, sizeof name, "%s", pseudo_names[i - p->nframes]);
        int flen = (int)strnlen(file, 2048); /* the key always holds the whole file part */
        snprintf(key, sizeof key, "%d:%.*s%s", flen, flen, file, name);
        int64_t ix = strtab_get(&keys, key);
        if (ix < 0)
            goto out;
        fidx[i] = (uint32_t)ix;
    }
    fputs("{\"$schema\":\"https://www.speedscope.app/file-format-schema.json\",\"exporter\":\"flamme\",\"name\":",
          out);
    json_str(out, title);
    fputs(",\"activeProfileIndex\":0,\"shared\":{\"frames\":[", out);
    for (size_t i = 0; i < keys.n; i++) {
        char *file = strchr(keys.s[i], ':') + 1;
        char *fname = file + strtoull(keys.s[i], NULL, 10), c = *fname;
        fputs(i ? ",{\"name\":" : "{\"name\":", out);
        json_str(out, fname);
        if (fname > file) {
            *fname = '\0';
            fputs(",\"file\":", out);
            json_str(out, file);
            *fname = c;
        }
        fputc('}', out);
    }
    fputs("]},\"profiles\":[", out);
    uint64_t period = p->hdr.hz && !strcmp(value_unit, "none") ? 1000000000ull / p->hdr.hz : 0;
    if (!threads) {
        if (speedscope_profile(out, p, fidx, "all threads", NULL, p->nsamples, period, NULL) != 0)
            goto out;
    } else {
        if (group_by_thread(p, &tids, &ntids, &order, &start) != 0)
            goto out;
        for (size_t i = 0; i < ntids; i++) {
            char lbl[96];
            tid_label(p, tids[i], lbl, sizeof lbl);
            if (i)
                fputc(',', out);
            const struct flamme_sample *s0 = &p->samples[order[start[i]]];
            if (speedscope_profile(out, p, fidx, lbl, order + start[i], start[i + 1] - start[i],
                                   period, flamme_sample_thread(p, s0)) != 0)
                goto out;
        }
    }
    fputs("]}\n", out);
    rc = 0;
out:
    free(tids);
    free(order);
    free(start);
    free(fidx);
    strtab_free(&keys);
    return rc;
}

/* ------------------------------------------------------------ pprof */

/* Growable byte buffer for protobuf encoding. */
struct pb {
    unsigned char *b;
    size_t len, cap;
    int oom;
};

static void pb_bytes(struct pb *b, const void *d, size_t n)
{
    if (b->oom || n == 0) /* an empty sub-message has no buffer yet (d NULL) */
        return;
    if (b->len + n > b->cap) {
        size_t nc = b->cap ? b->cap : 4096;
        while (nc < b->len + n)
            nc *= 2;
        unsigned char *nb = realloc(b->b, nc);
        if (!nb) {
            b->oom = 1;
            return;
        }
        b->b = nb;
        b->cap = nc;
    }
    memcpy(b->b + b->len, d, n);
    b->len += n;
}

static void pb_varint(struct pb *b, uint64_t v)
{
    unsigned char tmp[10];
    size_t n = 0;
    do {
        tmp[n] = (unsigned char)(v & 0x7f);
        v >>= 7;
        if (v)
            tmp[n] |= 0x80;
        n++;
    } while (v);
    pb_bytes(b, tmp, n);
}

/* Varint field; proto3 leaves zero scalars out. */
static void pb_uint(struct pb *b, unsigned field, uint64_t v)
{
    if (!v)
        return;
    pb_varint(b, (uint64_t)field << 3);
    pb_varint(b, v);
}

/* Length-delimited field (sub-message, string or packed scalars). */
static void pb_len(struct pb *b, unsigned field, const void *d, size_t n)
{
    pb_varint(b, (uint64_t)field << 3 | 2);
    pb_varint(b, n);
    pb_bytes(b, d, n);
}

/* Appends sub-message m as field of b, then empties m for reuse. */
static void pb_msg(struct pb *b, unsigned field, struct pb *m)
{
    if (m->oom)
        b->oom = 1;
    pb_len(b, field, m->b, m->len);
    m->len = 0;
}

/* One aggregated pprof sample: a (stack, thread, flags) combination. */
struct agg {
    uint32_t stack_id, tid, flags; /* tid: the thread's index in p->threads */
    uint64_t weight;
    uint64_t v[4]; /* allocations: alloc blocks, alloc bytes, inuse blocks, inuse bytes */
};

/* Rounds x with the error carried in *carry (sums stay exact). */
static uint64_t carry_round(double x, double *carry)
{
    *carry += x;
    double w = *carry < 0 ? 0 : (double)(uint64_t)*carry;
    *carry -= w;
    return (uint64_t)w;
}

static int agg_cmp(const void *a, const void *b)
{
    const struct agg *x = a, *y = b;
    if (x->stack_id != y->stack_id)
        return x->stack_id < y->stack_id ? -1 : 1;
    if (x->tid != y->tid)
        return x->tid < y->tid ? -1 : 1;
    return x->flags < y->flags ? -1 : x->flags > y->flags;
}

/* The flags that change a sample's exported frames. */
#define PATH_FLAGS \
    (FLAMME_SAMPLE_TRUNCATED | FLAMME_SAMPLE_BROKEN | FLAMME_SAMPLE_SYSCALL | FLAMME_SAMPLE_KERNEL)

/* weight ticks at hz as nanoseconds, computed in 128 bits and capped at
 * INT64_MAX (pprof values are int64); 0 when the rate is unknown. */
static uint64_t weight_ns(uint64_t weight, uint32_t hz)
{
    if (!hz)
        return 0;
    unsigned __int128 ns = (unsigned __int128)weight * 1000000000u / hz;
    return ns > INT64_MAX ? (uint64_t)INT64_MAX : (uint64_t)ns;
}

/* The frames' module that is the profiled program itself: the one whose
 * base name is the base name of the command line's first word (info
 * "cmdline"). pprof readers take the first Mapping as the main binary
 * ("File:" in go tool pprof), so it gets mapping id 1. Returns NULL when
 * no frame is in it (or there is no command line). */
static const char *main_module(const struct flamme_profile *p)
{
    const char *cmd = flamme_profile_info(p, "cmdline");
    if (!cmd)
        return NULL;
    size_t n = strcspn(cmd, " ");
    const char *base = cmd;
    for (size_t i = 0; i < n; i++)
        if (cmd[i] == '/')
            base = cmd + i + 1;
    size_t blen = (size_t)(cmd + n - base);
    if (blen == 0)
        return NULL;
    for (size_t i = 0; i < p->nframes; i++) {
        const char *m = p->frames[i].module, *mb = strrchr(m, '/');
        mb = mb ? mb + 1 : m;
        if (strlen(mb) == blen && memcmp(mb, base, blen) == 0)
            return m;
    }
    return NULL;
}

/* Encodes the profile as a perftools.profiles.Profile into b. Location id =
 * frame id + 1 (pseudo frames after the real ones), one Function per
 * distinct (display name, raw symbol), one Mapping per module. Samples with
 * the same frames (and thread with --threads) are merged. Returns 0, or -1
 * on allocation failure. */
static int pprof_encode(struct pb *b, const struct flamme_profile *p, int threads,
                        const struct flamme_view *view)
{
    int rc = -1;
    struct strtab st = { 0 }, fnkeys = { 0 }, mods = { 0 };
    struct pb m = { 0 }, sub = { 0 }, pk = { 0 };
    size_t nall = p->nframes + NPSEUDO;
    int64_t *fn_name = NULL, *fn_sys = NULL;
    uint32_t *loc_fn = malloc(nall * sizeof *loc_fn), *loc_map = malloc(nall * sizeof *loc_map);
    uint64_t *map_lo = NULL, *map_hi = NULL;
    size_t nin = view->alloc ? p->nallocs : p->nsamples;
    struct agg *ag = malloc((nin + 1) * sizeof *ag);
    uint32_t *path = malloc(max_depth(p) * sizeof *path);
    if (!loc_fn || !loc_map || !ag || !path)
        goto out;

    if (strtab_get(&st, "") != 0)
        goto out;
    int64_t s_samples = strtab_get(&st, "samples"), s_count = strtab_get(&st, "count");
    int64_t s_cpu = strtab_get(&st, "cpu"), s_ns = strtab_get(&st, "nanoseconds");
    int64_t s_thread = strtab_get(&st, "thread");
    if (s_samples < 0 || s_count < 0 || s_cpu < 0 || s_ns < 0 || s_thread < 0)
        goto out;
    const char *tracked = flamme_profile_info(p, "alloc_live");
    int inuse = view->alloc && tracked && strcmp(tracked, "1") == 0;
    int64_t s_alloc[4] = { strtab_get(&st, "alloc_objects"), strtab_get(&st, "alloc_space"),
                           strtab_get(&st, "inuse_objects"), strtab_get(&st, "inuse_space") };
    int64_t s_bytes = strtab_get(&st, "bytes"), s_space = strtab_get(&st, "space");
    if (s_alloc[0] < 0 || s_alloc[1] < 0 || s_alloc[2] < 0 || s_alloc[3] < 0 || s_bytes < 0 ||
        s_space < 0)
        goto out;

    /* Functions and mappings. Keys "name\x01sys" index fn_name/fn_sys. */
    size_t fncap = nall;
    fn_name = malloc(fncap * sizeof *fn_name);
    fn_sys = malloc(fncap * sizeof *fn_sys);
    if (!fn_name || !fn_sys)
        goto out;
    char name[4096], key[8192];
    const char *exe = main_module(p);
    if (exe && strtab_get(&mods, exe) < 0)
        goto out;
    for (size_t i = 0; i < nall; i++) {
        const char *sys = "";
        loc_map[i] = 0;
        if (i < p->nframes) {
            const struct flamme_frame *f = &p->frames[i];
            char raw[4096];
            utf8_fix(display_name(f, raw, sizeof raw), name, sizeof name);
            sys = f->function;
            if (f->module[0]) {
                int64_t mi = strtab_get(&mods, f->module);
                if (mi < 0)
                    goto out;
                loc_map[i] = (uint32_t)mi + 1;
            }
        } else
            snprintf(name, sizeof name, "%s", pseudo_names[i - p->nframes]);
        snprintf(key, sizeof key, "%s\x01%s", name, sys);
        size_t before = fnkeys.n;
        int64_t fi = strtab_get(&fnkeys, key);
        if (fi < 0)
            goto out;
        if (fnkeys.n != before) {
            fn_name[fi] = strtab_get(&st, name);
            fn_sys[fi] = strtab_get(&st, sys);
            if (fn_name[fi] < 0 || fn_sys[fi] < 0)
                goto out;
        }
        loc_fn[i] = (uint32_t)fi + 1;
    }
    map_lo = malloc((mods.n + 1) * sizeof *map_lo);
    map_hi = calloc(mods.n + 1, sizeof *map_hi);
    if (!map_lo || !map_hi)
        goto out;
    for (size_t i = 0; i <= mods.n; i++)
        map_lo[i] = UINT64_MAX;
    for (size_t i = 0; i < p->nframes; i++) {
        if (!loc_map[i])
            continue;
        const struct flamme_frame *f = &p->frames[i];
        uint64_t base = f->addr >= f->offset ? f->addr - f->offset : f->addr;
        size_t mi = loc_map[i] - 1;
        map_lo[mi] = base < map_lo[mi] ? base : map_lo[mi];
        map_hi[mi] = f->addr + 1 > map_hi[mi] ? f->addr + 1 : map_hi[mi];
    }

    int nvals = view->alloc ? (inuse ? 4 : 2) : 2;
    if (view->alloc) {
        /* sample_type [alloc_objects/count, alloc_space/bytes(, inuse_...)] as Go's heap profiles */
        for (int k = 0; k < nvals; k++) {
            pb_uint(&m, 1, (uint64_t)s_alloc[k]);
            pb_uint(&m, 2, (uint64_t)(k & 1 ? s_bytes : s_count));
            pb_msg(b, 1, &m);
        }
    } else {
        /* sample_type [samples/count, cpu/nanoseconds] */
        pb_uint(&m, 1, (uint64_t)s_samples);
        pb_uint(&m, 2, (uint64_t)s_count);
        pb_msg(b, 1, &m);
        pb_uint(&m, 1, (uint64_t)s_cpu);
        pb_uint(&m, 2, (uint64_t)s_ns);
        pb_msg(b, 1, &m);
    }

    /* Samples, merged by (stack, thread, path flags). */
    size_t na = 0;
    double carry[4] = { 0 };
    for (size_t i = 0; view->alloc && i < p->nallocs; i++) {
        const struct flamme_alloc *x = &p->allocs[i];
        struct agg a = { x->stack_id, threads ? x->thread : 0, x->flags & PATH_FLAGS, 0, { 0 } };
        double k = flamme_alloc_blocks(x), by = flamme_alloc_bytes(x);
        a.v[0] = carry_round(k, &carry[0]);
        a.v[1] = carry_round(by, &carry[1]);
        a.v[2] = carry_round(x->died_ns ? 0 : k, &carry[2]);
        a.v[3] = carry_round(x->died_ns ? 0 : by, &carry[3]);
        a.weight = a.v[1];
        if (x->stack_id < p->nstacks)
            ag[na++] = a;
    }
    for (size_t i = 0; !view->alloc && i < p->nsamples; i++) {
        const struct flamme_sample *s = &p->samples[i];
        if (s->weight == 0)
            continue;
        ag[na++] = (struct agg){ s->stack_id, threads ? s->thread : 0, s->flags & PATH_FLAGS, s->weight, { 0 } };
    }
    if (na)
        qsort(ag, na, sizeof *ag, agg_cmp);
    uint64_t period = p->hdr.hz ? 1000000000ull / p->hdr.hz : 0;
    uint64_t refs = 0, budget = ref_budget(p);
    for (size_t i = 0; i < na;) {
        struct agg a = ag[i];
        size_t j = i + 1;
        for (; j < na && agg_cmp(&ag[j], &a) == 0; j++) {
            a.weight += ag[j].weight;
            for (int k = 0; k < 4; k++)
                a.v[k] += ag[j].v[k];
        }
        i = j;
        struct flamme_sample s = { .stack_id = a.stack_id, .tid = a.tid, .flags = a.flags };
        size_t n = sample_path(p, &s, path);
        if ((refs += n) > budget) {
            rc = -2;
            goto out;
        }
        for (size_t k = n; k-- > 0;) /* pprof wants leaf first */
            pb_varint(&pk, (uint64_t)path[k] + 1);
        pb_msg(&m, 1, &pk);
        if (view->alloc) {
            for (int k = 0; k < nvals; k++)
                pb_varint(&pk, a.v[k] > INT64_MAX ? (uint64_t)INT64_MAX : a.v[k]);
        } else {
            pb_varint(&pk, a.weight);
            pb_varint(&pk, weight_ns(a.weight, p->hdr.hz));
        }
        pb_msg(&m, 2, &pk);
        if (threads) {
            char lbl[96];
            int64_t li = strtab_get(&st, tid_label(p, a.tid, lbl, sizeof lbl));
            if (li < 0)
                goto out;
            pb_uint(&sub, 1, (uint64_t)s_thread);
            pb_uint(&sub, 2, (uint64_t)li);
            pb_msg(&m, 3, &sub);
        }
        pb_msg(b, 2, &m);
    }

    /* Mappings, locations, functions. */
    for (size_t i = 0; i < mods.n; i++) {
        pb_uint(&m, 1, i + 1);
        pb_uint(&m, 2, map_lo[i] == UINT64_MAX ? 0 : map_lo[i]);
        pb_uint(&m, 3, map_hi[i]);
        int64_t fi = strtab_get(&st, utf8_fix(mods.s[i], key, sizeof key));
        if (fi < 0)
            goto out;
        pb_uint(&m, 5, (uint64_t)fi);
        pb_uint(&m, 7, 1); /* has_functions */
        pb_msg(b, 3, &m);
    }
    for (size_t i = 0; i < nall; i++) {
        pb_uint(&m, 1, i + 1);
        pb_uint(&m, 2, loc_map[i]);
        if (i < p->nframes)
            pb_uint(&m, 3, p->frames[i].addr);
        pb_uint(&sub, 1, loc_fn[i]);
        pb_msg(&m, 4, &sub);
        pb_msg(b, 4, &m);
    }
    for (size_t i = 0; i < fnkeys.n; i++) {
        pb_uint(&m, 1, i + 1);
        pb_uint(&m, 2, (uint64_t)fn_name[i]);
        pb_uint(&m, 3, (uint64_t)fn_sys[i]);
        pb_msg(b, 5, &m);
    }
    for (size_t i = 0; i < st.n; i++)
        pb_len(b, 6, st.s[i], strlen(st.s[i]));
    pb_uint(b, 9, p->hdr.start_realtime_ns);
    if (p->end_ns > p->hdr.start_monotonic_ns)
        pb_uint(b, 10, p->end_ns - p->hdr.start_monotonic_ns);
    if (view->alloc) {
        /* period: the mean bytes between two samples, as Go's heap profiles */
        const char *rate = flamme_profile_info(p, "alloc_rate");
        double r = rate ? strtod(rate, NULL) : 0;
        pb_uint(&m, 1, (uint64_t)s_space);
        pb_uint(&m, 2, (uint64_t)s_bytes);
        pb_msg(b, 11, &m);
        pb_uint(b, 12, r > 0 && r <= 1 ? (uint64_t)(8 / r) : 0);
        pb_uint(b, 14, (uint64_t)s_alloc[view->live && inuse ? 3 : 1]);
    } else {
        pb_uint(&m, 1, (uint64_t)s_cpu);
        pb_uint(&m, 2, (uint64_t)s_ns);
        pb_msg(b, 11, &m);
        pb_uint(b, 12, period);
        pb_uint(b, 14, (uint64_t)s_cpu);
    }
    rc = b->oom || m.oom || sub.oom || pk.oom ? -1 : 0;
out:
    strtab_free(&st);
    strtab_free(&fnkeys);
    strtab_free(&mods);
    free(m.b);
    free(sub.b);
    free(pk.b);
    free(fn_name);
    free(fn_sys);
    free(loc_fn);
    free(loc_map);
    free(map_lo);
    free(map_hi);
    free(ag);
    free(path);
    return rc;
}

/* Writes data gzip-compressed to out (pprof only accepts the gzip wrapper,
 * not a bare zlib stream). Returns 0, or -1 on a zlib or write error. */
static int write_gzip(FILE *out, const unsigned char *data, size_t len)
{
    z_stream z = { 0 };
    if (deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        return -1;
    unsigned char buf[65536];
    int zr, rc = 0;
    z.next_in = (unsigned char *)data;
    z.avail_in = 0;
    size_t left = len;
    do {
        if (z.avail_in == 0 && left) {
            uInt chunk = left > (1u << 30) ? (1u << 30) : (uInt)left;
            z.avail_in = chunk;
            left -= chunk;
        }
        z.next_out = buf;
        z.avail_out = sizeof buf;
        zr = deflate(&z, left || z.avail_in ? Z_NO_FLUSH : Z_FINISH);
        if (zr == Z_STREAM_ERROR) {
            rc = -1;
            break;
        }
        size_t have = sizeof buf - z.avail_out;
        if (have && fwrite(buf, 1, have, out) != have) {
            rc = -1;
            break;
        }
    } while (zr != Z_STREAM_END);
    deflateEnd(&z);
    return rc;
}

/* ------------------------------------------------------------ folded */

static void emit_line(void *ctx, const char *stack, uint64_t count)
{
    fprintf((FILE *)ctx, "%s %llu\n", stack, (unsigned long long)count);
}

/* ------------------------------------------------------------ the verb */

enum fmt { FMT_NONE, FMT_SPEEDSCOPE, FMT_PPROF, FMT_FOLDED, FMT_PERF_SCRIPT };

static int usage(FILE *f)
{
    fprintf(f, "usage: flamme export FILE... --format speedscope|pprof|folded|perf-script [-o OUT] [--threads]\n"
               "  speedscope  JSON for https://www.speedscope.app (unit: nanoseconds from the rate)\n"
               "  pprof       gzip'd profile.proto for `pprof` (samples/count and cpu/nanoseconds)\n"
               "  folded      folded stacks, as `flamme collapse`\n"
               "  perf-script `perf script` text: one sample per block, time order, thread\n"
               "              label and pid/tid, frames leaf first (Firefox Profiler, speedscope,\n"
               "              stackcollapse-perf.pl)\n"
               "  --alloc     sampled allocations instead of CPU samples: speedscope in bytes\n"
               "              (--blocks: blocks), pprof alloc_objects/alloc_space (+ inuse_*\n"
               "              when recorded with --live); --live: only what was alive at the end\n"
               "              (pprof: all four, inuse_space shown first)\n"
               "  --threads   one speedscope profile per thread / a pprof \"thread\" label /\n"
               "              a thread root frame in folded stacks\n"
               "  -o OUT      output file (default: standard output)\n");
    return 2;
}

static enum fmt parse_format(const char *s)
{
    if (strcmp(s, "speedscope") == 0)
        return FMT_SPEEDSCOPE;
    if (strcmp(s, "pprof") == 0)
        return FMT_PPROF;
    if (strcmp(s, "folded") == 0 || strcmp(s, "collapsed") == 0)
        return FMT_FOLDED;
    if (strcmp(s, "perf-script") == 0 || strcmp(s, "perf") == 0)
        return FMT_PERF_SCRIPT;
    return FMT_NONE;
}

int flamme_export_pprof_gz(const struct flamme_profile *p, int threads, char **data, size_t *len)
{
    *data = NULL;
    *len = 0;
    struct pb b = { 0 };
    static const struct flamme_view cpu = { 0 }; /* push sends CPU profiles */
    int fail = pprof_encode(&b, p, threads, &cpu);
    if (fail) {
        free(b.b);
        return fail;
    }
    FILE *mem = open_memstream(data, len);
    int rc = !mem || write_gzip(mem, b.b, b.len) != 0 ? -1 : 0;
    if (mem && fclose(mem) != 0)
        rc = -1;
    free(b.b);
    if (rc != 0) {
        free(*data);
        *data = NULL;
        *len = 0;
    }
    return rc;
}

int flamme_cmd_export(int argc, char **argv)
{
    const char *in = NULL, *outpath = NULL;
    enum fmt fmt = FMT_NONE;
    int threads = 0;
    struct flamme_view view = { 0 };
    /* Inputs are gathered in argv's own front (never past what was read). */
    const char **ins = (const char **)argv;
    size_t nin = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (flamme_view_option(&view, a))
            continue;
        if (strcmp(a, "--threads") == 0)
            threads = 1;
        else if ((strcmp(a, "-o") == 0 || strcmp(a, "--format") == 0 || strcmp(a, "-f") == 0) &&
                 i + 1 >= argc) {
            fprintf(stderr, EXPORT_ERR "%s needs a value\n", a);
            return 2;
        } else if (strcmp(a, "-o") == 0)
            outpath = argv[++i];
        else if (strcmp(a, "--format") == 0 || strcmp(a, "-f") == 0 ||
                 strncmp(a, "--format=", 9) == 0) {
            const char *v = a[1] == 'f' || a[8] != '=' ? argv[++i] : a + 9;
            if ((fmt = parse_format(v)) == FMT_NONE) {
                fprintf(stderr, EXPORT_ERR "unknown format '%s' (speedscope, pprof, folded or perf-script)\n", v);
                return 2;
            }
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, EXPORT_ERR "unknown option: %s\n", a);
            return 2;
        } else
            ins[nin++] = a;
    }
    in = nin ? ins[0] : NULL;
    if (!in)
        return usage(stderr);
    if (fmt == FMT_NONE) {
        fprintf(stderr, EXPORT_ERR "--format speedscope|pprof|folded|perf-script is required\n");
        return 2;
    }
    if (view.alloc && fmt == FMT_PERF_SCRIPT) {
        /* perf script's text has CPU clock events only */
        fprintf(stderr, EXPORT_ERR "--format perf-script has no allocation view (--alloc, --live, "
                                   "--blocks); use speedscope, pprof or folded\n");
        return 2;
    }

    struct flamme_profile p;
    char err[512];
    const char *trunc;
    int lr = flamme_profile_load_many(ins, nin, &p, &trunc, err, sizeof err);
    if (lr != 0) {
        fprintf(stderr, EXPORT_ERR "%s\n", err);
        return 2;
    }
    /* pprof takes the allocations as they are (several values per sample);
     * the others take the view's samples. */
    struct flamme_view check = view;
    check.blocks = check.blocks && fmt != FMT_PPROF;
    if (view.alloc) {
        if (flamme_view_apply(&p, &check, in, err, sizeof err) != 0) {
            fprintf(stderr, EXPORT_ERR "%s\n", err);
            flamme_profile_free(&p);
            return 2;
        }
        value_unit = flamme_view_unit(&view);
    }
    if (trunc)
        fprintf(stderr, EXPORT_ERR "%s: file is truncated or damaged; using what was readable\n", trunc);

    FILE *out = stdout;
    char tmp[PATH_MAX + 8];
    if (outpath && !(out = flamme_out_fopen(outpath, tmp, sizeof tmp))) {
        fprintf(stderr, EXPORT_ERR "cannot create %s: %s\n", outpath, strerror(errno));
        flamme_profile_free(&p);
        return 1;
    }
    int rc = 0, fail = 0;
    if (fmt == FMT_SPEEDSCOPE)
        fail = export_speedscope(out, &p, threads, base_name(in));
    else if (fmt == FMT_PERF_SCRIPT)
        fail = export_perf_script(out, &p);
    else if (fmt == FMT_FOLDED) {
        struct flamme_collapse_opts o = { .threads = threads };
        fail = flamme_collapse_profile(&p, &o, emit_line, out);
    } else {
        struct pb b = { 0 };
        fail = pprof_encode(&b, &p, threads, &view);
        if (!fail && write_gzip(out, b.b, b.len) != 0) {
            fprintf(stderr, EXPORT_ERR "compression or write error on %s\n",
                    outpath ? outpath : "stdout");
            rc = 1;
        }
        free(b.b);
    }
    if (fail == -2 && fmt == FMT_FOLDED)
        rc = flamme_collapse_error("export", in, fail);
    else if (fail == -2) {
        fprintf(stderr, EXPORT_ERR "%s: its samples would expand to more frames than a profile of "
                "its size can honestly hold (16M + 4096 per byte of file); not exported\n", in);
        rc = 2;
    } else if (fail) {
        fprintf(stderr, EXPORT_ERR "%s: out of memory\n", in);
        rc = 1;
    }
    if (fflush(out) != 0 || ferror(out)) {
        fprintf(stderr, EXPORT_ERR "write error on %s: %s\n", outpath ? outpath : "stdout",
                strerror(errno));
        rc = 1;
    }
    if (out != stdout && flamme_out_fclose(out, tmp, outpath, rc == 0) != 0 && rc == 0) {
        fprintf(stderr, EXPORT_ERR "cannot write %s: %s\n", outpath, strerror(errno));
        rc = 1;
    }
    flamme_profile_free(&p);
    return rc;
}
