/*
 * tools/collapse.c — a loaded profile as folded stacks (tools/collapse.h),
 * and the `flamme collapse` verb.
 *
 * Owns: how a profile's frames and threads are named in every text the tools
 * print: demangled function names (tools/demangle.c), "[module]" for frames
 * without a symbol, the "[truncated]" / "[broken]" markers and the thread
 * root labels. Called by the collapse, svg and report verbs; single thread.
 *
 * Folded-safe names: flamegraph.pl splits frames on ';' and records on lines,
 * so ';' in a name becomes ':' (as stackcollapse-perf.pl does) and every
 * control character (newline, tab, ...) becomes a space.
 *
 * Markers: a TRUNCATED stack lost its root end, a BROKEN one stopped at an
 * invalid frame pointer; either way its root-most known frame is not a real
 * root, so the marker becomes the root-most frame (below the thread label)
 * and such stacks group together instead of posing as roots. A stack
 * flagged both is shown as truncated.
 */
#include "tools/collapse.h"
#include "tools/alloc_view.h"
#include "common/hash.h"
#include "common/index_table.h"
#include "common/outfile.h"
#include "tools/cmds.h"
#include "tools/demangle.h"
#include "tools/folded.h"
#include "tools/gc_frames.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *flamme_command_name(const char *cmdline, size_t *len)
{
    size_t n = strcspn(cmdline, " ");
    const char *base = cmdline;
    for (size_t k = 0; k < n; k++)
        if (cmdline[k] == '/')
            base = cmdline + k + 1;
    *len = n - (size_t)(base - cmdline);
    return base;
}

const char *flamme_thread_label(const struct flamme_thread *t, char *buf, size_t len)
{
    if (!t) {
        snprintf(buf, len, "thread ?");
        return buf;
    }
    if (t->command && len > 1) {
        /* Several processes (a build): "ocamlopt.opt: main", argv[0]'s
         * basename first, as perf's folded stacks begin with the comm. */
        size_t n;
        const char *base = flamme_command_name(t->command, &n);
        if (n > 40)
            n = 40;
        int w = snprintf(buf, len, "%.*s: ", (int)n, base);
        if (w < 0 || (size_t)w >= len - 1)
            return buf;
        struct flamme_thread plain = *t;
        plain.command = NULL;
        flamme_thread_label(&plain, buf + w, len - (size_t)w);
        return buf;
    }
    switch (t->kind) {
    case FLAMME_THREAD_MAIN:
        snprintf(buf, len, "main");
        break;
    case FLAMME_THREAD_DOMAIN:
        snprintf(buf, len, "domain %d", (int)t->domain);
        break;
    case FLAMME_THREAD_SYSTHREAD:
        snprintf(buf, len, "thread %u (domain %d)", (unsigned)t->tid, (int)t->domain);
        break;
    case FLAMME_THREAD_BACKUP:
        snprintf(buf, len, "backup (domain %d)", (int)t->domain);
        break;
    case FLAMME_THREAD_TICK:
        snprintf(buf, len, "tick");
        break;
    default: /* FLAMME_THREAD_C, FLAMME_THREAD_UNKNOWN, future kinds */
        snprintf(buf, len, "thread %u", (unsigned)t->tid);
        break;
    }
    return buf;
}

void flamme_put_term_safe(FILE *out, const char *str)
{
    const unsigned char *s = (const unsigned char *)str;
    while (*s) {
        unsigned c = s[0];
        size_t n = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3
                 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
        for (size_t k = 1; k < n; k++)
            if ((s[k] & 0xc0) != 0x80)
                n = 0;
        if (n == 3 && ((c == 0xe0 && s[1] < 0xa0) || (c == 0xed && s[1] >= 0xa0)))
            n = 0; /* overlong, surrogate */
        if (n == 4 && ((c == 0xf0 && s[1] < 0x90) || (c == 0xf4 && s[1] >= 0x90)))
            n = 0;
        if (n == 1 && (c < 0x20 || c == 0x7f))
            n = 0;
        if (n == 2 && c == 0xc2 && s[1] <= 0x9f) { /* C1 control */
            fprintf(out, "\\x%02x\\x%02x", c, s[1]);
            s += 2;
        } else if (n) {
            fwrite(s, 1, n, out);
            s += n;
        } else {
            fprintf(out, "\\x%02x", c);
            s++;
        }
    }
}

/* ------------------------------------------------------------ text buffer */

struct sbuf {
    char *s;
    size_t len, cap;
    int oom;           /* allocation failed, or (over set) the budget ran out */
    uint64_t *left;    /* bytes of text the whole collapse may still write; NULL: no limit */
    int over;
};

static void sb_add(struct sbuf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->left) {
        if (n + 1 > *b->left) {
            b->oom = b->over = 1;
            return;
        }
        *b->left -= n + 1;
    }
    if (b->len + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc < b->len + n + 1)
            nc *= 2;
        char *ns = realloc(b->s, nc);
        if (!ns) {
            b->oom = 1;
            return;
        }
        b->s = ns;
        b->cap = nc;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = '\0';
}

static void sb_frame(struct sbuf *b, const char *name)
{
    if (b->len)
        sb_add(b, ";", 1);
    sb_add(b, name, strlen(name));
}

/* ------------------------------------------------------------ frame names */

static void make_folded_safe(char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == ';')
            *s = ':';
        else if (c < 0x20 || c == 0x7f)
            *s = ' ';
        else if (c == 0xc2 && (unsigned char)s[1] >= 0x80 && (unsigned char)s[1] <= 0x9f)
            s[0] = s[1] = ' ', s++; /* a C1 control (U+0080..U+009F): a terminal may obey it */
    }
}

/* A frame name ending in "WS NUMBER" would, as a leaf, read as a count
 * column (a differential line) to every folded parser: its last blanks
 * become '_'. Thread labels ("domain 3") never end a line (see stack_text). */
static void no_count_suffix(char *s)
{
    size_t len = strlen(s);
    double v;
    if (flamme_folded_take_count(s, &len, &v))
        while (s[len] == ' ')
            s[len++] = '_';
}

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash && slash[1] ? slash + 1 : path;
}

/* Display name of one frame, malloc'd; NULL on allocation failure. */
static char *frame_name(const struct flamme_frame *f, const struct flamme_collapse_opts *o)
{
    char buf[4096];
    if (f->function[0]) {
        if (o->raw_names)
            snprintf(buf, sizeof buf, "%s", f->function);
        else
            flamme_demangle(f->function, buf, sizeof buf);
    } else if (f->module[0]) {
        if (o->addresses)
            snprintf(buf, sizeof buf, "%s+0x%llx", base_name(f->module),
                     (unsigned long long)f->offset);
        else
            snprintf(buf, sizeof buf, "[%s]", base_name(f->module));
    } else {
        if (o->addresses)
            snprintf(buf, sizeof buf, "0x%llx", (unsigned long long)f->addr);
        else
            snprintf(buf, sizeof buf, "[unknown]");
    }
    if (o->lines && f->line) {
        size_t n = strlen(buf);
        snprintf(buf + n, sizeof buf - n, " (%s:%u)", f->file, f->line);
    }
    make_folded_safe(buf);
    no_count_suffix(buf);
    return strdup(buf);
}

/* ------------------------------------------------------------ aggregation */

/* Level 1: (stack id, thread index or 0, marker) -> weight, so each distinct
 * combination is turned into text once however many samples share it. */
struct key_ent {
    uint64_t key; /* stack_id << 32 | thread index ; marker kept separately */
    uint32_t marker;
    uint64_t weight;
};

/* Level 2: folded text -> weight (different stacks can print alike: two
 * return addresses in one function). */
struct text_ent {
    char *text;
    uint64_t hash, weight;
};

/* Entries in order of first sight, found through an index table
 * (common/index_table.h). */
struct key_tab {
    struct key_ent *e;
    size_t n, cap;
    struct flamme_itab idx;
};

struct text_tab {
    struct text_ent *e;
    size_t n, cap;
    struct flamme_itab idx;
};

/* Room for one more entry of size sz in *e (cap of them). 0 / -1. */
static int room(void **e, size_t *cap, size_t n, size_t sz)
{
    if (n < *cap)
        return 0;
    size_t nc = *cap ? *cap * 2 : 1024;
    void *a = realloc(*e, nc * sz);
    if (!a)
        return -1;
    *e = a;
    *cap = nc;
    return 0;
}

static uint64_t key_hash(uint64_t key, uint32_t marker)
{
    return flamme_table_hash_u64(key ^ (uint64_t)marker << 29);
}

static uint64_t key_hash_i(const void *ctx, uint32_t i)
{
    const struct key_ent *k = &((const struct key_tab *)ctx)->e[i];
    return key_hash(k->key, k->marker);
}

static int key_eq(const void *ctx, uint32_t i, const void *key, size_t len)
{
    (void)len;
    const struct key_ent *k = &((const struct key_tab *)ctx)->e[i], *q = key;
    return k->key == q->key && k->marker == q->marker;
}

/* The entry for (key, marker), made with weight 0 if new; NULL on
 * allocation failure. */
static struct key_ent *key_slot(struct key_tab *t, uint64_t key, uint32_t marker)
{
    struct key_ent q = { key, marker, 0 };
    if (flamme_itab_reserve(&t->idx, t->n, 1024, key_hash_i, t) < 0)
        return NULL;
    uint32_t *slot = flamme_itab_probe(&t->idx, key_hash(key, marker), key_eq, t, &q, sizeof q);
    if (*slot)
        return &t->e[*slot - 1];
    if (room((void **)&t->e, &t->cap, t->n, sizeof *t->e) < 0)
        return NULL;
    t->e[t->n] = q;
    *slot = (uint32_t)++t->n;
    return &t->e[t->n - 1];
}

static uint64_t text_hash_i(const void *ctx, uint32_t i)
{
    return ((const struct text_tab *)ctx)->e[i].hash;
}

static int text_eq(const void *ctx, uint32_t i, const void *key, size_t len)
{
    (void)len;
    const struct text_ent *e = &((const struct text_tab *)ctx)->e[i], *q = key;
    return e->hash == q->hash && strcmp(e->text, q->text) == 0;
}

/* Adds weight to text (takes ownership of text). Returns 0 or -1. */
static int text_add(struct text_tab *t, char *text, uint64_t weight)
{
    struct text_ent q = { text, flamme_table_hash(text, strlen(text)), weight };
    if (flamme_itab_reserve(&t->idx, t->n, 1024, text_hash_i, t) < 0) {
        free(text);
        return -1;
    }
    uint32_t *slot = flamme_itab_probe(&t->idx, q.hash, text_eq, t, &q, sizeof q);
    if (*slot) {
        t->e[*slot - 1].weight += weight;
        free(text);
        return 0;
    }
    if (room((void **)&t->e, &t->cap, t->n, sizeof *t->e) < 0) {
        free(text);
        return -1;
    }
    t->e[t->n] = q;
    *slot = (uint32_t)++t->n;
    return 0;
}

static int text_cmp(const void *a, const void *b)
{
    const struct text_ent *x = a, *y = b;
    return strcmp(x->text, y->text);
}

#define MARK_TRUNCATED 1u
#define MARK_BROKEN 2u
#define MARK_BLOCKED 4u /* wall mode: taken while the thread sat in a system call */
#define MARK_KERNEL 8u  /* cpu mode: time the kernel spent for the stack (syscall, page fault) */

/* Text of one level-1 entry, charged to *left; NULL on allocation failure
 * or (*over set) when the budget runs out. */
static char *stack_text(const struct flamme_profile *p, const struct flamme_collapse_opts *o,
                        char **names, const struct key_ent *k, uint64_t *left, int *over)
{
    struct sbuf b = { .left = left };
    uint32_t stack_id = (uint32_t)(k->key >> 32), thread = (uint32_t)k->key;
    if (o->threads) {
        char lbl[96];
        /* each thread its own kind and domain, even where a tid was reused */
        flamme_thread_label(thread < p->nthreads ? &p->threads[thread] : NULL, lbl, sizeof lbl);
        make_folded_safe(lbl);
        sb_frame(&b, lbl);
    }
    size_t label_len = b.len; /* "domain 3" alone would read as "domain" with a count */
    if (k->marker & MARK_TRUNCATED)
        sb_frame(&b, "[truncated]");
    else if (k->marker & MARK_BROKEN)
        sb_frame(&b, "[broken]");
    const struct flamme_stack *st = &p->stacks[stack_id];
    /* --fold-gc: frames from the root-most GC frame to the leaf become one. */
    uint32_t gc_root = 0;
    enum flamme_gc_class gc = o->fold_gc ? flamme_gc_classify(p, st, &gc_root) : FLAMME_GCC_NONE;
    uint32_t first = gc != FLAMME_GCC_NONE ? gc_root + 1 : 0;
    for (uint32_t i = st->n; i-- > first;) {
        uint32_t fid = st->frames[i];
        if (fid >= p->nframes) {
            sb_frame(&b, "[bad frame]");
            continue;
        }
        if (!names[fid] && !(names[fid] = frame_name(&p->frames[fid], o))) {
            free(b.s);
            return NULL;
        }
        sb_frame(&b, names[fid]);
    }
    if (gc != FLAMME_GCC_NONE)
        sb_frame(&b, flamme_gc_class_label(gc));
    if (k->marker & MARK_BLOCKED)
        sb_frame(&b, "[blocked]");
    else if (k->marker & MARK_KERNEL)
        sb_frame(&b, "[kernel]");
    if (b.len == label_len)
        sb_frame(&b, "[no frames]");
    if (b.oom) {
        *over = b.over;
        free(b.s);
        return NULL;
    }
    return b.s;
}

int flamme_collapse_profile(const struct flamme_profile *p, const struct flamme_collapse_opts *o,
                            void (*emit)(void *ctx, const char *stack, uint64_t count), void *ctx)
{
    int rc = -1;
    struct key_tab keys = { 0 };
    struct text_tab texts = { 0 };
    char **names = calloc(p->nframes ? p->nframes : 1, sizeof *names);
    if (!names)
        return -1;

    for (size_t i = 0; i < p->nsamples; i++) {
        const struct flamme_sample *s = &p->samples[i];
        if (s->stack_id >= p->nstacks)
            continue; /* the loader rejects these; never index out of bounds */
        uint32_t marker = (s->flags & FLAMME_SAMPLE_TRUNCATED) ? MARK_TRUNCATED
                          : (s->flags & FLAMME_SAMPLE_BROKEN)  ? MARK_BROKEN
                                                               : 0;
        if (s->flags & FLAMME_SAMPLE_SYSCALL)
            marker |= MARK_BLOCKED;
        else if (s->flags & FLAMME_SAMPLE_KERNEL)
            marker |= MARK_KERNEL;
        uint64_t key = (uint64_t)s->stack_id << 32 | (o->threads ? s->thread : 0);
        struct key_ent *k = key_slot(&keys, key, marker);
        if (!k)
            goto out;
        k->weight += s->weight;
    }
    /* Every distinct stack becomes text once: a few hundred bytes of text
     * per byte of file covers real profiles (deep recursion gives ~50); a
     * crafted one (long names used by long stacks) stops here. */
    uint64_t left = flamme_profile_budget(p, 32u << 20, 512);
    int over = 0;
    for (size_t i = 0; i < keys.n; i++) {
        if (keys.e[i].weight == 0)
            continue;
        char *text = stack_text(p, o, names, &keys.e[i], &left, &over);
        if (!text || text_add(&texts, text, keys.e[i].weight) != 0) {
            if (over)
                rc = -2;
            goto out;
        }
    }

    /* Sort by text, emit. */
    if (texts.n)
        qsort(texts.e, texts.n, sizeof *texts.e, text_cmp);
    for (size_t i = 0; i < texts.n; i++)
        emit(ctx, texts.e[i].text, texts.e[i].weight);
    rc = 0;
out:
    for (size_t i = 0; i < texts.n; i++)
        free(texts.e[i].text);
    free(texts.e);
    flamme_itab_free(&texts.idx);
    free(keys.e);
    flamme_itab_free(&keys.idx);
    for (size_t i = 0; i < p->nframes; i++)
        free(names[i]);
    free(names);
    return rc;
}

int flamme_collapse_error(const char *verb, const char *path, int r)
{
    if (r == -2) {
        fprintf(stderr, "flamme %s: %s: %s\n", verb, path, FLAMME_COLLAPSE_TOO_BIG);
        return 2;
    }
    fprintf(stderr, "flamme %s: %s: out of memory\n", verb, path);
    return 1;
}

/* ------------------------------------------------------------ the verb */

static void emit_line(void *ctx, const char *stack, uint64_t count)
{
    fprintf((FILE *)ctx, "%s %llu\n", stack, (unsigned long long)count);
}

static int usage(void)
{
    fprintf(stderr, "usage: flamme collapse FILE... [--threads] [--raw] [--addresses] [--fold-gc] [--lines]\n"
                    "                       [--alloc | --live] [--blocks] [-o OUT]\n"
                    "  --alloc   sampled allocations, in bytes (--blocks: in blocks) instead of CPU samples\n"
                    "  --live    the sampled blocks still alive at the end of the run\n");
    return 2;
}

int flamme_cmd_collapse(int argc, char **argv)
{
    struct flamme_collapse_opts o = { 0 };
    struct flamme_view view = { 0 };
    const char *in = NULL, *outpath = NULL;
    /* Inputs are gathered in argv's own front (never past what was read). */
    const char **ins = (const char **)argv;
    size_t nin = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (flamme_view_option(&view, a))
            continue;
        if (strcmp(a, "--threads") == 0)
            o.threads = 1;
        else if (strcmp(a, "--raw") == 0)
            o.raw_names = 1;
        else if (strcmp(a, "--addresses") == 0)
            o.addresses = 1;
        else if (strcmp(a, "--fold-gc") == 0)
            o.fold_gc = 1;
        else if (strcmp(a, "--lines") == 0)
            o.lines = 1;
        else if (strcmp(a, "-o") == 0 && i + 1 < argc)
            outpath = argv[++i];
        else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage();
            return 0;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "flamme collapse: unknown option: %s\n", a);
            return 2;
        } else
            ins[nin++] = a;
    }
    if (!nin) {
        return usage();
    }
    in = ins[0];

    struct flamme_profile p;
    char err[512];
    const char *trunc;
    int lr = flamme_profile_load_many(ins, nin, &p, &trunc, err, sizeof err);
    if (lr != 0) {
        fprintf(stderr, "flamme collapse: %s\n", err);
        return 2;
    }
    if (flamme_view_apply(&p, &view, in, err, sizeof err) != 0) {
        fprintf(stderr, "flamme collapse: %s\n", err);
        flamme_profile_free(&p);
        return 2;
    }
    if (trunc)
        fprintf(stderr, "flamme collapse: %s: file is truncated or damaged; using what was readable\n",
                trunc);

    FILE *out = stdout;
    char tmp[PATH_MAX + 8];
    if (outpath && !(out = flamme_out_fopen(outpath, tmp, sizeof tmp))) {
        fprintf(stderr, "flamme collapse: cannot create %s: %s\n", outpath, strerror(errno));
        flamme_profile_free(&p);
        return 1;
    }
    int rc = 0;
    int r = flamme_collapse_profile(&p, &o, emit_line, out);
    if (r != 0) {
        rc = flamme_collapse_error("collapse", in, r);
    }
    if (fflush(out) != 0 || ferror(out)) {
        fprintf(stderr, "flamme collapse: write error on %s: %s\n", outpath ? outpath : "stdout",
                strerror(errno));
        rc = 1;
    }
    if (out != stdout && flamme_out_fclose(out, tmp, outpath, rc == 0) != 0 && rc == 0) {
        fprintf(stderr, "flamme collapse: cannot write %s: %s\n", outpath, strerror(errno));
        rc = 1;
    }
    flamme_profile_free(&p);
    return rc;
}
