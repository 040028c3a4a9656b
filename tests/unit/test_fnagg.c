/*
 * tests/unit/test_fnagg.c — tools/fnagg.c, the per-function table of
 * `flamme report` and `flamme top`: self goes to the leaf, total once per
 * distinct function of a stack (recursion counts once), markers are no
 * function, root classes are summed, and the counts survive the table's
 * growths (stacks of thousands of new names each).
 */
#include "tests/unit/check.h"
#include "tools/fnagg.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct flamme_fn *find(struct flamme_fnagg *a, const char *name)
{
    for (size_t i = 0; i < a->n; i++)
        if (strcmp(a->fns[i].name, name) == 0)
            return &a->fns[i];
    return NULL;
}

TEST(self_total_and_markers)
{
    struct flamme_fnagg a = { 0 };
    flamme_fnagg_stack(&a, "main;f;g;f", 3);   /* recursion: f's total once */
    flamme_fnagg_stack(&a, "main;f;h", 2);
    flamme_fnagg_stack(&a, "[truncated];g", 5);
    flamme_fnagg_stack(&a, "main;f;[broken]", 1); /* marker leaf: self to f */
    CHECK(!a.oom && a.weight == 11 && a.truncated == 5 && a.complete == 6);
    const struct flamme_fn *f = find(&a, "f"), *g = find(&a, "g"), *m = find(&a, "main");
    CHECK(f && f->self == 4 && f->total == 6);
    CHECK(g && g->self == 5 && g->total == 8);
    CHECK(m && m->self == 0 && m->total == 6);
    CHECK(!find(&a, "[truncated]") && !find(&a, "[broken]"));
    size_t n;
    struct flamme_fn **v = flamme_fnagg_sorted(&a, 0, &n);
    CHECK(v && n == 4 && strcmp(v[0]->name, "g") == 0 && strcmp(v[1]->name, "f") == 0);
    free(v);
    v = flamme_fnagg_sorted(&a, 1, &n);
    CHECK(v && n == 4 && strcmp(v[0]->name, "g") == 0 && v[3]->total == 2);
    /* main and f both have total 6: main (self 0), the caller, first */
    CHECK(v && strcmp(v[1]->name, "main") == 0 && strcmp(v[2]->name, "f") == 0);
    free(v);
    flamme_fnagg_free(&a);
}

TEST(counts_survive_growth)
{
    enum { DEPTH = 3000, STACKS = 4 };
    struct flamme_fnagg a = { 0 };
    char *s = malloc(DEPTH * 16);
    CHECK(s != NULL);
    if (!s)
        return;
    for (int k = 0; k < STACKS; k++) { /* each stack: DEPTH new names, then "leaf" */
        size_t len = 0;
        for (int d = 0; d < DEPTH; d++)
            len += (size_t)sprintf(s + len, "s%d_%d;", k, d);
        strcpy(s + len, "leaf");
        flamme_fnagg_stack(&a, s, (uint64_t)k + 1);
    }
    CHECK(!a.oom && a.n == STACKS * DEPTH + 1);
    const struct flamme_fn *leaf = find(&a, "leaf"), *x = find(&a, "s2_1234");
    CHECK(leaf && leaf->self == 10 && leaf->total == 10);
    CHECK(x && x->self == 0 && x->total == 3);
    CHECK(flamme_fnagg_get(&a, "s3_2999", 7) == find(&a, "s3_2999"));
    free(s);
    flamme_fnagg_free(&a);
    CHECK(a.n == 0 && a.fns == NULL);
}

int main(void)
{
    RUN(self_total_and_markers);
    RUN(counts_survive_growth);
    return CHECK_DONE();
}
