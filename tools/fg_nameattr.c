/*
 * tools/fg_nameattr.c — per-function SVG attributes (--nameattr).
 *
 * Owns: reading a --nameattr file ("NAME<TAB>key=value<TAB>...", as
 * flamegraph.pl) into entries, refusing extra attributes the viewer or a
 * script would use, and finding each input name's entry.
 * Called by: tools/svg.c (load/free, once per command), flamme_fg_render
 * (tools/flamegraph.c) for the index; fg_svg.c writes the attributes.
 * Single thread.
 */
#include "tools/fg_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ------------------------------------------------------------ --nameattr */

static void na_entry_free(struct fg_na_entry *e)
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
static const char *parse_extras(struct fg_na_entry *e, const char *s)
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
        struct fg_na_attr *x = realloc(e->extra, (e->nextra + 1) * sizeof *x);
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
static const char *parse_na_line(struct fg_na_entry *e, char *line)
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
            struct fg_na_entry *q = realloc(na->e, nc * sizeof *q);
            if (!q) {
                why = "out of memory";
                break;
            }
            na->e = q;
            ecap = nc;
        }
        struct fg_na_entry *e = &na->e[na->n++];
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

const struct fg_na_entry **flamme_fg_nameattr_index(const struct flamme_fg_nameattr *na,
                                                     const struct flamme_folded *f)
{
    const struct fg_na_entry **na_of = calloc(f->nnames ? f->nnames : 1, sizeof *na_of);
    if (!na_of)
        return NULL;
    for (size_t i = 0; i < na->n; i++) { /* a later line wins, as in flamegraph.pl */
        const struct fg_na_entry *e = &na->e[i];
        uint32_t id = flamme_folded_lookup(f, e->name, strlen(e->name));
        if (id != UINT32_MAX)
            na_of[id] = e;
    }
    return na_of;
}
