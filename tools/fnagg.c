/*
 * tools/fnagg.c — per-function self/total weights of folded stacks (see
 * tools/fnagg.h). Called by `flamme report` and `flamme top`.
 */
#include "tools/fnagg.h"

#include <stdlib.h>
#include <string.h>

#include "common/hash.h"
#include "common/roots.h"

static uint64_t name_hash(const void *ctx, uint32_t i)
{
    const char *name = ((const struct flamme_fnagg *)ctx)->fns[i].name;
    return flamme_table_hash(name, strlen(name));
}

static int name_eq(const void *ctx, uint32_t i, const void *key, size_t len)
{
    const char *name = ((const struct flamme_fnagg *)ctx)->fns[i].name;
    return strncmp(name, key, len) == 0 && name[len] == '\0';
}

struct flamme_fn *flamme_fnagg_get(struct flamme_fnagg *a, const char *s, size_t n)
{
    uint32_t *slot = flamme_itab_probe(&a->index, flamme_table_hash(s, n), name_eq, a, s, n);
    if (slot && *slot)
        return &a->fns[*slot - 1];
    if (a->n >= UINT32_MAX - 1 || flamme_itab_reserve(&a->index, a->n, 1024, name_hash, a) < 0)
        return NULL;
    if (a->n == a->cap) {
        size_t nc = a->cap ? 2 * a->cap : 512;
        struct flamme_fn *f = realloc(a->fns, nc * sizeof *f);
        if (!f)
            return NULL;
        a->fns = f;
        a->cap = nc;
    }
    char *name = strndup(s, n);
    if (!name)
        return NULL;
    a->fns[a->n] = (struct flamme_fn){ name, 0, 0, 0 };
    /* the table may have grown: probe again for the empty slot */
    *flamme_itab_probe(&a->index, flamme_table_hash(s, n), name_eq, a, s, n) = (uint32_t)a->n + 1;
    return &a->fns[a->n++];
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

    /* an index, not a pointer: a later get may move the array */
    size_t leaf = SIZE_MAX;
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
            leaf = (size_t)(f - a->fns);
        }
        p += n;
        if (*p == ';')
            p++;
    }
    if (leaf != SIZE_MAX)
        a->fns[leaf].self += w;
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
    if (a->self != b->self) /* callers before the callees that share their total */
        return a->self < b->self ? -1 : 1;
    return strcmp(a->name, b->name);
}

struct flamme_fn **flamme_fnagg_sorted(const struct flamme_fnagg *a, int by_total, size_t *n)
{
    struct flamme_fn **v = malloc((a->n ? a->n : 1) * sizeof *v);
    if (!v)
        return NULL;
    for (size_t i = 0; i < a->n; i++)
        v[i] = &a->fns[i];
    qsort(v, a->n, sizeof *v, by_total ? flamme_fn_by_total : flamme_fn_by_self);
    *n = a->n;
    return v;
}

void flamme_fnagg_free(struct flamme_fnagg *a)
{
    for (size_t i = 0; i < a->n; i++)
        free(a->fns[i].name);
    free(a->fns);
    flamme_itab_free(&a->index);
    a->fns = NULL;
    a->cap = a->n = 0;
}
