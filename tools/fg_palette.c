/*
 * tools/fg_palette.c — the colours of a flame graph.
 *
 * Owns: the palettes (flamegraph.pl's, with the name rules of java, js, perl,
 * wakeup and chain, plus "ocaml": OCaml code / stdlib / runtime / GC / C /
 * kernel), the colour of each frame (per-name cache, --hash, --random, the
 * differential red/blue scale), the background gradient (--bgcolors), and
 * the consistent palette file (--cp), read before and written after a render.
 * Called by: flamme_fg_render (tools/flamegraph.c) and fg_svg.c while they
 * draw, tools/svg.c to check options; single thread.
 */
#include "common/hash.h"
#include "common/outfile.h"
#include "tools/fg_internal.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *const palettes[] = {"hot", "mem", "io", "wakeup", "chain", "java", "js", "perl",
                                       "red", "green", "blue", "aqua", "yellow", "purple", "orange",
                                       "ocaml", NULL};

int flamme_fg_palette_ok(const char *name)
{
    for (int i = 0; palettes[i]; i++)
        if (strcmp(palettes[i], name) == 0)
            return 1;
    return 0;
}

/* ---------------------------------------------------------------- colours */

static uint64_t mix(const char *s, size_t len, uint64_t seed)
{
    uint64_t h = flamme_hash_bytes(s, len, seed);
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}

/* A value in [0,1] that depends mostly on the first characters, so that
 * related names (same module prefix) get related colours. */
static double prefix_hash(const char *s, size_t len, int backwards)
{
    double v = 0, w = 1, max = 1;
    for (size_t i = 0; i < len && i < 6; i++) {
        unsigned char c = (unsigned char)(backwards ? s[len - 1 - i] : s[i]);
        v += (double)(c % 13) / 12.0 * w;
        max += w;
        w *= 0.7;
    }
    return 1 - v / max;
}

enum okind { OK_OCAML, OK_STDLIB, OK_RUNTIME, OK_GC, OK_C, OK_KERNEL, OK_UNKNOWN };

static int has_word(const char *s, size_t len, const char *w)
{
    size_t wl = strlen(w);
    for (size_t i = 0; i + wl <= len; i++)
        if (memcmp(s + i, w, wl) == 0)
            return 1;
    return 0;
}

/* Classifies a (mangled or demangled) symbol for the ocaml palette. */
static enum okind ocaml_kind(const char *s, size_t len)
{
    static const char *const gcwords[] = {"gc", "major", "minor", "mark", "sweep", "alloc",
        "darken", "oldify", "ephe", "compact", "final", "memprof", "heap", "collect",
        "promote", "scan_roots", "orphan", "pool", NULL};
    if (len >= 4 && memcmp(s + len - 4, "_[k]", 4) == 0)
        return OK_KERNEL;
    if (len == 0 || s[0] == '[')
        return OK_UNKNOWN;
    if (len > 5 && memcmp(s, "caml_", 5) == 0) {
        for (int i = 0; gcwords[i]; i++)
            if (has_word(s + 5, len - 5, gcwords[i]))
                return OK_GC;
        return OK_RUNTIME;
    }
    if (len > 4 && memcmp(s, "caml", 4) == 0 && s[4] >= 'A' && s[4] <= 'Z')
        return has_word(s, len < 16 ? len : 16, "camlStdlib") ||
               has_word(s, len < 16 ? len : 16, "camlCamlinternal") ? OK_STDLIB : OK_OCAML;
    if (s[0] >= 'A' && s[0] <= 'Z' && (memchr(s, '.', len) || has_word(s, len, " (init)")))
        return (len >= 7 && memcmp(s, "Stdlib.", 7) == 0) ||
               (len >= 12 && memcmp(s, "Camlinternal", 12) == 0) ? OK_STDLIB : OK_OCAML;
    if (len == 11 && memcmp(s, "caml_program", 11) == 0)
        return OK_RUNTIME;
    return OK_C;
}

static int clampc(double v)
{
    return v < 0 ? 0 : v > 255 ? 255 : (int)v;
}

static int ends_with(const char *s, size_t len, const char *suf)
{
    size_t n = strlen(suf);
    return len >= n && memcmp(s + len - n, suf, n) == 0;
}

static int starts_with(const char *s, size_t len, const char *pre)
{
    size_t n = strlen(pre);
    return len >= n && memcmp(s, pre, n) == 0;
}

/* flamegraph.pl's name rules of the multi palettes (java, js, perl, wakeup,
 * chain): returns the flat palette that colours this frame. waker: the frame
 * is past a "--" separator (chain graphs). */
static const char *sub_palette(const char *pal, const char *s, size_t len, int waker)
{
    if (!strcmp(pal, "java")) {
        static const char *const pkgs[] = {"java/", "javax/", "jdk/", "net/", "org/", "com/",
                                           "io/", "sun/", NULL};
        if (ends_with(s, len, "_[j]"))
            return "green";
        if (ends_with(s, len, "_[i]"))
            return "aqua";
        const char *t = s;
        size_t tl = len;
        if (tl > 0 && t[0] == 'L') {
            t++;
            tl--;
        }
        for (int i = 0; pkgs[i]; i++)
            if (starts_with(t, tl, pkgs[i]) || (t != s && starts_with(s, len, pkgs[i])))
                return "green";
        if (has_word(s, len, ":::"))
            return "green";
        if (has_word(s, len, "::"))
            return "yellow";
        return ends_with(s, len, "_[k]") ? "orange" : "red";
    }
    if (!strcmp(pal, "perl")) {
        if (has_word(s, len, "::"))
            return "yellow";
        if (has_word(s, len, "Perl") || has_word(s, len, ".pl"))
            return "green";
        return ends_with(s, len, "_[k]") ? "orange" : "red";
    }
    if (!strcmp(pal, "js")) {
        if (ends_with(s, len, "_[j]"))
            return memchr(s, '/', len) ? "green" : "aqua";
        if (has_word(s, len, "::"))
            return "yellow";
        const char *sl = memchr(s, '/', len); /* "/.*\.js": a path to a .js file */
        if (sl && has_word(sl, len - (size_t)(sl - s), ".js"))
            return "green";
        if (memchr(s, ':', len))
            return "aqua";
        if (len == 1 && s[0] == ' ')
            return "green";
        return has_word(s, len, "_[k]") ? "orange" : "red";
    }
    if (!strcmp(pal, "wakeup"))
        return "aqua";
    if (!strcmp(pal, "chain"))
        return waker || has_word(s, len, "_[w]") ? "aqua" : "blue";
    return pal;
}

/* Colour of a frame named s in palette pal, from three values in [0,1]
 * (a name hash, or random numbers for --random). */
static struct fg_rgb palette_color(const char *pal, const double v[3], const char *s, size_t len, int waker)
{
    double v1 = v[0], v2 = v[1], v3 = v[2];
    struct fg_rgb c;
    if (len == 1 && s[0] == '-')
        return (struct fg_rgb){200, 200, 200};
    if (len == 2 && s[0] == '-' && s[1] == '-')
        return (struct fg_rgb){160, 160, 160};
    pal = sub_palette(pal, s, len, waker);
    if (!strcmp(pal, "mem"))
        c = (struct fg_rgb){0, 190 + (int)(50 * v2), 0 + (int)(210 * v1)};
    else if (!strcmp(pal, "io"))
        c = (struct fg_rgb){80 + (int)(60 * v1), 80 + (int)(60 * v1), 190 + (int)(55 * v2)};
    else if (!strcmp(pal, "red"))
        c = (struct fg_rgb){200 + (int)(55 * v1), 50 + (int)(80 * v1), 50 + (int)(80 * v1)};
    else if (!strcmp(pal, "green"))
        c = (struct fg_rgb){50 + (int)(60 * v1), 200 + (int)(55 * v1), 50 + (int)(60 * v1)};
    else if (!strcmp(pal, "blue"))
        c = (struct fg_rgb){80 + (int)(60 * v1), 80 + (int)(60 * v1), 205 + (int)(50 * v1)};
    else if (!strcmp(pal, "yellow"))
        c = (struct fg_rgb){175 + (int)(55 * v1), 175 + (int)(55 * v1), 50 + (int)(20 * v1)};
    else if (!strcmp(pal, "purple"))
        c = (struct fg_rgb){190 + (int)(65 * v1), 80 + (int)(60 * v1), 190 + (int)(65 * v1)};
    else if (!strcmp(pal, "aqua"))
        c = (struct fg_rgb){50 + (int)(60 * v1), 165 + (int)(55 * v1), 165 + (int)(55 * v1)};
    else if (!strcmp(pal, "orange"))
        c = (struct fg_rgb){190 + (int)(65 * v1), 90 + (int)(65 * v1), 0};
    else if (!strcmp(pal, "ocaml")) {
        switch (ocaml_kind(s, len)) {
        case OK_OCAML:   c = (struct fg_rgb){225 + (int)(30 * v1), 110 + (int)(70 * v2), 30 + (int)(40 * v3)}; break;
        case OK_STDLIB:  c = (struct fg_rgb){215 + (int)(40 * v1), 195 + (int)(40 * v2), 60 + (int)(50 * v3)}; break;
        case OK_RUNTIME: c = (struct fg_rgb){60 + (int)(50 * v1), 170 + (int)(50 * v2), 200 + (int)(50 * v3)}; break;
        case OK_GC:      c = (struct fg_rgb){70 + (int)(60 * v1), 190 + (int)(60 * v2), 70 + (int)(50 * v3)}; break;
        case OK_KERNEL:  c = (struct fg_rgb){175 + (int)(50 * v1), 120 + (int)(50 * v2), 220 + (int)(30 * v3)}; break;
        case OK_UNKNOWN: c = (struct fg_rgb){180 + (int)(20 * v1), 180 + (int)(20 * v1), 180 + (int)(20 * v1)}; break;
        default:         c = (struct fg_rgb){200 + (int)(55 * v1), 90 + (int)(50 * v2), 100 + (int)(50 * v3)}; break;
        }
    } else /* hot */
        c = (struct fg_rgb){205 + (int)(50 * v3), 0 + (int)(230 * v1), 0 + (int)(55 * v2)};
    return (struct fg_rgb){clampc(c.r), clampc(c.g), clampc(c.b)};
}

/* The three colour values of a name: flamegraph.pl's --hash, or a plain
 * hash so that a name keeps its colour across graphs (the default). */
static void name_values(int hash, const char *s, size_t len, double v[3])
{
    if (hash) {
        v[0] = prefix_hash(s, len, 0);
        v[1] = v[2] = prefix_hash(s, len, 1);
    } else {
        uint64_t h = mix(s, len, 0);
        v[0] = (double)(h & 0xffff) / 65535.0;
        v[1] = (double)((h >> 16) & 0xffff) / 65535.0;
        v[2] = (double)((h >> 32) & 0xffff) / 65535.0;
    }
}

/* --random: xorshift64*, seeded once per render from the clock and pid. */
static double rand01(uint64_t *st)
{
    uint64_t x = *st;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *st = x;
    return (double)((x * 0x2545f4914f6cdd1dull) >> 11) / 9007199254740992.0;
}

int flamme_fg_bgcolors_ok(const char *s)
{
    if (!strcmp(s, "yellow") || !strcmp(s, "blue") || !strcmp(s, "green") || !strcmp(s, "grey"))
        return 1;
    if (strlen(s) != 7 || s[0] != '#')
        return 0;
    for (int i = 1; i < 7; i++)
        if (!strchr("0123456789abcdefABCDEF", s[i]))
            return 0;
    return 1;
}

/* Background gradient (from, *to). --bgcolors wins; otherwise it follows the
 * palette as in flamegraph.pl: green for mem, blue for io/wakeup/chain, grey
 * for the flat palettes (and ocaml), yellow for the rest. */
const char *flamme_fg_bg_colors(const char *pal, const char *bg, const char **to)
{
    if (!bg) {
        if (!strcmp(pal, "mem"))
            bg = "green";
        else if (!strcmp(pal, "io") || !strcmp(pal, "wakeup") || !strcmp(pal, "chain"))
            bg = "blue";
        else if (!strcmp(pal, "hot") || !strcmp(pal, "java") || !strcmp(pal, "js") || !strcmp(pal, "perl"))
            bg = "yellow";
        else
            bg = "grey";
    }
    if (bg[0] == '#') {
        *to = bg;
        return bg;
    }
    if (!strcmp(bg, "blue")) {
        *to = "#e0e0ff";
        return "#eeeeee";
    }
    if (!strcmp(bg, "green")) {
        *to = "#e0ffe0";
        return "#eef2ee";
    }
    if (!strcmp(bg, "grey")) {
        *to = "#e8e8e8";
        return "#f8f8f8";
    }
    *to = "#eeeeb0";
    return "#eeeeee";
}

static void cp_load(struct fg_cpmap *m, const struct flamme_folded *f, const char *path)
{
    FILE *in = fopen(path, "r");
    if (!in)
        return;
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, in)) > 0) {
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            line[--n] = 0;
        char *arrow = strstr(line, "->rgb(");
        int r, g, b;
        if (!arrow || sscanf(arrow, "->rgb(%d,%d,%d)", &r, &g, &b) != 3)
            continue;
        uint32_t id = flamme_folded_lookup(f, line, (size_t)(arrow - line));
        if (id != UINT32_MAX) {
            m->col[id] = (struct fg_rgb){clampc(r), clampc(g), clampc(b)};
            m->set[id] = 1;
        } else {
            char **q = realloc(m->extra, (m->nextra + 1) * sizeof *q);
            char *dup = strdup(line);
            if (!q || !dup) {
                free(dup);
                if (q)
                    m->extra = q;
                break;
            }
            m->extra = q;
            m->extra[m->nextra++] = dup;
        }
    }
    free(line);
    fclose(in);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void cp_save(struct fg_cpmap *m, const struct flamme_folded *f, const char *path)
{
    size_t n = m->nextra;
    for (uint32_t id = 0; id < f->nnames; id++)
        n += m->set[id] != 0;
    char **lines = calloc(n ? n : 1, sizeof *lines);
    size_t k = 0;
    if (!lines)
        return;
    for (size_t i = 0; i < m->nextra; i++)
        lines[k++] = m->extra[i];
    for (uint32_t id = 0; id < f->nnames; id++)
        if (m->set[id] && asprintf(&lines[k], "%s->rgb(%d,%d,%d)", flamme_folded_name(f, id),
                                   m->col[id].r, m->col[id].g, m->col[id].b) >= 0)
            k++;
    qsort(lines, k, sizeof *lines, cmp_str);
    char tmp[PATH_MAX + 8];
    FILE *o = flamme_out_fopen(path, tmp, sizeof tmp);
    if (!o)
        fprintf(stderr, "flamme svg: %s: cannot write palette file\n", path);
    for (size_t i = 0; o && i < k; i++)
        fprintf(o, "%s\n", lines[i]);
    if (o && flamme_out_fclose(o, tmp, path, 1) != 0)
        fprintf(stderr, "flamme svg: %s: cannot write palette file\n", path);
    for (size_t i = 0; i < k; i++) /* the extra lines too: they were moved here */
        free(lines[i]);
    free(lines);
    free(m->extra);
    m->extra = NULL;
    m->nextra = 0;
}

/* Frame colour, flamegraph.pl's order: the "-" / "--" separators, then the
 * differential scale, then --cp, then the palette. Per-name colours are
 * cached; --random draws per frame; waker frames of a chain graph are not
 * cached (or kept in --cp) since the same name is blue elsewhere. */
struct fg_rgb flamme_fg_node_color(struct fg_colors *c, const struct fg_node *nd)
{
    const struct flamme_fg_opts *op = c->op;
    if (nd->name == FG_NAME_ELIDED)
        return (struct fg_rgb){190, 190, 190};
    const char *s = "all";
    size_t len = 3;
    uint32_t id = UINT32_MAX;
    if (nd->name != FG_NAME_ROOT) {
        id = flamme_fg_real_id(c->t, nd->name);
        s = flamme_folded_name(c->f, id);
        len = c->f->name_len[id];
    }
    if ((len == 1 && s[0] == '-') || (len == 2 && s[0] == '-' && s[1] == '-') || !c->f->differential) {
        /* palette below */
    } else {
        double d = op->negate ? -nd->delta : nd->delta;
        if (d == 0 || c->maxdelta == 0)
            return (struct fg_rgb){250, 250, 250};
        int v = (int)lround(210.0 * (1 - fabs(d) / c->maxdelta));
        return d > 0 ? (struct fg_rgb){255, v, v} : (struct fg_rgb){v, v, 255};
    }
    int waker = nd->waker && !strcmp(op->colors, "chain");
    double v[3];
    if (id == UINT32_MAX || waker) {
        if (op->random)
            v[0] = rand01(&c->rng), v[1] = rand01(&c->rng), v[2] = rand01(&c->rng);
        else
            name_values(op->hash, s, len, v);
        return palette_color(op->colors, v, s, len, waker);
    }
    if (c->cp.set && c->cp.set[id])
        return c->cp.col[id];
    struct fg_rgb col;
    if (op->random) {
        v[0] = rand01(&c->rng), v[1] = rand01(&c->rng), v[2] = rand01(&c->rng);
        col = palette_color(op->colors, v, s, len, 0);
    } else {
        if (!c->col_done[id]) {
            name_values(op->hash, s, len, v);
            c->col[id] = palette_color(op->colors, v, s, len, 0);
            c->col_done[id] = 1;
        }
        col = c->col[id];
    }
    if (c->cp.set) {
        c->cp.col[id] = col;
        c->cp.set[id] = 1;
    }
    return col;
}

int flamme_fg_colors_init(struct fg_colors *c, const struct flamme_folded *f, const struct flamme_fg_opts *op,
                          const struct fg_tree *t, double maxdelta)
{
    memset(c, 0, sizeof *c);
    c->f = f;
    c->op = op;
    c->t = t;
    c->maxdelta = maxdelta;
    if (op->random) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        c->rng = ((uint64_t)ts.tv_sec * 1000000007ull) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 32);
        c->rng = mix((const char *)&c->rng, sizeof c->rng, 0) | 1;
    }
    size_t nn = f->nnames ? f->nnames : 1;
    c->col = calloc(nn, sizeof *c->col);
    c->col_done = calloc(nn, 1);
    if (op->cp_file) {
        c->cp.col = calloc(nn, sizeof *c->cp.col);
        c->cp.set = calloc(nn, 1);
    }
    if (!c->col || !c->col_done || (op->cp_file && (!c->cp.col || !c->cp.set))) {
        free(c->col); free(c->col_done); free(c->cp.col); free(c->cp.set);
        memset(c, 0, sizeof *c);
        return -1;
    }
    if (op->cp_file)
        cp_load(&c->cp, f, op->cp_file);
    return 0;
}

void flamme_fg_colors_finish(struct fg_colors *c)
{
    if (c->op->cp_file)
        cp_save(&c->cp, c->f, c->op->cp_file);
    for (size_t i = 0; i < c->cp.nextra; i++)
        free(c->cp.extra[i]);
    free(c->cp.extra);
    free(c->cp.col);
    free(c->cp.set);
    free(c->col);
    free(c->col_done);
    memset(c, 0, sizeof *c);
}
