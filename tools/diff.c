/*
 * tools/diff.c — `flamme diff BEFORE AFTER [-o OUT] [--normalize] [--folded]
 * [--threads] [--lines] [--fold-gc] [flamme svg options...]`
 *
 * A differential flame graph of two runs, as flamegraph.pl's difffolded.pl
 * and --negate do it: each input (a profile or folded text) is collapsed to
 * stacks, the two are joined on the stack text into "stack BEFORE AFTER"
 * lines, and `flamme svg` draws them (widths from AFTER, red where a stack
 * grew, blue where it shrank). --normalize scales BEFORE to AFTER's total
 * (runs of different lengths); --folded prints the joined lines instead.
 * Any thread; allocates.
 */
#include "common/hash.h"
#include "common/index_table.h"
#include "common/outfile.h"
#include "common/profile.h"
#include "tools/alloc_view.h"
#include "tools/cmds.h"
#include "tools/collapse.h"
#include "tools/folded.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct dstack {
    char *text;
    double count[2]; /* before, after */
};

struct dtab {
    struct dstack *v;
    size_t n, cap;
    struct flamme_itab ids; /* stack text -> index into v */
    int oom;
};

static uint64_t dstack_hash(const void *ctx, uint32_t i)
{
    const struct dtab *t = ctx;
    return flamme_table_hash(t->v[i].text, strlen(t->v[i].text));
}

static int dstack_eq(const void *ctx, uint32_t i, const void *text, size_t len)
{
    const struct dtab *t = ctx;
    return strlen(t->v[i].text) == len && memcmp(t->v[i].text, text, len) == 0;
}

/* Adds count to side `which` of the stack text[0..len). Sets t->oom on
 * allocation failure. */
static void dtab_add(struct dtab *t, const char *text, size_t len, int which, double count)
{
    if (t->oom)
        return;
    if (flamme_itab_reserve(&t->ids, t->n, 1024, dstack_hash, t) < 0) {
        t->oom = 1;
        return;
    }
    uint32_t *slot =
        flamme_itab_probe(&t->ids, flamme_table_hash(text, len), dstack_eq, t, text, len);
    if (*slot) {
        t->v[*slot - 1].count[which] += count;
        return;
    }
    if (t->n == t->cap) {
        size_t nc = t->cap ? t->cap * 2 : 1024;
        struct dstack *nv = realloc(t->v, nc * sizeof *nv);
        if (!nv) {
            t->oom = 1;
            return;
        }
        t->v = nv;
        t->cap = nc;
    }
    char *copy = malloc(len + 1);
    if (!copy) {
        t->oom = 1;
        return;
    }
    memcpy(copy, text, len);
    copy[len] = 0;
    t->v[t->n] = (struct dstack){copy, {0, 0}};
    t->v[t->n].count[which] = count;
    *slot = (uint32_t)++t->n;
}

struct side {
    struct dtab *t;
    int which;
};

static void emit_side(void *ctx, const char *stack, uint64_t count)
{
    struct side *s = ctx;
    dtab_add(s->t, stack, strlen(stack), s->which, (double)count);
}

/* flamme_folded_read_lines' callback: one folded line into a side. */
static int folded_side(void *ctx, const char *stack, size_t len, double count, int has_before,
                       double before)
{
    struct side *s = ctx;
    dtab_add(s->t, stack, len, s->which, count);
    return s->t->oom ? -1 : 0;
}

/* Reads one input into side `which`: a flamme profile (collapsed with o) or
 * folded text ("stack COUNT" lines; a differential line's last column
 * counts). Returns 0, or -1 with one line printed. */
/* Which weight profile inputs give (--alloc, --live, --blocks). */
static struct flamme_view view;

static int read_input(struct dtab *t, const char *path, int which,
                      const struct flamme_collapse_opts *o)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "flamme diff: %s: cannot open: %s\n", path, strerror(errno));
        return -1;
    }
    char magic[8];
    size_t got = fread(magic, 1, sizeof magic, f);
    if (flamme_is_profile(magic, got)) {
        fclose(f);
        struct flamme_profile p;
        char err[512];
        if (flamme_profile_load(path, &p, err, sizeof err) != 0) {
            fprintf(stderr, "flamme diff: %s\n", err);
            return -1;
        }
        if (flamme_view_apply(&p, &view, path, err, sizeof err) != 0) {
            fprintf(stderr, "flamme diff: %s\n", err);
            flamme_profile_free(&p);
            return -1;
        }
        struct side s = {t, which};
        int rc = flamme_collapse_profile(&p, o, emit_side, &s);
        flamme_profile_free(&p);
        if (rc != 0 || t->oom) {
            flamme_collapse_error("diff", path, t->oom ? -1 : rc);
            return -1;
        }
        return 0;
    }
    fclose(f);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        fprintf(stderr, "flamme diff: %s: cannot open: %s\n", path, strerror(errno));
        return -1;
    }
    /* The same rules as every folded reader (tools/folded.c): a
     * differential input line's last column counts. */
    struct side s = {t, which};
    int rc = flamme_folded_read_lines(fd, "diff", path, NULL, 0, folded_side, &s, NULL);
    close(fd);
    return rc;
}

/* Writes count as the folded parsers (tools/folded.c, read_input above)
 * read it: plain decimal digits, never an exponent. Whole counts print
 * exactly; a scaled (--normalize) count keeps 17 significant digits
 * (what a double holds), trailing zeros dropped. */
static void put_count(FILE *f, double v)
{
    char buf[400]; /* 309 integer digits, or "0." and 340 decimals */
    if (!(v > 0) || !isfinite(v)) /* the parsers give neither; keep the line readable */
        v = 0;
    if (v == floor(v))
        snprintf(buf, sizeof buf, "%.0f", v);
    else {
        /* 17 significant digits, as %.17g, but never an exponent */
        int dec = 16 - (int)floor(log10(v));
        snprintf(buf, sizeof buf, "%.*f", dec < 0 ? 0 : dec > 340 ? 340 : dec, v);
        size_t n = strlen(buf);
        while (strchr(buf, '.') && buf[n - 1] == '0')
            buf[--n] = 0;
        if (buf[n - 1] == '.')
            buf[--n] = 0;
    }
    fputs(buf, f);
}

static int by_text(const void *a, const void *b)
{
    return strcmp(((const struct dstack *)a)->text, ((const struct dstack *)b)->text);
}

static void diff_usage(FILE *f)
{
    fprintf(f, "usage: flamme diff BEFORE AFTER [-o OUT.svg] [--normalize] [--folded] [--threads]\n"
               "                  [--lines] [--fold-gc] [flamme svg options...]\n"
               "BEFORE and AFTER are profiles or folded stacks; renderer options come after\n"
               "them (or as --opt=value). The flame graph has AFTER's\n"
               "widths, red where a stack grew and blue where it shrank (--negate swaps).\n"
               "  --normalize   scale BEFORE's counts to AFTER's total (runs of different length)\n"
               "  --folded      print the \"stack BEFORE AFTER\" lines instead of drawing them\n"
               "  --alloc       compare sampled allocations (bytes; --blocks: blocks), --live\n"
               "                what was alive at the end, instead of CPU samples\n");
}

int flamme_cmd_diff(int argc, char **argv)
{
    const char *in[2] = {NULL, NULL};
    const char *out = NULL;
    int normalize = 0, folded = 0;
    struct flamme_collapse_opts o = {0};
    char **svg_args = calloc((size_t)argc + 8, sizeof *svg_args);
    int nsvg = 0;
    if (!svg_args)
        return 1;
    svg_args[nsvg++] = "svg";
    memset(&view, 0, sizeof view);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (flamme_view_option(&view, a))
            continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            diff_usage(stdout);
            free(svg_args);
            return 0;
        } else if (!strcmp(a, "--normalize") || !strcmp(a, "-n")) {
            normalize = 1;
        } else if (!strcmp(a, "--folded")) {
            folded = 1;
        } else if (!strcmp(a, "--threads")) {
            o.threads = 1;
        } else if (!strcmp(a, "--lines")) {
            o.lines = 1;
        } else if (!strcmp(a, "--fold-gc")) {
            o.fold_gc = 1;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "flamme diff: %s needs a file name\n", a);
                free(svg_args);
                return 2;
            }
            out = argv[++i];
        } else if (a[0] == '-' && a[1]) {
            /* Everything else is for the renderer; options taking a value
             * use the --opt=value or "--opt value" form, passed on as is. */
            svg_args[nsvg++] = argv[i];
        } else if (!in[0]) {
            in[0] = a;
        } else if (!in[1]) {
            in[1] = a;
        } else if (nsvg > 1) {
            svg_args[nsvg++] = argv[i]; /* the value of a renderer option */
        } else {
            fprintf(stderr, "flamme diff: unexpected argument '%s'\n", a);
            free(svg_args);
            return 2;
        }
    }
    if (!in[1]) {
        fprintf(stderr, "flamme diff: needs two inputs, BEFORE and AFTER\n");
        diff_usage(stderr);
        free(svg_args);
        return 2;
    }
    struct dtab t = {0};
    int rc = 0;
    if (read_input(&t, in[0], 0, &o) != 0 || read_input(&t, in[1], 1, &o) != 0) {
        rc = 2;
        goto done;
    }
    double tot[2] = {0, 0};
    for (size_t i = 0; i < t.n; i++)
        tot[0] += t.v[i].count[0], tot[1] += t.v[i].count[1];
    if (tot[1] <= 0) {
        fprintf(stderr, "flamme diff: %s: no samples\n", in[1]);
        rc = 2;
        goto done;
    }
    double scale = normalize && tot[0] > 0 ? tot[1] / tot[0] : 1.0;
    qsort(t.v, t.n, sizeof *t.v, by_text);

    char tmp[] = "/tmp/flamme-diff-XXXXXX";
    FILE *dst;
    int tmpfd = -1;
    char otmp[PATH_MAX + 8];
    if (folded) {
        dst = out ? flamme_out_fopen(out, otmp, sizeof otmp) : stdout;
    } else {
        tmpfd = mkstemp(tmp);
        dst = tmpfd >= 0 ? fdopen(tmpfd, "w") : NULL;
    }
    if (!dst) {
        fprintf(stderr, "flamme diff: cannot write %s: %s\n", folded && out ? out : tmp,
                strerror(errno));
        rc = 1;
        goto done;
    }
    for (size_t i = 0; i < t.n; i++) {
        fprintf(dst, "%s ", t.v[i].text);
        put_count(dst, t.v[i].count[0] * scale);
        fputc(' ', dst);
        put_count(dst, t.v[i].count[1]);
        fputc('\n', dst);
    }
    int werr = folded && out ? flamme_out_fclose(dst, otmp, out, 1)
                             : ferror(dst) | (dst != stdout ? fclose(dst) : fflush(dst));
    if (werr) {
        fprintf(stderr, "flamme diff: write error\n");
        rc = 1;
        if (!folded)
            unlink(tmp);
        goto done;
    }
    if (!folded) {
        char title[256];
        int titled = 0;
        for (int i = 1; i < nsvg; i++)
            titled |= !strncmp(svg_args[i], "--title", 7);
        snprintf(title, sizeof title, "--title=Differential: %s -> %s%s", in[0], in[1],
                 normalize ? " (normalized)" : "");
        if (!titled)
            svg_args[nsvg++] = title;
        char countname[64];
        int counted = 0;
        for (int i = 1; i < nsvg; i++)
            counted |= !strncmp(svg_args[i], "--countname", 11);
        snprintf(countname, sizeof countname, "--countname=%s", flamme_view_unit(&view));
        if (view.alloc && !counted)
            svg_args[nsvg++] = countname;
        if (out) {
            svg_args[nsvg++] = "-o";
            svg_args[nsvg++] = (char *)out;
        }
        svg_args[nsvg++] = tmp;
        rc = flamme_cmd_svg(nsvg, svg_args);
        unlink(tmp);
    }
done:
    for (size_t i = 0; i < t.n; i++)
        free(t.v[i].text);
    free(t.v);
    flamme_itab_free(&t.ids);
    free(svg_args);
    return rc;
}
