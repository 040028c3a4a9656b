/*
 * tools/fnagg.c — per-function self/total weights of folded stacks (see
 * tools/fnagg.h). Called by `flamme report` and `flamme top`.
 */
#include "tools/fnagg.h"

#include <stdlib.h>
#include <string.h>

#include "common/hash.h"
#include "common/roots.h"

struct flamme_fn *flamme_fnagg_get(struct flamme_fnagg *a, const char *s, size_t n)
{
    if ((a->n + 1) * 2 > a->cap) {
        size_t nc = a->cap ? a->cap * 2 : 1024;
        struct flamme_fn *ne = calloc(nc, sizeof *ne);
        if (!ne)
            return NULL;
        for (size_t i = 0; i < a->cap; i++) {
            if (!a->fns[i].name)
                continue;
            size_t j = flamme_table_hash(a->fns[i].name, strlen(a->fns[i].name)) & (nc - 1);
            while (ne[j].name)
                j = (j + 1) & (nc - 1);
            ne[j] = a->fns[i];
        }
        free(a->fns);
        a->fns = ne;
        a->cap = nc;
    }
    size_t j = flamme_table_hash(s, n) & (a->cap - 1);
    while (a->fns[j].name) {
        if (strncmp(a->fns[j].name, s, n) == 0 && a->fns[j].name[n] == '\0')
            return &a->fns[j];
        j = (j + 1) & (a->cap - 1);
    }
    char *name = strndup(s, n);
    if (!name)
        return NULL;
    a->fns[j] = (struct flamme_fn){ name, 0, 0, 0 };
    a->n++;
    return &a->fns[j];
}

static int is_marker(const char *s, size_t n)
{
    return (n == 11 && memcmp(s, "[truncated]", 11) == 0) || (n == 8 && memcmp(s, "[broken]", 8) == 0) ||
           (n == 11 && memcmp(s, "[no frames]", 11) == 0);
}

void flamme_fnagg_stack(void *ctx, const char *stack, uint64_t w)
{
    struct flamme_fnagg *a = ctx;
    a->line++;
    a->weight += w;
    size_t rootlen = strcspn(stack, ";");
    if (rootlen == 11 && memcmp(stack, "[truncated]", 11) == 0)
        a->truncated += w;
    else if (rootlen == 8 && memcmp(stack, "[broken]", 8) == 0)
        a->broken += w;
    else if (flamme_is_thread_root(stack, rootlen))
        a->complete += w;

    struct flamme_fn *leaf = NULL;
    for (const char *p = stack; *p;) {
        size_t n = strcspn(p, ";");
        if (!is_marker(p, n)) {
            struct flamme_fn *f = flamme_fnagg_get(a, p, n);
            if (!f) {
                a->oom = 1;
                return;
            }
            if (f->stamp != a->line) {
                f->stamp = a->line;
                f->total += w;
            }
            leaf = f;
        }
        p += n;
        if (*p == ';')
            p++;
    }
    if (leaf)
        leaf->self += w;
}

int flamme_fn_by_self(const void *x, const void *y)
{
    const struct flamme_fn *a = *(struct flamme_fn *const *)x, *b = *(struct flamme_fn *const *)y;
    if (a->self != b->self)
        return a->self > b->self ? -1 : 1;
    return strcmp(a->name, b->name);
}

int flamme_fn_by_total(const void *x, const void *y)
{
    const struct flamme_fn *a = *(struct flamme_fn *const *)x, *b = *(struct flamme_fn *const *)y;
    if (a->total != b->total)
        return a->total > b->total ? -1 : 1;
    return strcmp(a->name, b->name);
}

struct flamme_fn **flamme_fnagg_sorted(const struct flamme_fnagg *a, int by_total, size_t *n)
{
    struct flamme_fn **v = malloc((a->n ? a->n : 1) * sizeof *v);
    if (!v)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < a->cap; i++)
        if (a->fns[i].name)
            v[k++] = &a->fns[i];
    qsort(v, k, sizeof *v, by_total ? flamme_fn_by_total : flamme_fn_by_self);
    *n = k;
    return v;
}

void flamme_fnagg_free(struct flamme_fnagg *a)
{
    for (size_t i = 0; i < a->cap; i++)
        free(a->fns[i].name);
    free(a->fns);
    a->fns = NULL;
    a->cap = a->n = 0;
}
