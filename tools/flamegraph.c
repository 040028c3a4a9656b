/*
 * tools/flamegraph.c — flame graph layout + interactive SVG (see flamegraph.h).
 *
 * How: stacks are sorted frame by frame (or kept in input order for a flame
 * chart), then walked once while a path of "open" frames is kept. A frame is
 * closed when the next stack leaves it; only then is its width known, and a
 * frame narrower than minwidth is folded into its parent's "…" accumulator
 * instead of being stored. So memory and output are bounded by the frames
 * drawn, and the cost is linear in the number of input frames.
 * Every name reaches the SVG through put_esc() (XML-escaped, UTF-8 checked);
 * the JavaScript reads names from the DOM and never contains input text.
 */
#include "common/hash.h"
#include "common/outfile.h"
#include "tools/flamegraph.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#define NAME_ROOT   UINT32_MAX
#define NAME_ELIDED (UINT32_MAX - 1)
#define NO_NODE     UINT32_MAX
#define XPAD        10.0
#define FRAMEPAD    1.0

void flamme_fg_defaults(struct flamme_fg_opts *o)
{
    memset(o, 0, sizeof *o);
    o->width = 1200;
    o->height = 16;
    o->minwidth = 0.1;
    o->fonttype = "Verdana";
    o->fontsize = 12;
    o->fontwidth = 0.59;
    o->countname = "samples";
    o->nametype = "Function:";
    o->colors = "hot";
    o->factor = 1;
}

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

/* ------------------------------------------------------------ ordering */

static int cmp_stacks(const void *a, const void *b, void *ctx)
{
    const struct flamme_folded *f = ctx;
    const struct flamme_folded_stack *x = a, *y = b;
    const uint32_t *p = f->ids + x->off, *q = f->ids + y->off;
    uint32_t n = x->n < y->n ? x->n : y->n;
    for (uint32_t i = 0; i < n; i++)
        if (p[i] != q[i])
            return p[i] < q[i] ? -1 : 1;
    return (x->n > y->n) - (x->n < y->n);
}

static int cmp_names(const void *a, const void *b, void *ctx)
{
    const struct flamme_folded *f = ctx;
    return strcmp(flamme_folded_name(f, *(const uint32_t *)a), flamme_folded_name(f, *(const uint32_t *)b));
}

/* Rewrites frame ids as ranks of their names so that sorting ids sorts names.
 * Returns rank -> original id (caller frees), or NULL on allocation failure. */
static uint32_t *rank_names(struct flamme_folded *f)
{
    uint32_t *order = malloc(((size_t)f->nnames + 1) * sizeof *order);
    uint32_t *rank = malloc(((size_t)f->nnames + 1) * sizeof *rank);
    if (!order || !rank) {
        free(order);
        free(rank);
        return NULL;
    }
    for (uint32_t i = 0; i < f->nnames; i++)
        order[i] = i;
    qsort_r(order, f->nnames, sizeof *order, cmp_names, f);
    for (uint32_t i = 0; i < f->nnames; i++)
        rank[order[i]] = i;
    for (size_t k = 0; k < f->nids; k++)
        f->ids[k] = rank[f->ids[k]];
    free(rank);
    return order;
}

/* -------------------------------------------------------------- layout */

struct node {
    uint32_t name, depth;     /* name: frame id, NAME_ROOT or NAME_ELIDED */
    uint32_t first_child, next;
    double total, self, delta, start;
    size_t elided;            /* for a "…" node: merged frames */
    int waker;                /* under a "--" frame (the waker part of a chain graph) */
};

struct open_node {
    uint32_t name;
    uint32_t head, tail;      /* kept children, in x order */
    double total, self, delta, sub_delta;
    double el_total, el_delta;
    size_t el_frames;
};

struct builder {
    struct node *nodes; size_t n, cap;
    struct open_node *path; size_t depth, path_cap; /* path[0] is the root */
    double thr;
    int oom;
};

static uint32_t emit(struct builder *b, const struct node *nd)
{
    if (b->n == b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 1024;
        struct node *q = realloc(b->nodes, nc * sizeof *q);
        if (!q) {
            b->oom = 1;
            return NO_NODE;
        }
        b->nodes = q;
        b->cap = nc;
    }
    b->nodes[b->n] = *nd;
    return (uint32_t)b->n++;
}

static void append_child(struct builder *b, struct open_node *p, uint32_t c)
{
    if (c == NO_NODE)
        return;
    b->nodes[c].next = NO_NODE;
    if (p->head == NO_NODE)
        p->head = c;
    else
        b->nodes[p->tail].next = c;
    p->tail = c;
}

/* Emits the "…" child of o (at depth d+1) if anything was elided under it,
 * then o itself. Returns o's node index (NO_NODE on allocation failure). */
static uint32_t emit_kept(struct builder *b, struct open_node *o, uint32_t d)
{
    if (o->el_frames > 0) {
        struct node e = {NAME_ELIDED, d + 1, NO_NODE, NO_NODE, o->el_total, o->el_total,
                         o->el_delta, 0, o->el_frames, 0};
        append_child(b, o, emit(b, &e));
    }
    struct node nd = {o->name, d, o->head, NO_NODE, o->total, o->self, o->delta, 0, 0, 0};
    return emit(b, &nd);
}

/* Closes the deepest open frame and hands its width to its parent. */
static void close_top(struct builder *b)
{
    uint32_t d = (uint32_t)b->depth;
    struct open_node *o = &b->path[d], *p = &b->path[d - 1];
    if (o->total < b->thr) {
        p->el_total += o->total;
        p->el_delta += o->sub_delta;
        p->el_frames += 1 + o->el_frames;
    } else {
        append_child(b, p, emit_kept(b, o, d));
    }
    p->total += o->total;
    p->sub_delta += o->sub_delta;
    b->depth--;
}

static int open_frame(struct builder *b, uint32_t name)
{
    if (b->depth + 1 >= b->path_cap) {
        size_t nc = b->path_cap ? b->path_cap * 2 : 256;
        struct open_node *q = realloc(b->path, nc * sizeof *q);
        if (!q)
            return -1;
        b->path = q;
        b->path_cap = nc;
    }
    struct open_node *o = &b->path[++b->depth];
    memset(o, 0, sizeof *o);
    o->name = name;
    o->head = o->tail = NO_NODE;
    return 0;
}

/* Builds the pruned tree; returns the root's index or NO_NODE (oom). */
static uint32_t build(struct builder *b, const struct flamme_folded *f)
{
    if (open_frame(b, NAME_ROOT) < 0) /* sizes the path; the root is path[0] */
        return NO_NODE;
    b->path[0] = b->path[1];
    b->depth = 0;
    for (size_t i = 0; i < f->nstacks && !b->oom; i++) {
        const struct flamme_folded_stack *s = &f->stacks[i];
        const uint32_t *ids = f->ids + s->off;
        size_t cp = 0;
        while (cp < s->n && cp < b->depth && b->path[cp + 1].name == ids[cp])
            cp++;
        while (b->depth > cp)
            close_top(b);
        for (size_t k = cp; k < s->n; k++)
            if (open_frame(b, ids[k]) < 0)
                return NO_NODE;
        struct open_node *leaf = &b->path[b->depth];
        leaf->self += s->count;
        leaf->total += s->count;
        if (s->has_before) {
            leaf->delta += s->count - s->before;
            leaf->sub_delta += s->count - s->before;
        }
    }
    while (b->depth > 0)
        close_top(b);
    uint32_t root = emit_kept(b, &b->path[0], 0);
    return b->oom ? NO_NODE : root;
}

/* Assigns start offsets and the waker flag (a "--" frame or one of its
 * ancestors is "--"): parents come after their children in b->nodes, so
 * walking backwards visits each parent before its children. sep is the id
 * of the name "--" (UINT32_MAX: absent). */
static void place(struct builder *b, uint32_t sep)
{
    for (size_t i = b->n; i-- > 0;) {
        double pos = b->nodes[i].start;
        int waker = b->nodes[i].waker || (sep != UINT32_MAX && b->nodes[i].name == sep);
        for (uint32_t c = b->nodes[i].first_child; c != NO_NODE; c = b->nodes[c].next) {
            b->nodes[c].start = pos;
            b->nodes[c].waker = waker;
            pos += b->nodes[c].total;
        }
    }
}

/* -------------------------------------------------------------- output */

/* Writes s[0..len) XML-escaped, replacing invalid UTF-8 and control bytes
 * with U+FFFD; stops after maxcp code points. */
static void put_esc(FILE *o, const char *s, size_t len, size_t maxcp)
{
    const unsigned char *p = (const unsigned char *)s, *e = p + len;
    size_t cp = 0;
    while (p < e && cp < maxcp) {
        unsigned c = *p;
        cp++;
        if (c < 0x80) {
            switch (c) {
            case '&': fputs("&amp;", o); break;
            case '<': fputs("&lt;", o); break;
            case '>': fputs("&gt;", o); break;
            case '"': fputs("&quot;", o); break;
            case '\'': fputs("&#39;", o); break;
            default:
                if (c < 0x20 || c == 0x7f)
                    fputs("\xef\xbf\xbd", o);
                else
                    putc((int)c, o);
            }
            p++;
            continue;
        }
        int n = c >= 0xf0 && c <= 0xf4 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 && c < 0xe0 ? 2 : 0;
        if (c >= 0xf5)
            n = 0;
        int ok = n > 0 && e - p >= n;
        for (int k = 1; ok && k < n; k++)
            ok = (p[k] & 0xc0) == 0x80;
        if (ok && n == 3) { /* no overlongs, no surrogates */
            unsigned v = (c & 0x0f) << 12 | (p[1] & 0x3fu) << 6 | (p[2] & 0x3fu);
            ok = v >= 0x800 && (v < 0xd800 || v > 0xdfff) && v != 0xfffe && v != 0xffff;
        } else if (ok && n == 4) {
            unsigned v = (c & 0x07) << 18 | (p[1] & 0x3fu) << 12;
            ok = v >= 0x10000 && v <= 0x10ffff;
        }
        if (ok) {
            fwrite(p, 1, (size_t)n, o);
            p += n;
        } else {
            fputs("\xef\xbf\xbd", o);
            p++;
        }
    }
}

static void put_escz(FILE *o, const char *s)
{
    put_esc(o, s, strlen(s), SIZE_MAX);
}

static size_t utf8_len(const char *s, size_t len)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++)
        n += ((unsigned char)s[i] & 0xc0) != 0x80;
    return n;
}

/* Display length: the annotation suffixes _[k] _[i] _[j] _[w] are dropped. */
static size_t display_len(const char *s, size_t len)
{
    if (len >= 4 && s[len - 4] == '_' && s[len - 3] == '[' && s[len - 1] == ']' &&
        strchr("kijw", s[len - 2]))
        return len - 4;
    return len;
}

/* Formats v with thousands separators ("1,234,567" or "12.50"). */
static const char *fmt_count(double v, char *buf, size_t len)
{
    char tmp[64];
    if (v == floor(v) && fabs(v) < 1e18)
        snprintf(tmp, sizeof tmp, "%.0f", v);
    else
        snprintf(tmp, sizeof tmp, "%.2f", v);
    char *dot = strchr(tmp, '.');
    size_t ilen = dot ? (size_t)(dot - tmp) : strlen(tmp), j = 0, lead = tmp[0] == '-';
    for (size_t i = 0; i < ilen && j + 2 < len; i++) {
        if (i > lead && (ilen - i) % 3 == 0)
            buf[j++] = ',';
        buf[j++] = tmp[i];
    }
    snprintf(buf + j, len - j, "%s", dot ? dot : "");
    return buf;
}

/* ---------------------------------------------------------------- colours */

struct rgb { int r, g, b; };

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
static struct rgb palette_color(const char *pal, const double v[3], const char *s, size_t len, int waker)
{
    double v1 = v[0], v2 = v[1], v3 = v[2];
    struct rgb c;
    if (len == 1 && s[0] == '-')
        return (struct rgb){200, 200, 200};
    if (len == 2 && s[0] == '-' && s[1] == '-')
        return (struct rgb){160, 160, 160};
    pal = sub_palette(pal, s, len, waker);
    if (!strcmp(pal, "mem"))
        c = (struct rgb){0, 190 + (int)(50 * v2), 0 + (int)(210 * v1)};
    else if (!strcmp(pal, "io"))
        c = (struct rgb){80 + (int)(60 * v1), 80 + (int)(60 * v1), 190 + (int)(55 * v2)};
    else if (!strcmp(pal, "red"))
        c = (struct rgb){200 + (int)(55 * v1), 50 + (int)(80 * v1), 50 + (int)(80 * v1)};
    else if (!strcmp(pal, "green"))
        c = (struct rgb){50 + (int)(60 * v1), 200 + (int)(55 * v1), 50 + (int)(60 * v1)};
    else if (!strcmp(pal, "blue"))
        c = (struct rgb){80 + (int)(60 * v1), 80 + (int)(60 * v1), 205 + (int)(50 * v1)};
    else if (!strcmp(pal, "yellow"))
        c = (struct rgb){175 + (int)(55 * v1), 175 + (int)(55 * v1), 50 + (int)(20 * v1)};
    else if (!strcmp(pal, "purple"))
        c = (struct rgb){190 + (int)(65 * v1), 80 + (int)(60 * v1), 190 + (int)(65 * v1)};
    else if (!strcmp(pal, "aqua"))
        c = (struct rgb){50 + (int)(60 * v1), 165 + (int)(55 * v1), 165 + (int)(55 * v1)};
    else if (!strcmp(pal, "orange"))
        c = (struct rgb){190 + (int)(65 * v1), 90 + (int)(65 * v1), 0};
    else if (!strcmp(pal, "ocaml")) {
        switch (ocaml_kind(s, len)) {
        case OK_OCAML:   c = (struct rgb){225 + (int)(30 * v1), 110 + (int)(70 * v2), 30 + (int)(40 * v3)}; break;
        case OK_STDLIB:  c = (struct rgb){215 + (int)(40 * v1), 195 + (int)(40 * v2), 60 + (int)(50 * v3)}; break;
        case OK_RUNTIME: c = (struct rgb){60 + (int)(50 * v1), 170 + (int)(50 * v2), 200 + (int)(50 * v3)}; break;
        case OK_GC:      c = (struct rgb){70 + (int)(60 * v1), 190 + (int)(60 * v2), 70 + (int)(50 * v3)}; break;
        case OK_KERNEL:  c = (struct rgb){175 + (int)(50 * v1), 120 + (int)(50 * v2), 220 + (int)(30 * v3)}; break;
        case OK_UNKNOWN: c = (struct rgb){180 + (int)(20 * v1), 180 + (int)(20 * v1), 180 + (int)(20 * v1)}; break;
        default:         c = (struct rgb){200 + (int)(55 * v1), 90 + (int)(50 * v2), 100 + (int)(50 * v3)}; break;
        }
    } else /* hot */
        c = (struct rgb){205 + (int)(50 * v3), 0 + (int)(230 * v1), 0 + (int)(55 * v2)};
    return (struct rgb){clampc(c.r), clampc(c.g), clampc(c.b)};
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
static const char *bg_colors(const char *pal, const char *bg, const char **to)
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

/* Consistent palette (--cp): "name->rgb(r,g,b)" lines. */
struct cpmap {
    struct rgb *col;   /* per name id */
    char *set;         /* 1 if col[id] is fixed */
    char **extra;      /* lines for names not in this input, kept verbatim */
    size_t nextra;
};

static void cp_load(struct cpmap *m, const struct flamme_folded *f, const char *path)
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
            m->col[id] = (struct rgb){clampc(r), clampc(g), clampc(b)};
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

static void cp_save(struct cpmap *m, const struct flamme_folded *f, const char *path)
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

/* ------------------------------------------------------------ the SVG */

/* The viewer's JavaScript, tools/flamegraph.js turned into a C string by
 * mk/render.mk. It must not contain "]]>" (it goes into a CDATA section). */
static const char fg_script[] =
#include "build/gen/flamegraph_js.inc"
    ;

static void put_num(FILE *o, double v)
{
    if (v == floor(v) && fabs(v) < 1e15)
        fprintf(o, "%.0f", v);
    else
        fprintf(o, "%.17g", v);
}

/* Keeps only characters that cannot end a CSS declaration or an XML text. */
static void put_font(FILE *o, const char *s)
{
    for (; *s; s++)
        if ((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
            strchr(" ,-_", *s))
            putc(*s, o);
}

/* XML comment body: "--" may not appear in a comment. */
static void put_comment(FILE *o, const char *s)
{
    for (const char *p = s; *p;) {
        if (*p == '-') {
            fputs(p[1] == '-' || p[1] == 0 ? "- " : "-", o);
            p++;
            continue;
        }
        size_t n = strcspn(p, "-"); /* whole runs, so multi-byte characters stay whole */
        put_esc(o, p, n, SIZE_MAX);
        p += n;
    }
}

int flamme_fg_encoding_ok(const char *s)
{
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z')))
        return 0;
    for (s++; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '.' || *s == '_' || *s == '-'))
            return 0;
    return 1;
}

/* The XML declaration; --encoding only names an encoding (as flamegraph.pl,
 * the bytes are UTF-8 whatever it says). A name that is not a valid XML
 * EncName never gets here (svg.c checks flamme_fg_encoding_ok). */
static void put_xml_decl(FILE *o, const struct flamme_fg_opts *op)
{
    fputs("<?xml version=\"1.0\"", o);
    if (op->encoding && flamme_fg_encoding_ok(op->encoding))
        fprintf(o, " encoding=\"%s\"", op->encoding);
    fputs(" standalone=\"no\"?>\n", o);
}

static void write_error_svg(FILE *o, const struct flamme_fg_opts *op, const char *msg)
{
    put_xml_decl(o, op);
    fprintf(o, "<svg version=\"1.1\" width=\"%d\" height=\"60\" xmlns=\"http://www.w3.org/2000/svg\">\n"
               "<text x=\"%d\" y=\"30\" font-family=\"", op->width, op->width / 2);
    put_font(o, op->fonttype);
    fprintf(o, "\" font-size=\"%g\" text-anchor=\"middle\">", op->fontsize);
    put_escz(o, msg);
    fputs("</text>\n</svg>\n", o);
}

/* ------------------------------------------------------------ --nameattr */

struct na_attr { char *key, *val; };

struct na_entry {
    char *name;
    char *href, *target, *title, *id, *cls;
    struct na_attr *extra; size_t nextra, ngx; /* extra[0..ngx): g_extra, then a_extra */
};

struct flamme_fg_nameattr {
    struct na_entry *e; size_t n;
};

static void na_entry_free(struct na_entry *e)
{
    free(e->name); free(e->href); free(e->target); free(e->title); free(e->id); free(e->cls);
    for (size_t i = 0; i < e->nextra; i++) {
        free(e->extra[i].key);
        free(e->extra[i].val);
    }
    free(e->extra);
    memset(e, 0, sizeof *e);
}

void flamme_fg_nameattr_free(struct flamme_fg_nameattr *na)
{
    if (!na)
        return;
    for (size_t i = 0; i < na->n; i++)
        na_entry_free(&na->e[i]);
    free(na->e);
    free(na);
}

static int is_attr_start(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
}

/* Names the frame element already has, or that would run script. */
static int reserved_attr(const char *k, size_t n)
{
    static const char *const res[] = {"s", "n", "m", "d", "fn", "data-i", "id", "class", "href",
                                      "xlink:href", "target", "style", NULL};
    if (n >= 2 && (k[0] == 'o' || k[0] == 'O') && (k[1] == 'n' || k[1] == 'N'))
        return 1;
    for (int i = 0; res[i]; i++)
        if (strlen(res[i]) == n && strncasecmp(res[i], k, n) == 0)
            return 1;
    return 0;
}

/* Parses `name="value" name='value' ...` (g_extra / a_extra) onto e->extra.
 * Returns NULL, or why it is malformed. */
static const char *parse_extras(struct na_entry *e, const char *s)
{
    for (;;) {
        while (*s == ' ' || *s == '\t')
            s++;
        if (!*s)
            return NULL;
        const char *k = s;
        if (!is_attr_start(*s))
            return "extra attributes must look like name=\"value\"";
        while (is_attr_start(*s) || (*s >= '0' && *s <= '9') || *s == '-' || *s == '.')
            s++;
        size_t kl = (size_t)(s - k);
        if (*s != '=' || (s[1] != '"' && s[1] != '\''))
            return "extra attributes must look like name=\"value\"";
        if (reserved_attr(k, kl))
            return "extra attribute not allowed (used by the viewer, an event handler, or a key of its own)";
        for (size_t i = 0; i < e->nextra; i++)
            if (strlen(e->extra[i].key) == kl && memcmp(e->extra[i].key, k, kl) == 0)
                return "extra attribute given twice";
        char q = s[1];
        const char *v = s + 2, *ve = strchr(v, q);
        if (!ve)
            return "unterminated attribute value";
        struct na_attr *x = realloc(e->extra, (e->nextra + 1) * sizeof *x);
        if (!x)
            return "out of memory";
        e->extra = x;
        x[e->nextra].key = strndup(k, kl);
        x[e->nextra].val = strndup(v, (size_t)(ve - v));
        e->nextra++;
        if (!x[e->nextra - 1].key || !x[e->nextra - 1].val)
            return "out of memory";
        s = ve + 1;
    }
}

/* Parses "NAME<TAB>k=v<TAB>k=v..." into e. NULL, or why it is malformed. */
static const char *parse_na_line(struct na_entry *e, char *line)
{
    char *tab = strchr(line, '\t');
    if (!tab)
        return "expected NAME<TAB>key=value...";
    *tab = 0;
    e->name = strdup(line);
    if (!e->name)
        return "out of memory";
    char *p = tab + 1, *a_extra = NULL;
    while (p) {
        char *next = strchr(p, '\t');
        if (next)
            *next++ = 0;
        if (*p) {
            char *eq = strchr(p, '=');
            if (!eq)
                return "expected key=value";
            *eq = 0;
            const char *v = eq + 1;
            char **slot = !strcmp(p, "href") ? &e->href : !strcmp(p, "target") ? &e->target
                        : !strcmp(p, "title") ? &e->title : !strcmp(p, "id") ? &e->id
                        : !strcmp(p, "class") ? &e->cls : NULL;
            if (slot) {
                free(*slot);
                if (!(*slot = strdup(v)))
                    return "out of memory";
            } else if (!strcmp(p, "g_extra")) {
                const char *why = parse_extras(e, v);
                if (why)
                    return why;
            } else if (!strcmp(p, "a_extra")) {
                a_extra = (char *)v; /* after all g_extra, so that extra[0..ngx) stays g_extra */
            }
        }
        p = next;
    }
    e->ngx = e->nextra;
    return a_extra ? parse_extras(e, a_extra) : NULL;
}

struct flamme_fg_nameattr *flamme_fg_nameattr_load(const char *path)
{
    FILE *in = fopen(path, "r");
    if (!in) {
        fprintf(stderr, "flamme svg: --nameattr: cannot read %s: %s\n", path, strerror(errno));
        return NULL;
    }
    struct flamme_fg_nameattr *na = calloc(1, sizeof *na);
    char *line = NULL;
    size_t cap = 0, lineno = 0, ecap = 0;
    ssize_t n;
    const char *why = NULL;
    while (na && (n = getline(&line, &cap, in)) > 0) {
        lineno++;
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            line[--n] = 0;
        if (n == 0)
            continue;
        if (na->n == ecap) {
            size_t nc = ecap ? ecap * 2 : 16;
            struct na_entry *q = realloc(na->e, nc * sizeof *q);
            if (!q) {
                why = "out of memory";
                break;
            }
            na->e = q;
            ecap = nc;
        }
        struct na_entry *e = &na->e[na->n++];
        memset(e, 0, sizeof *e);
        if ((why = parse_na_line(e, line)) != NULL)
            break;
    }
    free(line);
    int rerr = ferror(in);
    fclose(in);
    if (!na || why || rerr) {
        fprintf(stderr, "flamme svg: --nameattr: %s:%zu: %s\n", path, lineno,
                !na ? "out of memory" : why ? why : "read error");
        flamme_fg_nameattr_free(na);
        return NULL;
    }
    return na;
}

/* ------------------------------------------------------------ the frames */

struct ctx {
    const struct flamme_folded *f;
    const struct flamme_fg_opts *op;
    const uint32_t *rank_to_id;  /* NULL when ids were not ranked */
    struct cpmap cp;
    struct rgb *col; char *col_done;
    const struct na_entry **na_of; /* per name id, NULL: no --nameattr line */
    double maxdelta;
    double factor;               /* --factor applied to counts shown */
    uint64_t rng;                /* --random */
};

static uint32_t real_id(const struct ctx *c, uint32_t id)
{
    return c->rank_to_id ? c->rank_to_id[id] : id;
}

/* Frame colour, flamegraph.pl's order: the "-" / "--" separators, then the
 * differential scale, then --cp, then the palette. Per-name colours are
 * cached; --random draws per frame; waker frames of a chain graph are not
 * cached (or kept in --cp) since the same name is blue elsewhere. */
static struct rgb node_color(struct ctx *c, const struct node *nd)
{
    const struct flamme_fg_opts *op = c->op;
    if (nd->name == NAME_ELIDED)
        return (struct rgb){190, 190, 190};
    const char *s = "all";
    size_t len = 3;
    uint32_t id = UINT32_MAX;
    if (nd->name != NAME_ROOT) {
        id = real_id(c, nd->name);
        s = flamme_folded_name(c->f, id);
        len = c->f->name_len[id];
    }
    if ((len == 1 && s[0] == '-') || (len == 2 && s[0] == '-' && s[1] == '-') || !c->f->differential) {
        /* palette below */
    } else {
        double d = op->negate ? -nd->delta : nd->delta;
        if (d == 0 || c->maxdelta == 0)
            return (struct rgb){250, 250, 250};
        int v = (int)lround(210.0 * (1 - fabs(d) / c->maxdelta));
        return d > 0 ? (struct rgb){255, v, v} : (struct rgb){v, v, 255};
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
    struct rgb col;
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

static void node_name(const struct ctx *c, const struct node *nd, const char **s, size_t *len)
{
    if (nd->name == NAME_ROOT) {
        *s = "all";
        *len = 3;
    } else if (nd->name == NAME_ELIDED) {
        *s = "\xe2\x80\xa6";
        *len = 3;
    } else {
        uint32_t id = real_id(c, nd->name);
        *s = flamme_folded_name(c->f, id);
        *len = display_len(*s, c->f->name_len[id]);
    }
}

static void put_attr(FILE *o, const char *k, const char *v)
{
    fprintf(o, " %s=\"", k);
    put_escz(o, v);
    putc('"', o);
}

/* The --nameattr attributes of a frame element, in flamegraph.pl's order
 * (link attributes first when the frame is a link). */
static void write_na_attrs(FILE *o, const struct na_entry *na, int link)
{
    if (link) {
        put_attr(o, "xlink:href", na->href);
        put_attr(o, "target", na->target && na->target[0] ? na->target : "_top");
        for (size_t i = na->ngx; i < na->nextra; i++)
            put_attr(o, na->extra[i].key, na->extra[i].val);
    }
    if (na->id)
        put_attr(o, "id", na->id);
    if (na->cls)
        put_attr(o, "class", na->cls);
    for (size_t i = 0; i < na->ngx; i++)
        put_attr(o, na->extra[i].key, na->extra[i].val);
}

static void write_frame(struct ctx *c, FILE *o, const struct node *nd, double total, double scale,
                        double imageheight, double ypad1, double ypad2)
{
    const struct flamme_fg_opts *op = c->op;
    double x = XPAD + nd->start * scale, w = nd->total * scale;
    double y = op->inverted ? ypad1 + nd->depth * (double)op->height
                            : imageheight - ypad2 - (nd->depth + 1) * (double)op->height;
    const char *name;
    size_t nlen;
    char b1[64], b2[64];
    node_name(c, nd, &name, &nlen);
    struct rgb col = node_color(c, nd);
    const struct na_entry *na = NULL;
    if (c->na_of && nd->name != NAME_ROOT && nd->name != NAME_ELIDED)
        na = c->na_of[real_id(c, nd->name)];
    /* as flamegraph.pl: a frame with an href is an <a> carrying the <g>'s attributes */
    const char *tag = na && na->href && na->href[0] ? "a" : "g";
    fprintf(o, "<%s", tag);
    if (na)
        write_na_attrs(o, na, *tag == 'a');
    fputs(" s=\"", o);
    put_num(o, nd->start);
    fputs("\" n=\"", o);
    put_num(o, nd->total);
    fputs("\" m=\"", o);
    put_num(o, nd->self);
    fprintf(o, "\" d=\"%u\"%s", nd->depth, nd->name == NAME_ELIDED ? " class=\"el\"" : "");
    if (na && na->title) { /* the viewer takes the name from fn when the title is replaced */
        fputs(" fn=\"", o);
        put_esc(o, name, nlen, SIZE_MAX);
        fputs("\"><title>", o);
        put_escz(o, na->title);
        goto title_done;
    }
    fputs("><title>", o);
    put_esc(o, name, nlen, SIZE_MAX);
    fprintf(o, "\n%s ", fmt_count(nd->total, b1, sizeof b1));
    put_escz(o, op->countname);
    fprintf(o, ", %.2f%%", total > 0 ? 100.0 * nd->total / total : 0.0);
    if (nd->name == NAME_ELIDED)
        fprintf(o, "\n%zu frames narrower than the minimum width merged here", nd->elided);
    else
        fprintf(o, "\nself: %s, %.2f%%", fmt_count(nd->self, b2, sizeof b2),
                total > 0 ? 100.0 * nd->self / total : 0.0);
    if (c->f->differential && nd->name != NAME_ELIDED)
        fprintf(o, "\ndelta: %s%s (%+.2f%%)", nd->delta > 0 ? "+" : "",
                fmt_count(nd->delta, b1, sizeof b1), total > 0 ? 100.0 * nd->delta / total : 0.0);
title_done:
    fprintf(o, "</title><rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"rgb(%d,%d,%d)\""
               " rx=\"2\" ry=\"2\"/><text x=\"%.2f\" y=\"%.1f\">",
            x, y, w, op->height - FRAMEPAD, col.r, col.g, col.b, x + 3,
            y + op->height / 2.0 + op->fontsize / 3.0);
    double cw = op->fontsize * op->fontwidth;
    size_t fit = w > 3 ? (size_t)((w - 3) / cw) : 0;
    size_t cps = utf8_len(name, nlen);
    if (fit >= 3 || (cps <= fit && cps > 0)) {
        if (cps <= fit) {
            put_esc(o, name, nlen, SIZE_MAX);
        } else {
            put_esc(o, name, nlen, fit - 2);
            fputs("..", o);
        }
    }
    fprintf(o, "</text></%s>\n", tag);
}

int flamme_fg_render(struct flamme_folded *f, const struct flamme_fg_opts *op, FILE *o,
                     struct flamme_fg_stats *st)
{
    struct flamme_fg_stats dummy;
    if (!st)
        st = &dummy;
    memset(st, 0, sizeof *st);
    if (f->nstacks == 0 || !(f->total > 0)) {
        write_error_svg(o, op, "ERROR: No valid input provided");
        return 2;
    }
    struct ctx c = {.f = f, .op = op};
    double factor = op->factor > 0 ? op->factor : 1;
    if (op->total > 0 && op->total < f->total && op->total / f->total > 0.02)
        fprintf(stderr, "flamme svg: warning: --total %g is less than the actual total %g, so ignored\n",
                op->total, f->total);
    if (factor != 1) { /* widths are ratios, so only the counts shown change */
        for (size_t i = 0; i < f->nstacks; i++) {
            f->stacks[i].count *= factor;
            f->stacks[i].before *= factor;
        }
        f->total *= factor;
    }
    /* the graph's width in counts: the real sum, or a larger --total */
    double total = op->total * factor > f->total ? op->total * factor : f->total;
    if (op->random) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        c.rng = ((uint64_t)ts.tv_sec * 1000000007ull) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 32);
        c.rng = mix((const char *)&c.rng, sizeof c.rng, 0) | 1;
    }
    if (op->reverse)
        for (size_t i = 0; i < f->nstacks; i++) {
            uint32_t *p = f->ids + f->stacks[i].off;
            for (uint32_t a = 0, b = f->stacks[i].n; b > a + 1; a++, b--) {
                uint32_t t = p[a];
                p[a] = p[b - 1];
                p[b - 1] = t;
            }
        }
    uint32_t *order = NULL;
    if (!op->flamechart) {
        order = rank_names(f);
        if (!order)
            goto oom;
        c.rank_to_id = order;
        qsort_r(f->stacks, f->nstacks, sizeof *f->stacks, cmp_stacks, f);
    }
    double drawable = op->width - 2 * XPAD;
    if (drawable < 1)
        drawable = 1;
    struct builder b = {0};
    b.thr = op->minwidth_pct ? op->minwidth / 100.0 * total : op->minwidth / drawable * total;
    uint32_t root = build(&b, f);
    if (root == NO_NODE) {
        free(b.nodes);
        free(b.path);
        free(order);
        goto oom;
    }
    free(b.path);
    /* with a larger --total the root spans it all; the rest is its "self" */
    if (total > f->total) {
        b.nodes[root].self += total - b.nodes[root].total;
        b.nodes[root].total = total;
    }
    uint32_t sep = flamme_folded_lookup(f, "--", 2);
    if (sep != UINT32_MAX && order)
        for (uint32_t r = 0; r < f->nnames; r++)
            if (order[r] == sep) {
                sep = r;
                break;
            }
    place(&b, sep);

    size_t nn = f->nnames ? f->nnames : 1;
    c.col = calloc(nn, sizeof *c.col);
    c.col_done = calloc(nn, 1);
    if (op->cp_file) {
        c.cp.col = calloc(nn, sizeof *c.cp.col);
        c.cp.set = calloc(nn, 1);
    }
    if (!c.col || !c.col_done || (op->cp_file && (!c.cp.col || !c.cp.set))) {
        free(c.col); free(c.col_done); free(c.cp.col); free(c.cp.set);
        free(b.nodes);
        free(order);
        goto oom;
    }
    if (op->cp_file)
        cp_load(&c.cp, f, op->cp_file);
    if (op->nameattr) {
        c.na_of = calloc(nn, sizeof *c.na_of);
        if (!c.na_of) {
            free(c.col); free(c.col_done); free(c.cp.col); free(c.cp.set);
            free(b.nodes);
            free(order);
            goto oom;
        }
        for (size_t i = 0; i < op->nameattr->n; i++) { /* a later line wins, as in flamegraph.pl */
            const struct na_entry *e = &op->nameattr->e[i];
            uint32_t id = flamme_folded_lookup(f, e->name, strlen(e->name));
            if (id != UINT32_MAX)
                c.na_of[id] = e;
        }
    }

    for (size_t i = 0; i < b.n; i++) {
        const struct node *nd = &b.nodes[i];
        if (nd->depth > st->max_depth)
            st->max_depth = nd->depth;
        if (nd->name == NAME_ELIDED) {
            st->elided_frames += nd->elided;
            st->elided_samples += nd->total;
        } else if (fabs(nd->delta) > c.maxdelta) {
            c.maxdelta = fabs(nd->delta);
        }
    }
    st->drawn = b.n;

    const char *title = op->title ? op->title
                        : op->flamechart ? "Flame Chart"
                        : op->inverted ? "Icicle Graph" : "Flame Graph";
    double fs = op->fontsize;
    double ypad1 = fs * 3 + (op->subtitle ? fs * 1.5 : 0) + fs * 1.5 + (op->threads ? fs * 1.8 : 0);
    double ypad2 = fs * 2 + 10;
    double imageheight = (st->max_depth + 1) * (double)op->height + ypad1 + ypad2;
    double scale = drawable / total;
    const char *bg2, *bg1 = bg_colors(op->colors, op->bgcolors, &bg2);
    char b1[64], b2[64];

    put_xml_decl(o, op);
    fputs("<!DOCTYPE svg PUBLIC \"-//W3C//DTD SVG 1.1//EN\" "
          "\"http://www.w3.org/Graphics/SVG/1.1/DTD/svg11.dtd\">\n", o);
    fprintf(o, "<svg version=\"1.1\" id=\"flamme\" width=\"%d\" height=\"%.0f\" viewBox=\"0 0 %d %.0f\" "
               "xmlns=\"http://www.w3.org/2000/svg\" xmlns:xlink=\"http://www.w3.org/1999/xlink\" "
               "data-total=\"", op->width, imageheight, op->width, imageheight);
    put_num(o, total);
    fprintf(o, "\" data-xpad=\"%g\" data-w=\"%.4f\" data-fs=\"%g\" data-fw=\"%g\" data-countname=\"",
            XPAD, drawable, op->fontsize, op->fontwidth);
    put_escz(o, op->countname);
    fputs("\" data-nametype=\"", o);
    put_escz(o, op->nametype);
    fputs("\">\n<!-- Flame graph by flamme svg.", o);
    if (op->notes) {
        fputs(" NOTES: ", o);
        put_comment(o, op->notes);
    }
    fputs(" -->\n", o);
    fprintf(o, "<!-- %zu frames drawn; %zu frames narrower than the minimum width merged into "
               "\xe2\x80\xa6 frames (%s of the total) -->\n",
            st->drawn, st->elided_frames, fmt_count(st->elided_samples, b1, sizeof b1));
    fprintf(o, "<defs><linearGradient id=\"background\" y1=\"0\" y2=\"1\" x1=\"0\" x2=\"0\">"
               "<stop stop-color=\"%s\" offset=\"5%%\"/><stop stop-color=\"%s\" offset=\"95%%\"/>"
               "</linearGradient></defs>\n<style type=\"text/css\">\ntext { font-family:",
            bg1, bg2);
    put_font(o, op->fonttype);
    fprintf(o, "; font-size:%gpx; fill:rgb(0,0,0); }\n"
               "#frames > *:hover > rect { stroke:black; stroke-width:0.5; cursor:pointer; }\n"
               "#frames > * { cursor:pointer; }\n"
               "#title { text-anchor:middle; font-size:%gpx; }\n"
               "#subtitle { text-anchor:middle; fill:rgb(80,80,80); }\n"
               "#search, #ignorecase, #unzoom, .sel { cursor:pointer; fill:rgb(20,20,160); }\n"
               "#search, #matched, #elided { text-anchor:end; }\n"
               "#elided { fill:rgb(100,100,100); }\n"
               ".sel.on { font-weight:bold; }\n"
               ".hide { display:none; }\n"
               ".parent { opacity:0.5; }\n</style>\n",
            fs, fs + 5);
    fprintf(o, "<rect x=\"0\" y=\"0\" width=\"100%%\" height=\"100%%\" fill=\"url(#background)\"/>\n");
    fprintf(o, "<text id=\"title\" x=\"%.2f\" y=\"%.1f\">", op->width / 2.0, fs * 2);
    put_escz(o, title);
    fputs("</text>\n", o);
    double yline = fs * 2;
    if (op->subtitle) {
        yline += fs * 1.5;
        fprintf(o, "<text id=\"subtitle\" x=\"%.2f\" y=\"%.1f\">", op->width / 2.0, yline);
        put_escz(o, op->subtitle);
        fputs("</text>\n", o);
    }
    yline += fs * 1.5;
    fprintf(o, "<text id=\"unzoom\" class=\"hide\" x=\"%.2f\" y=\"%.1f\">Reset Zoom</text>\n", XPAD, yline);
    fprintf(o, "<text id=\"search\" x=\"%.2f\" y=\"%.1f\">Search</text>\n", op->width - XPAD - 30, yline);
    fprintf(o, "<text id=\"ignorecase\" x=\"%.2f\" y=\"%.1f\">ic</text>\n", op->width - XPAD - 16, yline);
    fprintf(o, "<text id=\"elided\" x=\"%.2f\" y=\"%.1f\">", op->width - XPAD - 120, yline);
    if (st->elided_frames) {
        fprintf(o, "%zu frames narrower than %g%s elided into \xe2\x80\xa6 (%s ", st->elided_frames,
                op->minwidth, op->minwidth_pct ? "%" : " px", fmt_count(st->elided_samples, b2, sizeof b2));
        put_escz(o, op->countname);
        fprintf(o, ", %.2f%%)", 100.0 * st->elided_samples / total);
    }
    fputs("</text>\n", o);
    if (op->threads) {
        yline += fs * 1.8;
        double x = XPAD;
        fprintf(o, "<g id=\"threads\"><text class=\"sel on\" x=\"%.2f\" y=\"%.1f\">all</text>", x, yline);
        x += 4 * fs * op->fontwidth + fs;
        for (uint32_t ch = b.nodes[root].first_child; ch != NO_NODE; ch = b.nodes[ch].next) {
            const struct node *nd = &b.nodes[ch];
            if (nd->name == NAME_ELIDED || x > op->width - 50)
                continue;
            const char *name;
            size_t nlen;
            node_name(&c, nd, &name, &nlen);
            size_t cps = utf8_len(name, nlen);
            if (cps > 40)
                cps = 40;
            fputs("<text class=\"sel\" s=\"", o);
            put_num(o, nd->start);
            fprintf(o, "\" x=\"%.2f\" y=\"%.1f\">", x, yline);
            put_esc(o, name, nlen, 40);
            fputs("</text>", o);
            x += (double)(cps + 2) * fs * op->fontwidth + fs;
        }
        fputs("</g>\n", o);
    }
    fprintf(o, "<text id=\"details\" x=\"%.2f\" y=\"%.1f\"> </text>\n", XPAD, imageheight - fs / 2 - 4);
    fprintf(o, "<text id=\"matched\" x=\"%.2f\" y=\"%.1f\"> </text>\n", op->width - XPAD,
            imageheight - fs / 2 - 4);
    fputs("<g id=\"frames\">\n", o);
    for (size_t i = b.n; i-- > 0;)
        write_frame(&c, o, &b.nodes[i], total, scale, imageheight, ypad1, ypad2);
    fputs("</g>\n<script type=\"text/ecmascript\"><![CDATA[\n", o);
    fputs(fg_script, o);
    fputs("]]></script>\n</svg>\n", o);

    if (op->cp_file)
        cp_save(&c.cp, f, op->cp_file);
    for (size_t i = 0; i < c.cp.nextra; i++)
        free(c.cp.extra[i]);
    free(c.cp.extra);
    free(c.cp.col);
    free(c.cp.set);
    free(c.col);
    free(c.col_done);
    free(c.na_of);
    free(b.nodes);
    free(order);
    if (fflush(o) != 0 || ferror(o)) {
        fprintf(stderr, "flamme svg: write error\n");
        return 1;
    }
    return 0;
oom:
    fprintf(stderr, "flamme svg: out of memory\n");
    return 1;
}
