/*
 * tools/folded.c — folded-stack parser (see folded.h for the rules).
 * Single thread; everything grows geometrically, so parsing is linear in the
 * input size whatever the stack depth or number of siblings.
 */
#include "tools/folded.h"
#include "common/hash.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void flamme_folded_init(struct flamme_folded *f)
{
    memset(f, 0, sizeof *f);
}

void flamme_folded_free(struct flamme_folded *f)
{
    free(f->arena);
    free(f->name_off);
    free(f->name_len);
    flamme_itab_free(&f->names);
    free(f->ids);
    free(f->stacks);
    memset(f, 0, sizeof *f);
}

/* Grows *p (elements of size sz) so that need elements fit. 0 or -1. */
static int grow(void **p, size_t *cap, size_t need, size_t sz)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap : 64;
    while (n < need)
        n *= 2;
    void *q = realloc(*p, n * sz);
    if (!q)
        return -1;
    *p = q;
    *cap = n;
    return 0;
}

/* Names come from files anyone may hand us: a keyed hash (common/hash.h). */
static uint64_t hash_bytes(const char *s, size_t len)
{
    return flamme_table_hash(s, len);
}

static uint64_t name_hash(const void *ctx, uint32_t id)
{
    const struct flamme_folded *f = ctx;
    return hash_bytes(f->arena + f->name_off[id], f->name_len[id]);
}

static int name_eq(const void *ctx, uint32_t id, const void *s, size_t len)
{
    const struct flamme_folded *f = ctx;
    return f->name_len[id] == len && memcmp(f->arena + f->name_off[id], s, len) == 0;
}

uint32_t flamme_folded_lookup(const struct flamme_folded *f, const char *s, size_t len)
{
    const uint32_t *slot = flamme_itab_probe(&f->names, hash_bytes(s, len), name_eq, f, s, len);
    return slot && *slot ? *slot - 1 : UINT32_MAX;
}

uint32_t flamme_folded_intern(struct flamme_folded *f, const char *s, size_t len)
{
    uint32_t id = flamme_folded_lookup(f, s, len);
    if (id != UINT32_MAX)
        return id;
    if (flamme_itab_reserve(&f->names, f->nnames, 1024, name_hash, f) < 0)
        goto oom;
    size_t cap = f->names_cap;
    if (grow((void **)&f->name_off, &cap, f->nnames + 1u, sizeof *f->name_off) < 0)
        goto oom;
    cap = f->names_cap;
    if (grow((void **)&f->name_len, &cap, f->nnames + 1u, sizeof *f->name_len) < 0)
        goto oom;
    f->names_cap = (uint32_t)cap;
    if (grow((void **)&f->arena, &f->arena_cap, f->arena_len + len + 1, 1) < 0)
        goto oom;
    id = f->nnames++;
    f->name_off[id] = f->arena_len;
    f->name_len[id] = (uint32_t)len;
    memcpy(f->arena + f->arena_len, s, len);
    f->arena[f->arena_len + len] = 0;
    f->arena_len += len + 1;
    *flamme_itab_probe(&f->names, hash_bytes(s, len), name_eq, f, s, len) = id + 1;
    return id;
oom:
    f->oom = 1;
    return UINT32_MAX;
}

static int is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

int flamme_folded_take_count(const char *s, size_t *len, double *out)
{
    size_t e = *len, i = e;
    while (i > 0 && s[i - 1] >= '0' && s[i - 1] <= '9')
        i--;
    size_t dot = i;
    if (i > 0 && s[i - 1] == '.') {
        dot = i - 1;
        i = dot;
        while (i > 0 && s[i - 1] >= '0' && s[i - 1] <= '9')
            i--;
        if (i == dot) /* ".5" is not a count */
            return 0;
    } else if (i == e) {
        return 0;
    }
    if (i == 0 || !is_ws(s[i - 1]))
        return 0;
    double v = 0;
    size_t intend = dot < e && s[dot] == '.' ? dot : e;
    if (intend - i <= 15 && intend == e) {
        uint64_t u = 0;
        for (size_t k = i; k < e; k++)
            u = u * 10 + (uint64_t)(s[k] - '0');
        v = (double)u;
    } else {
        char buf[512]; /* a double has at most 309 integer digits */
        size_t n = e - i;
        if (n >= sizeof buf)
            return 0;
        memcpy(buf, s + i, n);
        buf[n] = 0;
        v = strtod(buf, NULL);
    }
    while (i > 0 && is_ws(s[i - 1]))
        i--;
    *len = i;
    *out = v;
    return 1;
}

/* Appends one stack from the ';'-separated text. 0, -1 (empty), -2 (oom). */
static int add_stack(struct flamme_folded *f, const char *s, size_t len, double count,
                     int has_before, double before)
{
    if (len == 0)
        return -1;
    size_t start = f->nids;
    const char *p = s, *end = s + len;
    for (;;) {
        const char *q = memchr(p, ';', (size_t)(end - p));
        const char *fe = q ? q : end;
        if (f->nids == f->ids_cap &&
            grow((void **)&f->ids, &f->ids_cap, f->nids + 1, sizeof *f->ids) < 0)
            goto oom;
        uint32_t id = flamme_folded_intern(f, p, (size_t)(fe - p));
        if (id == UINT32_MAX)
            goto oom;
        f->ids[f->nids++] = id;
        if (!q)
            break;
        p = q + 1;
    }
    if (grow((void **)&f->stacks, &f->stacks_cap, f->nstacks + 1, sizeof *f->stacks) < 0)
        goto oom;
    struct flamme_folded_stack *st = &f->stacks[f->nstacks++];
    st->off = start;
    st->n = (uint32_t)(f->nids - start);
    st->count = count;
    st->before = before;
    st->has_before = has_before;
    f->total += count;
    if (has_before)
        f->differential = 1;
    return 0;
oom:
    f->nids = start;
    f->oom = 1;
    return -2;
}

int flamme_folded_add(struct flamme_folded *f, const char *stack, size_t len, double count)
{
    return add_stack(f, stack, len, count, 0, 0);
}

int flamme_folded_split_line(const char *line, size_t *len, double *count, int *has_before,
                             double *before, const char **why)
{
    size_t n = *len;
    while (n > 0 && is_ws(line[n - 1]))
        n--;
    size_t k = 0;
    while (k < n && is_ws(line[k]))
        k++;
    if (k == n)
        return 1;
    *before = 0;
    if (!flamme_folded_take_count(line, &n, count)) {
        *why = "no sample count at the end of the line";
        return -1;
    }
    *has_before = flamme_folded_take_count(line, &n, before);
    if (n == 0 || (n == 1 && line[0] == ';')) {
        *why = "empty stack";
        return -1;
    }
    *len = n;
    return 0;
}

int flamme_folded_parse_line(struct flamme_folded *f, const char *line, size_t len,
                             const char **why)
{
    double count, before;
    int diff;
    int r = flamme_folded_split_line(line, &len, &count, &diff, &before, why);
    if (r != 0)
        return r;
    r = add_stack(f, line, len, count, diff, before);
    if (r == -1)
        *why = "empty stack";
    return r;
}

static void warn_line(const char *verb, const char *name, size_t lineno, const char *why,
                      size_t *nwarn)
{
    if (++*nwarn <= 10)
        fprintf(stderr, "flamme %s: %s:%zu: skipped line: %s\n", verb, name, lineno, why);
}

int flamme_folded_read_lines(int fd, const char *verb, const char *name, const void *head,
                             size_t headlen, flamme_folded_line_fn fn, void *ctx, size_t *bad)
{
    size_t cap = 4u << 20, have = 0, lineno = 0, nwarn = 0;
    while (cap < headlen)
        cap *= 2;
    char *buf = malloc(cap);
    if (!buf)
        goto oom;
    if (headlen)
        memcpy(buf, head, headlen);
    have = headlen;
    for (;;) {
        if (have == cap) { /* one line longer than the buffer */
            char *nb = realloc(buf, cap * 2);
            if (!nb)
                goto oom;
            buf = nb;
            cap *= 2;
        }
        ssize_t r = read(fd, buf + have, cap - have);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            fprintf(stderr, "flamme %s: %s: read error: %s\n", verb, name, strerror(errno));
            free(buf);
            return -1;
        }
        int eof = r == 0;
        have += (size_t)r;
        size_t pos = 0;
        for (;;) {
            char *nl = memchr(buf + pos, '\n', have - pos);
            if (!nl && !(eof && pos < have))
                break;
            size_t llen = nl ? (size_t)(nl - (buf + pos)) : have - pos, slen = llen;
            const char *why = NULL;
            double count, before;
            int diff;
            lineno++;
            int pr = flamme_folded_split_line(buf + pos, &slen, &count, &diff, &before, &why);
            if (pr == 0 && fn(ctx, buf + pos, slen, count, diff, before) != 0)
                goto oom;
            if (pr == -1) {
                if (bad)
                    ++*bad;
                warn_line(verb, name, lineno, why, &nwarn);
            }
            pos += llen + (nl ? 1 : 0);
        }
        memmove(buf, buf + pos, have - pos);
        have -= pos;
        if (eof)
            break;
    }
    if (nwarn > 10)
        fprintf(stderr, "flamme %s: %s: %zu more malformed lines skipped\n", verb, name,
                nwarn - 10);
    free(buf);
    return 0;
oom:
    free(buf);
    fprintf(stderr, "flamme %s: %s: out of memory\n", verb, name);
    return -1;
}

/* flamme_folded_read_lines' callback for a flamme_folded. */
static int add_line(void *ctx, const char *stack, size_t len, double count, int has_before,
                    double before)
{
    return add_stack(ctx, stack, len, count, has_before, before) == -2 ? -1 : 0;
}

int flamme_folded_read_fd(struct flamme_folded *f, int fd, const char *name)
{
    return flamme_folded_read_fd_head(f, fd, name, NULL, 0);
}

int flamme_folded_read_fd_head(struct flamme_folded *f, int fd, const char *name,
                               const void *head, size_t headlen)
{
    /* add_stack sets f->oom itself when it runs out of memory. */
    return flamme_folded_read_lines(fd, "svg", name, head, headlen, add_line, f, &f->bad_lines);
}
